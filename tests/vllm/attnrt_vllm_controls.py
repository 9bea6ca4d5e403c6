"""Negative controls of the vLLM end-to-end check (scripts/test-vllm.sh): attnrt's vLLM backend
with one key dropped (each step, the query row at the end of the batch's longest sequence no
longer sees key 0: a window of max_seq_len - 1 keys), and with an fp8 cache read through a
k_scale 50 % off (the bytes as vLLM's, the scores half again too sharp: vLLM's default scales are
1, so a scale applied the wrong way round would not show), and with ALiBi slopes given to the
wrong heads; everything else is as in attnrt.vllm. The check must fail with each, or it could not tell a
wrong attention from a right one."""

from attnrt._vllm_backend import AttnrtBackend, AttnrtImpl


class DropOneKeyImpl(AttnrtImpl):
    def window(self, attn_metadata):
        return (attn_metadata.max_seq_len - 2, 0)


class DropOneKeyBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return DropOneKeyImpl


class WrongFp8ScaleImpl(AttnrtImpl):
    """vLLM's codes stored (the K rows handed over at the scale attnrt is told), then read with a
    k_scale 50 % too large (25 % came within e5m2's spread by only 8 %)."""

    def _scale_tensors(self, layer):
        k_scale, v_scale = super()._scale_tensors(layer)
        return k_scale * 1.5, v_scale

    def _vllm_kv_rows(self, k, v):
        k_rows, v_rows = super()._vllm_kv_rows(k, v)
        return (k_rows.float() * 1.5).to(k.dtype), v_rows


class WrongFp8ScaleBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return WrongFp8ScaleImpl


class SwappedAlibiImpl(AttnrtImpl):
    """Each query head given another head's ALiBi slope (the slopes reversed), as a kernel indexing
    them by the wrong head would."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.alibi_slopes is not None:
            self.alibi_slopes = self.alibi_slopes.flip(0).contiguous()


class SwappedAlibiBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return SwappedAlibiImpl
