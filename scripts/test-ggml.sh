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
#  3. end to end on a seeded random Llama GGUF (scripts/make-llama-gguf.py), float16 and bfloat16
#     KV caches: llama-perplexity's KL divergence from the CPU backend within the CPU backend's own
#     spread, greedy llama-completion text kept wherever the CPU backend's two paths agree, and a
#     negative control (each row missing its last key) far outside.
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

# 3. End to end on a seeded random Llama GGUF whose attention is far from uniform
#    (scripts/make-llama-gguf.py --qk-std 0.04: the fault below moves the output distribution by a
#    KL divergence 10^4 times attnrt's). llama.cpp casts a float32 cache to float16 before flash
#    attention, so the cache types that reach the backend are float16 and bfloat16.
#    a. llama.cpp's own comparison: llama-perplexity --kl-divergence over about 1900 tokens in
#       chunks of 256 (ubatches of 128, so later ubatches attend over the cache with llama.cpp's
#       causal mask), attnrt against the CPU backend's logits; the bound is 3 times the divergence
#       between the CPU backend's own two attention paths (-fa on, -fa off), or 1e-5.
#    b. llama-completion, greedy, 64 new tokens: attnrt's text must keep every byte on which the CPU
#       backend's two paths agree (where those two split, a near-tie, any continuation is right);
#       for bfloat16 caches reported only (attnrt's output is rounded to bfloat16 there, ggml's is
#       float32, which moves a greedy chain at its first near-tie).
#    c. The negative control: every row missing its last key (ATTNRT_GGML_TEST_FAULT=last-key) must
#       exceed 100 times attnrt's divergence.
#    d. a. again with two sequences in every batch (-b 512: two cache streams per node).
#    e. Q8_0 and Q4_0 caches (attnrt's PER_BLOCK_32, dequantized in its kernels), and a float16 K
#       cache with a Q4_0 V cache (-ctk f16 -ctv q4_0: attnrt's independent K/V cache types, run by
#       its row-pipeline kernels; same bounds, no negative control): ggml's CPU backend
#       quantizes the query to Q8_0 for them and attnrt keeps it float32, so the two differ by that
#       rounding. Stated tolerance: attnrt's divergence from the CPU backend's logits with the same
#       cache type is at most the divergence the cache's quantization itself causes (the CPU
#       backend's Q8_0/Q4_0 logits against its float16 ones), attnrt is no farther from the float16
#       logits than the CPU backend is (within 25 %), and the negative control exceeds 4 times
#       attnrt's divergence (Q8_0; for Q4_0, whose quantization moves this model's logits a KL
#       divergence of 0.6, the first bound only: test-backend-ops checks its nodes closely).
cache="${ATTNRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnrt}"
venv="$cache/gguf-venv"
if ! "$venv/bin/python" -c "import numpy, yaml" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy pyyaml
fi
model="$work/llama-4x1024.gguf"
"$venv/bin/python" "$root/scripts/make-llama-gguf.py" "$model" --seed 0 --qk-std 0.04 \
  --lm-head-std 0.2 --dtype f32 --gguf-py "$bin/../../src/gguf-py" >/dev/null
python3 - "$work/text.txt" <<'PY'
import random, sys
words = ("the quick brown fox jumps over lazy dog while seven wizards quietly hex and a bold knight "
         "rides north to find gold in old caves under misty hills where river meets sea").split()
