"""Negative control of the encoder-decoder (Whisper) end-to-end check (scripts/vllm_whisper_run.py
on a scripts/make-whisper-checkpoint.py checkpoint): attnrt's vLLM backend whose cross-attention
layers pair each encoder key row with the next row's value (the value rows of each request shifted
by one), as a kernel that misplaces the rows it writes would. Attention over a set of rows does not
depend on their order, so a shift of keys and values together would go unseen; a shift of the
values alone changes every output. Everything else is as in attnrt.vllm. The comparison with vLLM's
own attention must fail with this backend. The run script registers the class in vLLM's CPU_ATTN
slot, in-process, with ATTNRT_VLLM=0:
  ATTNRT_VLLM=0 PYTHONPATH=tests/vllm scripts/vllm_whisper_run.py MODEL --cpu-attention-class \
      attnrt_vllm_cross_controls.ShiftedValuesBackend --compare REF.json
"""
import torch

from attnrt._vllm_backend import AttnrtBackend, AttnrtImpl


class ShiftedValuesImpl(AttnrtImpl):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs):
        if self.cross and value is not None and attn_metadata is not None:
            ksl = attn_metadata.key_start_loc
            value = value.clone()
            for b in range(ksl.numel() - 1):
                rows = slice(int(ksl[b]), int(ksl[b + 1]))
                value[rows] = torch.roll(value[rows], 1, dims=0)
        return super().forward(layer, query, key, value, kv_cache, attn_metadata, output,
                               *args, **kwargs)


class ShiftedValuesBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return ShiftedValuesImpl
