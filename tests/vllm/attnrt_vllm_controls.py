"""Negative control of the vLLM end-to-end check (scripts/test-vllm.sh): attnrt's vLLM backend
with one key dropped. Each step, the query row at the end of the batch's longest sequence no
longer sees key 0 (a window of max_seq_len - 1 keys); everything else is as in attnrt.vllm. The
check must fail with this backend, or it could not tell a wrong attention from a right one."""
from attnrt._vllm_backend import AttnrtBackend, AttnrtImpl


class DropOneKeyImpl(AttnrtImpl):
    def window(self, attn_metadata):
        return (attn_metadata.max_seq_len - 2, 0)


class DropOneKeyBackend(AttnrtBackend):
    @staticmethod
    def get_impl_cls():
        return DropOneKeyImpl
