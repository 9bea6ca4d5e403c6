#!/usr/bin/env bash
# Installs attnrt's build dependencies (Debian 12 packages) and builds the project into build/.
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]
#   ATTNRT_SANITIZE=address,undefined scripts/setup.sh build-asan   builds with sanitizers.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
shift || true
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev
  libcpuinfo-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libxtensor-dev nlohmann-json3-dev
  python3 python3-venv
  swig python3-dev default-jdk-headless junit4
)
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
if [ -n "${ATTNRT_SANITIZE:-}" ]; then
  cmake_args+=(-DATTNRT_SANITIZE="$ATTNRT_SANITIZE" -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DATTNRT_BUILD_BENCH=OFF)
fi
cmake "${cmake_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
