#!/usr/bin/env bash
# End-to-end check of attnrt serving vLLM's encoder-only (non-causal, ENCODER_ONLY) attention: an
# embedding model through LLM.embed on CPU.
#
# A seeded random BERT checkpoint (scripts/make-bert-checkpoint.py: BertModel, 4 layers, hidden 512,
# 8 heads of 64, q/k projections at std 0.1 so attention is far from uniform; sentence-transformers
# mean pooling and normalization) embeds 8 token-id prompts of 7..1000 tokens plus one of a single
# token (scripts/vllm_embed_run.py, engine and worker in one process), compared by per-prompt
# cosine similarity (at least $MIN_COSINE):
#   reference  vLLM's own attention (ATTNRT_VLLM=0), float32, against transformers' BertModel in
#              float64 (shares no code with vLLM), and against a second run of itself;
#   float32    attnrt (ATTNRT_VLLM=1) against vLLM's own attention;
#   negative   attnrt with its encoder layers made causal (tests/vllm/attnrt_vllm_encoder_controls.py)
#              must FAIL that comparison;
#   bfloat16   attnrt against vLLM's own attention, both bfloat16;
#   head 128   a checkpoint with 4 heads of 128, float32.
# With ATTNRT_EMBED_BENCH=1 also scripts/vllm_embed_bench.py: throughput of the two backends in one
# process, alternating, bfloat16 and float32, 32 prompts of 128..512 tokens (about 1.5 minutes).
#
# Usage: scripts/test-vllm-embed.sh [BUILD_DIR]   (default build; the venv is BUILD_DIR/vllm-venv
# with attnrt installed into it, as scripts/test-vllm.sh does)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
cd "$root"
start=$(date +%s)
MIN_COSINE="${MIN_COSINE:-0.99999}"
py="$build_dir/vllm-venv/bin/python"
[ -x "$py" ] || { echo "test-vllm-embed: FAIL: no $py (scripts/test-vllm.sh makes it)"; exit 1; }
"$py" -c "import attnrt._torch_lib as t; assert t.load(), 'libattnrt_torch.so does not load'" ||
  { echo "test-vllm-embed: FAIL: attnrt with its C++ torch operators is not installed in the venv"; exit 1; }

work="$build_dir/vllm-embed-e2e"
mkdir -p "$work"
export VLLM_CPU_KVCACHE_SPACE=1
run=("$py" "$root/scripts/vllm_embed_run.py")

step() { # name, then the command; its output goes to $work/name.log
  local name="$1"; shift
  local t0=$(date +%s) rc=0
  "$@" >"$work/$name.log" 2>&1 || rc=$?
  echo "test-vllm-embed: $name: exit $rc in $(( $(date +%s) - t0 )) s; $(grep -E '^compare ' "$work/$name.log" | cut -c1-160 || true)"
  return $rc
}
fail() { echo "test-vllm-embed: FAIL: $*"; exit 1; }

model="$work/bert"
"$py" scripts/make-bert-checkpoint.py "$model" --qk-std 0.1 | sed 's/^/test-vllm-embed: /'

# vLLM's own attention against transformers' BertModel in float64, and against itself.
step hf-reference "${run[@]}" "$model" --hf-reference --out "$work/hf-f64.json" ||
  fail "transformers' reference did not run (see $work/hf-reference.log)"
step f32-vllm env ATTNRT_VLLM=0 "${run[@]}" "$model" --out "$work/f32-vllm.json" \
  --compare "$work/hf-f64.json" --min-cosine "$MIN_COSINE" ||
  fail "vLLM's own attention did not run or differs from transformers' (see $work/f32-vllm.log)"
step f32-vllm-again env ATTNRT_VLLM=0 "${run[@]}" "$model" --repeat 1 --out "$work/f32-vllm-again.json" \
  --compare "$work/f32-vllm.json" --min-cosine "$MIN_COSINE" ||
  fail "two runs of vLLM's own attention differ (see $work/f32-vllm-again.log)"
if grep -q "attnrt serves attention" "$work/f32-vllm.log"; then
  fail "ATTNRT_VLLM=0 but attnrt served attention"
fi

# attnrt, float32.
step f32-attnrt env ATTNRT_VLLM=1 "${run[@]}" "$model" --out "$work/f32-attnrt.json" \
  --compare "$work/f32-vllm.json" --min-cosine "$MIN_COSINE" ||
  fail "float32: attnrt differs from vLLM's encoder attention (see $work/f32-attnrt.log)"
grep -q "attnrt serves attention" "$work/f32-attnrt.log" ||
  fail "ATTNRT_VLLM=1 but vLLM's log does not say that attnrt serves attention"
grep -q "^attention: attnrt.vllm.AttnrtBackend" "$work/f32-attnrt.log" ||
  fail "ATTNRT_VLLM=1 but CPU_ATTN is not attnrt's backend"

# Negative control: causal encoder layers must fail the same comparison.
if step negative env ATTNRT_VLLM=0 PYTHONPATH="$root/tests/vllm${PYTHONPATH:+:$PYTHONPATH}" \
  "${run[@]}" "$model" --repeat 1 \
  --cpu-attention-class attnrt_vllm_encoder_controls.CausalEncoderBackend \
  --out "$work/negative.json" --compare "$work/f32-vllm.json" --min-cosine "$MIN_COSINE"; then
  fail "negative control: attnrt with causal encoder layers passed the comparison"
fi
grep -q '^compare ' "$work/negative.log" ||
  fail "negative control did not get to the comparison (see $work/negative.log)"

# bfloat16.
step bf16-vllm env ATTNRT_VLLM=0 "${run[@]}" "$model" --dtype bfloat16 --out "$work/bf16-vllm.json" ||
  fail "bfloat16: vLLM's own attention did not run"
step bf16-attnrt env ATTNRT_VLLM=1 "${run[@]}" "$model" --dtype bfloat16 \
  --out "$work/bf16-attnrt.json" --compare "$work/bf16-vllm.json" --min-cosine "$MIN_COSINE" ||
  fail "bfloat16: attnrt differs from vLLM's encoder attention (see $work/bf16-attnrt.log)"

# Head size 128.
model128="$work/bert-h128"
"$py" scripts/make-bert-checkpoint.py "$model128" --heads 4 --head-dim 128 --qk-std 0.1 >/dev/null
step h128-vllm env ATTNRT_VLLM=0 "${run[@]}" "$model128" --repeat 1 --out "$work/h128-vllm.json" ||
  fail "head size 128: vLLM's own attention did not run"
step h128-attnrt env ATTNRT_VLLM=1 "${run[@]}" "$model128" --repeat 1 \
  --out "$work/h128-attnrt.json" --compare "$work/h128-vllm.json" --min-cosine "$MIN_COSINE" ||
  fail "head size 128: attnrt differs from vLLM's encoder attention (see $work/h128-attnrt.log)"

if [ "${ATTNRT_EMBED_BENCH:-0}" = 1 ]; then
  step bench env ATTNRT_VLLM=0 "$py" "$root/scripts/vllm_embed_bench.py" "$model" \
    --out "$work/bench.json" || fail "the throughput comparison did not run (see $work/bench.log)"
  grep -E '^(bfloat16|float32): ' "$work/bench.log" | sed 's/^/test-vllm-embed: /'
fi
echo "test-vllm-embed: OK in $(( $(date +%s) - start )) s"
