#!/usr/bin/env bash
# Cross-builds attnrt for aarch64 Linux (runtime, cpu_arm and sparse_mla plugins, plugin-inspect,
# GoogleTest suite) into build-arm/ and runs ctest under qemu-aarch64 user emulation, every
# runtime the tests make with default options on 2 threads (ATTNRT_TEST_NUM_THREADS; tests that
# ask for a thread count get it), so the pool's cross-thread paths run on the Arm build whatever
# the host's core count. Debian 12 packages: the cross compiler, qemu-user, and the arm64
# multiarch libraries the build links (installed once; a no-op when present).
#   scripts/test-arm.sh [BUILD_DIR]     default build-arm
#   ATTNRT_TEST_NUM_THREADS=N scripts/test-arm.sh   another thread count
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
  g++-aarch64-linux-gnu qemu-user ccache
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
# Through ccache (scripts/ccache-launcher.sh).
source "$root/scripts/ccache-launcher.sh"
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${ccache_args[@]}" \
  --toolchain "$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DATTNRT_BUILD_BINDINGS=OFF -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_CUDA=OFF -DATTNRT_TEST_REDUCED_MATRIX=ON
cmake --build "$build_dir" -j "$(nproc)"

# The arm64 loader and libc are the multiarch ones in /, a matched pair. A QEMU_LD_PREFIX (or
# qemu's -L) naming the cross compiler's sysroot, /usr/aarch64-linux-gnu, loads that sysroot's
# ld-linux-aarch64.so.1 but, through /etc/ld.so.cache, the multiarch libc.so.6: when the two come
# from different glibc builds, libc reads the loader's private data at the wrong offsets and the
# first pthread_create of the process loops forever (any program that starts a thread, attnrt's
# pool included; with one thread nothing is started and it runs).
if [ -n "${QEMU_LD_PREFIX:-}" ]; then
  echo "test-arm: ignoring QEMU_LD_PREFIX=$QEMU_LD_PREFIX (the arm64 libraries are in /)" >&2
  unset QEMU_LD_PREFIX
fi
# The emulator must start threads before the suite is worth running: fail in seconds, not
# after ctest's per-test timeout.
qemu=$(sed -n 's/^ATTNRT_QEMU_AARCH64:FILEPATH=//p' "$build_dir/CMakeCache.txt")
if ! timeout 120 "$qemu" "$build_dir/tests/thread_pool_test" \
  --gtest_filter=ThreadPoolTest.ExceptionOnAnyThreadBecomesTheCallsStatus >/dev/null; then
  echo "test-arm: thread_pool_test did not pass under $qemu within 120 s: the emulator does" \
    "not run threads (see the QEMU_LD_PREFIX note in this script)" >&2
  exit 1
fi
export ATTNRT_TEST_NUM_THREADS="${ATTNRT_TEST_NUM_THREADS:-2}"
export ATTNRT_NUM_THREADS="$ATTNRT_TEST_NUM_THREADS"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
