#!/usr/bin/env bash
# Installs attnrt's build dependencies (Debian 12 packages) and builds the project into build/.
# Usage: scripts/setup.sh [--runtime] [BUILD_DIR] [extra cmake args...]
#   --runtime   only the runtime, the CPU plugins and plugin-inspect: the packages they need, and
#               tests, benchmarks, bindings and CUDA plugins configured off (scripts/quickstart.sh)
#   ATTNRT_SANITIZE=address,undefined scripts/setup.sh build-asan   builds with sanitizers.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runtime_only=0
if [ "${1:-}" = "--runtime" ]; then
  runtime_only=1
  shift
fi
build_dir="${1:-build}"
shift || true
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libboost-dev libboost-program-options-dev
  libcpuinfo-dev
  libxtensor-dev nlohmann-json3-dev
  python3
)
if [ "$runtime_only" = 0 ]; then
  packages+=(
    googletest libgtest-dev libgmock-dev libbenchmark-dev
    python3-venv
    swig python3-dev default-jdk-headless junit4
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

cmake_args=(-S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release)
# C and C++ objects through ccache (scripts/ccache-launcher.sh).
source "$root/scripts/ccache-launcher.sh"
cmake_args+=("${ccache_args[@]}")
if [ "$runtime_only" = 1 ]; then
  cmake_args+=(-DATTNRT_BUILD_TESTS=OFF -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_BINDINGS=OFF
    -DATTNRT_BUILD_CUDA=OFF)
fi
if [ -n "${ATTNRT_SANITIZE:-}" ]; then
  # Line tables only (-g1): sanitizer reports keep file:line, and the instrumented kernel files
  # compile in about half the time of full debug information (the longest of them 313 s -> 172 s).
  cmake_args+=(-DATTNRT_SANITIZE="$ATTNRT_SANITIZE" -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DATTNRT_BUILD_BENCH=OFF
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
fi
cmake "${cmake_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
