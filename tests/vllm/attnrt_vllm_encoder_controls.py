"""Negative control of the encoder-only (embedding model) end-to-end check
(scripts/vllm_embed_run.py on a scripts/make-bert-checkpoint.py checkpoint): attnrt's vLLM backend
with its encoder layers running CAUSAL attention, each query row seeing only the keys up to its own
position instead of every key of its sequence; everything else is as in attnrt.vllm. The
comparison with vLLM's own encoder attention must fail with this backend (measured on the default
checkpoint, mean pooling, float32: cosine down to about 0.98 on the 7-token prompt, 1 - cosine
about 1e-3 on the 1000-token one), or it could not tell a wrong mask from a right one.

The override is AttnrtImpl.causal(attn_metadata), which attnrt's backend asks every step (as the
decoder check's control, attnrt_vllm_controls.py, overrides window()). The run script registers
the class in vLLM's CPU_ATTN slot, in-process, with ATTNRT_VLLM=0 (with 1 the attnrt plugin would
register attnrt's own class over it when vLLM loads its plugins):
  ATTNRT_VLLM=0 PYTHONPATH=tests/vllm scripts/vllm_embed_run.py MODEL --cpu-attention-class \
      attnrt_vllm_encoder_controls.CausalEncoderBackend --compare REF.json --min-cosine 0.99999
"""
from attnrt._vllm_backend import AttnrtBackend, AttnrtImpl


class CausalEncoderImpl(AttnrtImpl):
    def causal(self, attn_metadata):
        return True


class CausalEncoderBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return CausalEncoderImpl
