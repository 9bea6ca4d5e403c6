#!/usr/bin/env bash
# End-to-end check of attnrt serving an encoder-decoder model's decoder in vLLM: self-attention and
# cross-attention (ENCODER_DECODER) of Whisper, the encoder-decoder architecture vLLM 0.32 runs on
# CPU, through LLM.generate.
#
# A seeded random Whisper checkpoint (scripts/make-whisper-checkpoint.py: d_model 64, 2 heads of 32,
# 2 encoder and 2 decoder layers, weights at std 0.5 so greedy tokens depend on the audio) decodes 12
# greedy tokens for 3 synthetic audios of 1.0 to 4.2 s in one LLM.generate call
# (scripts/vllm_whisper_run.py: requests whose encoder runs share steps with requests decoding),
# compared by greedy tokens and logprobs (prompt and generated):
#   float32   attnrt (ATTNRT_VLLM=1) against vLLM's own attention: the same tokens, logprobs within
#             $F32_TOLERANCE; the log must show attnrt's impl under both kinds of layer;
#   negative  attnrt with each request's cross-attention value rows shifted by one
#             (tests/vllm/attnrt_vllm_cross_controls.py) must FAIL that comparison;
#   bfloat16  attnrt against vLLM's own attention, both bfloat16: logprobs within $BF16_TOLERANCE,
#             greedy tokens reported.
# Whisper's encoder runs vLLM's multimodal encoder attention (torch SDPA), not the CPU_ATTN backend.
#
# Usage: scripts/test-vllm-whisper.sh [BUILD_DIR]   (default build; the venv is BUILD_DIR/vllm-venv
# with attnrt installed into it, as scripts/test-vllm.sh does)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
cd "$root"
start=$(date +%s)
F32_TOLERANCE="${F32_TOLERANCE:-1e-4}"
BF16_TOLERANCE="${BF16_TOLERANCE:-0.1}"
py="$build_dir/vllm-venv/bin/python"
[ -x "$py" ] || { echo "test-vllm-whisper: FAIL: no $py (scripts/test-vllm.sh makes it)"; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1

work="$build_dir/vllm-whisper-e2e"
mkdir -p "$work"
run=("$py" "$root/scripts/vllm_whisper_run.py")

step() { # name, then the command; its output goes to $work/name.log
  local name="$1"; shift
  local t0=$(date +%s) rc=0
  "$@" >"$work/$name.log" 2>&1 || rc=$?
  echo "test-vllm-whisper: $name: exit $rc in $(( $(date +%s) - t0 )) s; $(grep -E '^compare ' "$work/$name.log" | cut -c1-200 || true)"
  return $rc
}
fail() { echo "test-vllm-whisper: FAIL: $*"; exit 1; }

model="$work/whisper"
"$py" scripts/make-whisper-checkpoint.py "$model" 2>&1 | grep '^wrote' | sed 's/^/test-vllm-whisper: /'

step f32-vllm env ATTNRT_VLLM=0 "${run[@]}" "$model" --out "$work/f32-vllm.json" ||
  fail "vLLM's own attention did not run (see $work/f32-vllm.log)"
grep -q "ENCODER_DECODER: .*cpu_attn.CPUAttentionBackendImpl" "$work/f32-vllm.log" ||
  fail "ATTNRT_VLLM=0 but the cross-attention layers are not vLLM's CPU_ATTN"
step f32-attnrt env ATTNRT_VLLM=1 "${run[@]}" "$model" --out "$work/f32-attnrt.json" \
  --compare "$work/f32-vllm.json" --tolerance "$F32_TOLERANCE" ||
  fail "float32: attnrt differs from vLLM's attention (see $work/f32-attnrt.log)"
grep -q "DECODER: attnrt._vllm_backend.AttnrtImpl" "$work/f32-attnrt.log" ||
  fail "ATTNRT_VLLM=1 but the decoder's self-attention layers are not attnrt's"
grep -q "ENCODER_DECODER: .* < attnrt._vllm_backend.AttnrtImpl" "$work/f32-attnrt.log" ||
  fail "ATTNRT_VLLM=1 but the cross-attention layers are not attnrt's"

if step negative env ATTNRT_VLLM=0 PYTHONPATH="$root/tests/vllm${PYTHONPATH:+:$PYTHONPATH}" \
  "${run[@]}" "$model" --out "$work/negative.json" \
  --cpu-attention-class attnrt_vllm_cross_controls.ShiftedValuesBackend \
  --compare "$work/f32-vllm.json" --tolerance "$F32_TOLERANCE"; then
  fail "negative control: attnrt with shifted cross-attention values passed the comparison"
fi
grep -q '^compare ' "$work/negative.log" ||
  fail "negative control did not get to the comparison (see $work/negative.log)"

step bf16-vllm env ATTNRT_VLLM=0 "${run[@]}" "$model" --dtype bfloat16 --out "$work/bf16-vllm.json" ||
  fail "bfloat16: vLLM's own attention did not run"
step bf16-attnrt env ATTNRT_VLLM=1 "${run[@]}" "$model" --dtype bfloat16 \
  --out "$work/bf16-attnrt.json" --compare "$work/bf16-vllm.json" --tolerance "$BF16_TOLERANCE" \
  --allow-token-differences ||
  fail "bfloat16: attnrt differs from vLLM's attention (see $work/bf16-attnrt.log)"
echo "test-vllm-whisper: OK in $(( $(date +%s) - start )) s"
