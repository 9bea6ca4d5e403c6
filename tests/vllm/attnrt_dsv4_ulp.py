"""The spread control of the DeepSeek-V4 end-to-end check (scripts/test-vllm.sh): importing this
module makes DeepSeek-V4's sparse attention run vLLM's own kernel (torch.ops._C.
flash_mla_with_kvcache_cpu) on queries moved by one bfloat16 ulp (every nonzero finite element's
magnitude one step up). The prompt logprobs of that run against vLLM's unperturbed one are the
spread a one-ulp difference in the attention inputs makes; attnrt's run must agree with vLLM's
within it. Reached through the route attnrt.vllm installs with ATTNRT_VLLM=1 (the layer calls
attnrt._vllm_deepseek_v4.flash_mla_with_kvcache, replaced here). Run the driver in-process after
importing it, as tests/vllm/attnrt_dsv4_controls.py is.
"""
import torch

from attnrt import _vllm_deepseek_v4


def _one_ulp_up(q: torch.Tensor) -> torch.Tensor:
    bits = q.contiguous().view(torch.int16)
    finite_nonzero = (bits & 0x7FFF) != 0
    finite_nonzero &= (bits & 0x7F80) != 0x7F80
    return torch.where(finite_nonzero, bits + 1, bits).view(torch.bfloat16)


def _vllm_kernel_on_perturbed_queries(out, q, *args, **kwargs):
    kwargs.pop("runtime", None)
    torch.ops._C.flash_mla_with_kvcache_cpu(out, _one_ulp_up(q), *args, **kwargs)


_vllm_deepseek_v4.flash_mla_with_kvcache = _vllm_kernel_on_perturbed_queries