r = random.Random(0)
open(sys.argv[1], "w").write(" ".join(r.choice(words) for _ in range(1500)) + "\n")
PY
prompt="$(head -c 450 "$work/text.txt")"
layers=4
on_attnrt=(GGML_BACKEND_PATH="$backend" ATTNRT_GGML_DEBUG=1)
on_cpu=(-u GGML_BACKEND_PATH)
# llama-perplexity against the CPU backend's saved logits; BATCH 512 puts two 256-token sequences
# (two cache streams) in every batch.
# llama-perplexity prints through llama.cpp's asynchronous logger, which this llama.cpp leaks at
# exit on purpose (common_log_main in common/log.cpp: "this design may cause logs to be lost if not
# flushed before the program exits"): under a loaded machine a run sometimes exits 0 without its
# summary lines, twice in a row once, which a later run printed (same numbers). So a run whose log
# lacks the summary is run again, up to four times in all, saying so.
# KV names the cache type of K and V, or K:V two types.
perplexity_against() { # LOG KV FA BATCH BASE [env...]: logits against the saved ones in BASE
  local log="$1" kv="$2" fa="$3" batch="$4" base="$5"
  shift 5
  local attempt
  for attempt in 1 2 3 4; do
    env "$@" "$bin/llama-perplexity" -m "$model" -f "$work/text.txt" -c 256 -b "$batch" \
      -ub 128 -t 2 -fa "$fa" -ctk "${kv%%:*}" -ctv "${kv##*:}" --kl-divergence-base "$base" \
      --kl-divergence \
      >"$log" 2>&1 </dev/null
    grep -q '^Mean *KLD:' "$log" && return 0
    echo "test-ggml: $log has no KL divergence summary (attempt $attempt); its last lines:" >&2
    tail -n 3 "$log" >&2
  done
}
perplexity() { # LOG KV FA BATCH [env...]: against the CPU backend's logits with the same cache
  local log="$1" kv="$2" fa="$3" batch="$4"
  shift 4
  perplexity_against "$log" "$kv" "$fa" "$batch" "$work/base-$kv-$batch.kld" "$@"
}
save_base() { # KV BATCH: the CPU backend's logits
  env "${on_cpu[@]}" "$bin/llama-perplexity" -m "$model" -f "$work/text.txt" -c 256 -b "$2" \
    -ub 128 -t 2 -fa on -ctk "${1%%:*}" -ctv "${1##*:}" --kl-divergence-base "$work/base-$1-$2.kld" \
    >"$work/ppl-cpu-$1-$2.log" 2>&1 </dev/null
}
mean_kld() { sed -n 's/^Mean *KLD: *\([0-9.e+-]*\).*/\1/p' "$1"; }
same_top() { sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$1"; }
# The backend's count at exit; llama.cpp's asynchronous logger may print the start of a line
# before it, so it is looked for anywhere on a line.
nodes() { sed -n 's/.*attnrt-ggml: \([0-9]*\) FLASH_ATTN_EXT nodes computed by attnrt$/\1/p' "$1" | tail -n1; }
# llama-completion prints through a logging thread it never joins at exit, so the end of its output
# can be lost: a run whose log lacks the final timing line is run again.
generate() { # OUT KV FA [env...]
  local out="$1" kv="$2" fa="$3" try
  shift 3
  for try in 1 2 3; do
    env "$@" "$bin/llama-completion" -m "$model" -p "$prompt" -n 64 --ignore-eos --temp 0 -s 1 \
      -no-cnv -fa "$fa" -t 2 -c 1024 -ub 128 -ctk "$kv" -ctv "$kv" >"$out" 2>"$out.log" </dev/null ||
      return 1
    grep -q "eval time" "$out.log" && return 0
  done
  echo "test-ggml: llama-completion's output was cut short three times ($out.log)" >&2
  return 1
}
common_prefix() { # the number of leading bytes two files share
  python3 -c 'import os, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
print(next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b))))' "$1" "$2"
}
within_spread() { # ATTNRT SPREAD: attnrt's divergence within 3 times the CPU backend's own, or 1e-5
  python3 -c 'import sys; a, s = (float(x) for x in sys.argv[1:3])
sys.exit(0 if a <= max(3 * s, 1e-5) else 1)' "$1" "$2" || {
    echo "test-ggml: FAILED: KL divergence $1 above max(3 x $2, 1e-5)" >&2
    return 1
  }
}
for kv in f16 bf16; do
  save_base "$kv" 256
  perplexity "$work/ppl-attnrt-$kv.log" "$kv" on 256 "${on_attnrt[@]}"
  perplexity "$work/ppl-cpu-off-$kv.log" "$kv" off 256 "${on_cpu[@]}"
  perplexity "$work/ppl-fault-$kv.log" "$kv" on 256 GGML_BACKEND_PATH="$backend" \
    ATTNRT_GGML_TEST_FAULT=last-key
  attnrt="$(mean_kld "$work/ppl-attnrt-$kv.log")"
  spread="$(mean_kld "$work/ppl-cpu-off-$kv.log")"
  fault="$(mean_kld "$work/ppl-fault-$kv.log")"
  computed="$(nodes "$work/ppl-attnrt-$kv.log")"
  generate "$work/cpu-$kv.txt" "$kv" on "${on_cpu[@]}"
  generate "$work/cpu-off-$kv.txt" "$kv" off "${on_cpu[@]}"
  generate "$work/attnrt-$kv.txt" "$kv" on "${on_attnrt[@]}"
  agree="$(common_prefix "$work/cpu-$kv.txt" "$work/cpu-off-$kv.txt")"
  kept_on="$(common_prefix "$work/cpu-$kv.txt" "$work/attnrt-$kv.txt")"
  kept_off="$(common_prefix "$work/cpu-off-$kv.txt" "$work/attnrt-$kv.txt")"
  gen_nodes="$(nodes "$work/attnrt-$kv.txt.log")"
  echo "test-ggml: $kv KV: KL divergence from the CPU backend: attnrt $attnrt (same top token" \
    "$(same_top "$work/ppl-attnrt-$kv.log") %), the CPU backend's -fa off $spread, the negative" \
    "control $fault; greedy text: attnrt keeps $kept_on bytes of the CPU backend's (-fa off:" \
    "$kept_off), whose two paths agree on $agree of $(wc -c <"$work/cpu-$kv.txt"); attnrt computed" \
    "${computed:-0} + ${gen_nodes:-0} attention nodes"
  if ! within_spread "$attnrt" "$spread" ||
    ! python3 - "$attnrt" "$spread" "$fault" "${computed:-0}" "${gen_nodes:-0}" "$layers" \
      "$agree" "$kept_on" "$kept_off" "$kv" <<'PY'; then
