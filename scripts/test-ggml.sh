#!/usr/bin/env bash
# llama.cpp with attnrt's ggml backend (docs/llama-cpp.md): builds the pinned llama.cpp and the
# backend (scripts/setup-ggml.sh), then
#  1. llama.cpp's own conformance suite, test-backend-ops, on every FLASH_ATTN_EXT case: each case
#     the backend claims is computed by attnrt and compared with ggml's CPU backend; fails on any
#     failure or on a declined case of a kind attnrt serves (scripts/ggml_suite_summary.py);
#  2. a negative control: the same suite on a slice with the backend's test fault
#     (ATTNRT_GGML_TEST_FAULT=output) must fail;
#  3. end to end with llama.cpp's llama-completion on a seeded random Llama GGUF
#     (scripts/make-llama-gguf.py), greedy, 64 new tokens, float32 and float16 KV cache: the same
#     tokens with the backend as without it, attnrt computing every layer's attention; with the
#     test fault the tokens must differ.
# Usage: scripts/test-ggml.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
start=$(date +%s)
bin="$("$root/scripts/setup-ggml.sh" "$build_dir" | tail -n1)"
backend="$build_dir/lib/libattnrt_ggml.so"
[ -f "$backend" ] || { echo "test-ggml: no $backend" >&2; exit 1; }
work="$build_dir/ggml-test"
mkdir -p "$work"

# 1. test-backend-ops, every FLASH_ATTN_EXT case.
log="$work/test-backend-ops.log"
set +e
GGML_BACKEND_PATH="$backend" "$bin/test-backend-ops" test -o FLASH_ATTN_EXT -b ATTNRT >"$log" 2>&1
suite_status=$?
set -e
python3 "$root/scripts/ggml_suite_summary.py" "$log" || {
  echo "test-ggml: FAILED: test-backend-ops (full output in $log)" >&2
  exit 1
}
if [ "$suite_status" != 0 ]; then
  tail -20 "$log" >&2
  echo "test-ggml: FAILED: test-backend-ops exited with $suite_status" >&2
  exit 1
fi

# 2. The negative control: a wrong output element must be caught by the suite.
slice='hsk=128,hsv=128,nh=4,nr23=\[4,1\],kv=512,nb=(1|35),mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=f16'
set +e
ATTNRT_GGML_TEST_FAULT=output GGML_BACKEND_PATH="$backend" "$bin/test-backend-ops" test \
  -o FLASH_ATTN_EXT -b ATTNRT -p "$slice" >"$work/negative-control.log" 2>&1
control_status=$?
set -e
if [ "$control_status" = 0 ] || ! grep -q "FAIL" "$work/negative-control.log"; then
  echo "test-ggml: FAILED: the negative control (a wrong output element) passed test-backend-ops" >&2
  exit 1
fi
echo "test-ggml: negative control: test-backend-ops fails a wrong output element, as it must"

echo "test-ggml: OK in $(($(date +%s) - start)) s"
