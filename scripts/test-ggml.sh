#!/usr/bin/env bash
# llama.cpp with attnrt's ggml backend (docs/llama-cpp.md): builds the pinned llama.cpp and the
# backend (scripts/setup-ggml.sh), then
#  0. attnrt_ggml_test (tests/bindings/ggml): the backend against a float64 reference where the
#     mask decides whether causal attention may run;
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

# 0. The backend against a float64 reference on masks of llama.cpp's shapes (causal over a cache,
#    several sequences in one cache, masks that only look causal).
cmake --build "$build_dir" -j "$(nproc)" --target attnrt_ggml_test
"$build_dir/bin/attnrt_ggml_test" --gtest_brief=1

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

# 3. End to end: llama-completion, greedy, on a seeded random Llama GGUF whose attention is sharp
#    (a wrong key set changes the tokens). The prompt (about 330 tokens) goes in ubatches of 128,
#    so later ubatches attend over the cache with llama.cpp's causal mask; then 64 tokens decode.
cache="${ATTNRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnrt}"
venv="$cache/gguf-venv"
if ! "$venv/bin/python" -c "import numpy, yaml" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy pyyaml
fi
model="$work/llama-4x1024.gguf"
"$venv/bin/python" "$root/scripts/make-llama-gguf.py" "$model" --seed 0 --qk-std 0.08 \
  --lm-head-std 0.2 --dtype f16 --gguf-py "$bin/../../src/gguf-py" >/dev/null
prompt="$(printf 'the quick brown fox jumps over the lazy dog while seven wizards quietly hex %.0s' 1 2 3 4 5 6)"
layers=4
generate() { # OUT KV_TYPE [env...]
  local out="$1" kv="$2"
  shift 2
  env "$@" "$bin/llama-completion" -m "$model" -p "$prompt" -n 64 --temp 0 -s 1 -no-cnv -fa on \
    -t 2 -c 2048 -ub 128 -ctk "$kv" -ctv "$kv" >"$out" 2>"$out.log" </dev/null
}
for kv in f32 f16; do
  generate "$work/cpu-$kv.txt" "$kv" -u GGML_BACKEND_PATH
  generate "$work/attnrt-$kv.txt" "$kv" GGML_BACKEND_PATH="$backend" ATTNRT_GGML_DEBUG=1
  computed="$(sed -n 's/^attnrt-ggml: \([0-9]*\) FLASH_ATTN_EXT nodes computed by attnrt$/\1/p' \
    "$work/attnrt-$kv.txt.log")"
  if [ -z "$computed" ] || [ "$computed" -lt $((layers * 64)) ]; then
    echo "test-ggml: FAILED: llama-completion ($kv KV) ran ${computed:-no} attention nodes on attnrt" \
      "(expected at least $((layers * 64)); log: $work/attnrt-$kv.txt.log)" >&2
    exit 1
  fi
  if ! cmp -s "$work/cpu-$kv.txt" "$work/attnrt-$kv.txt"; then
    echo "test-ggml: FAILED: greedy tokens ($kv KV) differ from llama.cpp's CPU backend:" >&2
    diff <(tr ' ' '\n' <"$work/cpu-$kv.txt") <(tr ' ' '\n' <"$work/attnrt-$kv.txt") | head -20 >&2
    exit 1
  fi
  echo "test-ggml: llama-completion, $kv KV: the same 64 greedy tokens as the CPU backend," \
    "$computed attention nodes on attnrt"
  # The negative control: every row missing its last key must change the tokens.
  set +e
  generate "$work/fault-$kv.txt" "$kv" GGML_BACKEND_PATH="$backend" ATTNRT_GGML_TEST_FAULT=last-key
  set -e
  if cmp -s "$work/cpu-$kv.txt" "$work/fault-$kv.txt"; then
    echo "test-ggml: FAILED: the negative control (each row missing its last key) gave the same" \
      "tokens ($kv KV): the check cannot see a wrong key range" >&2
    exit 1
  fi
done

echo "test-ggml: OK in $(($(date +%s) - start)) s"