import sys
a, fault = float(sys.argv[1]), float(sys.argv[3])
computed, gen_nodes, layers, agree, kept_on, kept_off = (int(x) for x in sys.argv[4:10])
errors = []
if computed < layers * 10 or gen_nodes < layers * 64:
    errors.append(f"attnrt computed {computed} / {gen_nodes} attention nodes")
if fault < 100 * max(a, 1e-7):
    errors.append(f"the negative control's divergence {fault} is not 100 x attnrt's {a}")
# bfloat16: attnrt rounds its output to bfloat16 (its output type is the cache's) where ggml keeps
# float32, so greedy text is reported, not required, there; the divergence bound above holds.
if sys.argv[10] == "f16" and max(kept_on, kept_off) < agree:
    errors.append(f"greedy text leaves the CPU backend's at byte {max(kept_on, kept_off)}, "
                  f"before its two paths split ({agree})")
for e in errors:
    print(f"test-ggml: FAILED: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    echo "test-ggml: FAILED ($kv KV; logs in $work)" >&2
    exit 1
  fi
done

# d. Two sequences in every batch (two cache streams per node), float16.
save_base f16 512
perplexity "$work/ppl-attnrt-f16-512.log" f16 on 512 "${on_attnrt[@]}"
perplexity "$work/ppl-cpu-off-f16-512.log" f16 off 512 "${on_cpu[@]}"
attnrt="$(mean_kld "$work/ppl-attnrt-f16-512.log")"
spread="$(mean_kld "$work/ppl-cpu-off-f16-512.log")"
computed="$(nodes "$work/ppl-attnrt-f16-512.log")"
echo "test-ggml: f16 KV, two sequences per batch: KL divergence from the CPU backend: attnrt" \
  "$attnrt, the CPU backend's -fa off $spread; attnrt computed ${computed:-0} attention nodes"
if [ "${computed:-0}" -eq 0 ] || ! within_spread "$attnrt" "$spread"; then
  echo "test-ggml: FAILED: two sequences per batch (logs in $work)" >&2
  exit 1
fi

# e. Q8_0 and Q4_0 caches, and float16 K with Q4_0 V.
versus_f16() { # LOG KV [env...]: logits with a KV cache against the CPU backend's float16 ones
  local log="$1" kv="$2"
  shift 2
  perplexity_against "$log" "$kv" on 256 "$work/base-f16-256.kld" "$@"
}
for kv in q8_0 q4_0 f16:q4_0; do
  save_base "$kv" 256
  perplexity "$work/ppl-attnrt-$kv.log" "$kv" on 256 "${on_attnrt[@]}"
  versus_f16 "$work/ppl-cpu-$kv-vs-f16.log" "$kv" "${on_cpu[@]}"
  attnrt="$(mean_kld "$work/ppl-attnrt-$kv.log")"
  quantization="$(mean_kld "$work/ppl-cpu-$kv-vs-f16.log")"
  fault="not run"
  attnrt_f16="not run"
  if [ "$kv" = q8_0 ]; then
    perplexity "$work/ppl-fault-$kv.log" "$kv" on 256 GGML_BACKEND_PATH="$backend" \
      ATTNRT_GGML_TEST_FAULT=last-key
    versus_f16 "$work/ppl-attnrt-$kv-vs-f16.log" "$kv" "${on_attnrt[@]}"
    fault="$(mean_kld "$work/ppl-fault-$kv.log")"
    attnrt_f16="$(mean_kld "$work/ppl-attnrt-$kv-vs-f16.log")"
  fi
  computed="$(nodes "$work/ppl-attnrt-$kv.log")"
  echo "test-ggml: $kv KV: KL divergence from the CPU backend's $kv logits: attnrt $attnrt (same" \
    "top token $(same_top "$work/ppl-attnrt-$kv.log") %), the negative control $fault; from the" \
    "CPU backend's f16 logits: the CPU backend's $kv $quantization, attnrt's $attnrt_f16; attnrt" \
    "computed ${computed:-0} attention nodes"
  if ! python3 - "$attnrt" "$fault" "$quantization" "$attnrt_f16" "${computed:-0}" "$layers" <<'PY'; then
import sys
a, quantization = float(sys.argv[1]), float(sys.argv[3])
fault, a_f16 = (None if x == "not run" else float(x) for x in (sys.argv[2], sys.argv[4]))
computed, layers = int(sys.argv[5]), int(sys.argv[6])
errors = []
if computed < layers * 10:
    errors.append(f"attnrt computed {computed} attention nodes")
if a > quantization:
    errors.append(f"attnrt's divergence {a} exceeds the quantization's own {quantization}")
if a_f16 is not None and a_f16 > 1.25 * quantization:
    errors.append(f"attnrt is farther from the f16 logits ({a_f16}) than the CPU backend "
                  f"({quantization})")
if fault is not None and fault < 4 * a:
    errors.append(f"the negative control's divergence {fault} is not 4 x attnrt's {a}")
for e in errors:
    print(f"test-ggml: FAILED: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    echo "test-ggml: FAILED ($kv KV; logs in $work)" >&2
    exit 1
  fi
done

echo "test-ggml: OK in $(($(date +%s) - start)) s"
