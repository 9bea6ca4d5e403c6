#!/usr/bin/env bash
# One-shot GPU check of the CUDA plugins (cuda_xqa, cuda_flash) on a machine with an NVIDIA GPU:
#   1. configures and builds attnrt with CUDA for sm_80 and sm_90 (Release, 16 jobs) into
#      build-gpu/ (or $ATTNRT_GPU_BUILD_DIR);
#   2. lists the plugins (the CUDA ones must be available) and explains a decode problem;
#   3. runs attnrt_gqa_cuda_check: every CUDA kernel against the float64 reference over a matrix
#      of shapes and options (fresh seeded random inputs, poisoned outputs), then CUDA-event timings
#      with the L2 flushed between samples, as TFLOP/s and GB/s next to the measured device copy
#      bandwidth and cuBLAS bf16 GEMM rate, ending with a summary table.
# Exit status: 0 when everything passed; anything else names the step that failed. Designed to
# finish well under 8 minutes on an H200 (set ATTNRT_CHECK_QUICK=1 to skip the 8k prefills;
# ATTNRT_GPU_PREBUILT=1 runs an existing build in the build folder instead of building).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${ATTNRT_GPU_BUILD_DIR:-$root/build-gpu}"
start=$(date +%s)
step() { printf '\n==== [%4ss] %s ====\n' "$(( $(date +%s) - start ))" "$*"; }
fail() { printf '\n**** GPU CHECK FAILED: %s ****\n' "$*" >&2; exit 1; }
trap 'fail "command failed at line $LINENO: $BASH_COMMAND"' ERR

step "environment"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "nvcc not found"
export PATH="$PATH:/usr/local/cuda/bin"
nvcc --version | tail -n 2
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv || fail "nvidia-smi cannot query the GPU"
else
  echo "nvidia-smi not found (continuing; the check binary reports the device itself)"
fi

if [ "${ATTNRT_GPU_PREBUILT:-0}" = 1 ]; then
  # A build made elsewhere (same paths), e.g. on a machine without a GPU: only run it.
  step "using the prebuilt tree in $build"
  for f in bin/plugin-inspect bin/attnrt_gqa_cuda_check lib/attnrt/plugins/libattnrt_cuda_xqa.so \
      lib/attnrt/plugins/libattnrt_cuda_flash.so; do
    [ -e "$build/$f" ] || fail "ATTNRT_GPU_PREBUILT=1 but $build/$f is missing"
  done
else
step "configure (CUDA architectures 80;90)"
mkdir -p "$build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! cmake -S "$root" -B "$build" ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE=Release \
    -DATTNRT_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="80;90" -DATTNRT_BUILD_TESTS=OFF \
    -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_BINDINGS=OFF > "$build/check-configure.log" 2>&1; then
  tail -n 40 "$build/check-configure.log"
  fail "cmake configure failed (full log: $build/check-configure.log; needs Boost, cpuinfo: see scripts/setup.sh)"
fi
grep -q "CUDA plugins for architectures 80;90" "$build/check-configure.log" ||
  fail "configure did not enable the CUDA plugins"

step "build (-j16)"
build_start=$(date +%s)
cmake --build "$build" -j 16 --target attnrt_cuda_flash attnrt_cuda_xqa attnrt_cpu_x86 \
  plugin-inspect attnrt_gqa_cuda_check || fail "build failed"
echo "build took $(( $(date +%s) - build_start )) s"
fi

step "plugins"
"$build/bin/plugin-inspect" list | tee "$build/check-plugins.txt"
for plugin in cuda_xqa cuda_flash; do
  grep -E "^$plugin .*  available$" "$build/check-plugins.txt" >/dev/null ||
    fail "plugin $plugin is not available on this machine (see its line above)"
done
"$build/bin/plugin-inspect" explain --model llama-3-8b --seq-len 1 --past-len 32768 \
  --shared-buffer --dtype bfloat16 --device cuda
"$build/bin/plugin-inspect" explain --model llama-3-8b --seq-len 4096 --dtype bfloat16 \
  --device cuda

step "correctness and timings"
args=()
[ "${ATTNRT_CHECK_QUICK:-0}" = 1 ] && args=(--quick)
timeout 420 "$build/bin/attnrt_gqa_cuda_check" ${args[@]+"${args[@]}"} ||
  fail "attnrt_gqa_cuda_check failed (exit $?; see FAIL lines above)"

step "done: every check passed"
