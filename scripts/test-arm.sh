#!/usr/bin/env bash
# Cross-builds attnrt for aarch64 Linux (runtime, cpu_arm and sparse_mla plugins, plugin-inspect,
# GoogleTest suite) into build-arm/ and runs ctest under qemu-aarch64 user emulation. Debian 12
# packages: the cross compiler, qemu-user, and the arm64 multiarch libraries the build links
# (installed once; a no-op when present).
#   scripts/test-arm.sh [BUILD_DIR]     default build-arm
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build-arm}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# libcpuinfo-dev:arm64 is left out on purpose: it cannot be co-installed with the host's
# libcpuinfo-dev (see cmake/toolchains/aarch64-linux-gnu.cmake).
packages=(
  g++-aarch64-linux-gnu qemu-user
  libboost-dev:arm64 libboost-program-options-dev:arm64
  libgtest-dev:arm64 libgmock-dev:arm64 libcpuinfo0:arm64
)
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "test-arm: installing ${missing[*]}"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo_cmd[@]}" dpkg --add-architecture arm64
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# The GoogleTest suite and the tools; the bindings (host Python/JDK) and benchmarks stay native.
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  --toolchain "$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DATTNRT_BUILD_BINDINGS=OFF -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_CUDA=OFF -DATTNRT_TEST_REDUCED_MATRIX=ON
cmake --build "$build_dir" -j "$(nproc)"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
