"""PyTorch custom ops over attnrt: ``import attnrt.torch`` registers

- ``torch.ops.attnrt.gqa`` — GroupQueryAttention (ONNX Runtime's semantics) on a shared past/present
  KV buffer: past_key / past_value (B, Nkv, P, H) are updated in place with this step's rows;
- ``torch.ops.attnrt.paged_gqa`` — the same over a paged KV cache: key_cache / value_cache (the
  block pools) are updated in place;
- ``torch.ops.attnrt.paged_attention_varlen`` — packed variable-length batches over a paged cache
  (FlashAttention/vLLM convention) into a given ``out``; the caches are updated in place. A C++
  operator (libattnrt_torch.so, same schema, a few microseconds a call) when the package was built
  with it, else a Python one; the C++ operator raises ValueError (invalid argument) or
  RuntimeError with the library's message after its status name;
- ``torch.ops.attnrt.sparse_mla`` — CANN's MixedQuantSparseFlashMla (its metadata computed inside),
  returning (attn_out, softmax_lse).

They are registered through ``torch.library.custom_op`` with fake (meta) implementations and the
in-place writes declared (``mutates_args``), so a model layer calling them traces under
``torch.compile(fullgraph=True)`` and runs compiled. CPU tensors only; inputs are borrowed without
copies (DLPack). Each op runs on one process-wide attnrt.Runtime made on first use (the
environment's ATTNRT_* settings apply); ``set_runtime`` replaces it.
"""
from __future__ import annotations

import threading
from typing import Any, Optional

import torch

from . import _arrays, _gqa, _paged_gqa, _sparse_mla, _torch_lib, _varlen
from ._errors import InvalidArgumentError
from ._runtime import Runtime

__all__ = ["runtime", "set_runtime"]

_lock = threading.Lock()
_runtime: Runtime | None = None


def runtime() -> Runtime:
    """The attnrt.Runtime the custom ops run on (made on first use)."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime()
            if _CPP_VARLEN:
                _torch_lib.use_runtime(_runtime)
        return _runtime


def set_runtime(rt: Runtime) -> None:
    """Makes the custom ops run on `rt` (for example one with other kernel pins or threads); it
    must stay open while they do."""
    global _runtime
    with _lock:
        if _CPP_VARLEN:
            _torch_lib.use_runtime(rt)
        _runtime = rt


# ---- GroupQueryAttention ----------------------------------------------------------------------------

@torch.library.custom_op("attnrt::gqa", mutates_args=("past_key", "past_value"), device_types="cpu")
def gqa(query: torch.Tensor, key: Optional[torch.Tensor], value: Optional[torch.Tensor],
        past_key: torch.Tensor, past_value: torch.Tensor, seqlens_k: torch.Tensor,
        total_sequence_length: int, num_heads: int, kv_num_heads: int,
        cos_cache: Optional[torch.Tensor] = None, sin_cache: Optional[torch.Tensor] = None,
        attention_bias: Optional[torch.Tensor] = None, head_sink: Optional[torch.Tensor] = None,
        scale: float = 0.0, softcap: float = 0.0, local_window_size: int = -1,
        do_rotary: int = 0, rotary_interleaved: int = 0, smooth_softmax: int = -1) -> torch.Tensor:
    """GroupQueryAttention on a shared KV buffer: query (B,S,N*H) (or packed QKV with key and value
    None), key/value (B,L,Nkv*H), past_key/past_value (B,Nkv,P,H) holding the past and receiving
    this step's rows in place (P >= total_sequence_length), seqlens_k int32 (B) = total length - 1.
    Returns output (B,S,N*H) of query's dtype."""
    op = runtime().cached_op(
        _gqa.GqaOp, num_heads=num_heads, kv_num_heads=kv_num_heads, scale=scale,
        softcap=softcap, local_window_size=local_window_size, do_rotary=do_rotary,
        rotary_interleaved=rotary_interleaved, smooth_softmax=smooth_softmax)
    output = query.new_empty(_gqa_output_shape(query, key, num_heads, kv_num_heads))
    inputs = [query, key, value, past_key, past_value, seqlens_k,
              total_sequence_length, cos_cache, sin_cache, None,
              attention_bias, head_sink]
    op.run(inputs, [output, past_key, past_value])
    return output


def _same_device(query, *tensors):
    """The fake implementations also run for real meta tensors: mixed with CPU tensors that is an
    error, not an empty CPU result."""
    for t in tensors:
        if t is not None and t.device != query.device:
            raise RuntimeError(f"attnrt: every tensor must be on {query.device}, got one on "
                               f"{t.device}")


def _gqa_output_shape(query, key, num_heads, kv_num_heads):
    b, s, hidden = query.shape
    h = hidden // (num_heads + 2 * kv_num_heads) if key is None else hidden // num_heads
    return (b, s, num_heads * h)


@gqa.register_fake
def _(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, num_heads,
      kv_num_heads, cos_cache=None, sin_cache=None, attention_bias=None, head_sink=None,
      scale=0.0, softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0,
      smooth_softmax=-1):
    _same_device(query, key, value, past_key, past_value, seqlens_k, cos_cache, sin_cache,
                 attention_bias, head_sink)
    return query.new_empty(_gqa_output_shape(query, key, num_heads, kv_num_heads))


# ---- paged GroupQueryAttention ----------------------------------------------------------------------

@torch.library.custom_op("attnrt::paged_gqa", mutates_args=("key_cache", "value_cache"),
                         device_types="cpu")
def paged_gqa(query: torch.Tensor, key: Optional[torch.Tensor], value: Optional[torch.Tensor],
              key_cache: torch.Tensor, value_cache: torch.Tensor, seqlens_k: torch.Tensor,
              total_sequence_length: int, block_table: torch.Tensor, num_heads: int,
              kv_num_heads: int, kv_layout: str = "BSNH",
              cos_cache: Optional[torch.Tensor] = None, sin_cache: Optional[torch.Tensor] = None,
              attention_bias: Optional[torch.Tensor] = None,
              head_sink: Optional[torch.Tensor] = None, k_scale: Optional[torch.Tensor] = None,
              v_scale: Optional[torch.Tensor] = None, scale: float = 0.0, softcap: float = 0.0,
              local_window_size: int = -1, do_rotary: int = 0, rotary_interleaved: int = 0,
              smooth_softmax: int = -1, k_quant_type: int = 0, v_quant_type: int = 0,
              kv_cache_bit_width: int = 0) -> torch.Tensor:
    """Paged GroupQueryAttention: key_cache/value_cache block pools ([num_blocks, block_size, Nkv, H]
    for kv_layout "BSNH", [num_blocks, Nkv, block_size, H] for "BNSH") receive this step's rows in
    place; block_table int32 [B, max_blocks_per_seq]; seqlens_k int32 (B) = total length - 1.
    Returns output (B,S,N*H) of query's dtype."""
    block_size = key_cache.shape[2] if kv_layout.upper() == "BNSH" else key_cache.shape[1]
    op = runtime().cached_op(
        _paged_gqa.PagedGqaOp, num_heads=num_heads, kv_num_heads=kv_num_heads,
        block_size=int(block_size), kv_layout=kv_layout, scale=scale, softcap=softcap,
        local_window_size=local_window_size, do_rotary=do_rotary,
        rotary_interleaved=rotary_interleaved, smooth_softmax=smooth_softmax,
        k_quant_type=k_quant_type, v_quant_type=v_quant_type,
        kv_cache_bit_width=kv_cache_bit_width)
    output = query.new_empty(_arrays.value_rows_shape(
        _gqa_output_shape(query, key, num_heads, kv_num_heads), key_cache, value_cache))
    inputs = [query, key, value, key_cache, value_cache, seqlens_k,
              total_sequence_length, cos_cache, sin_cache, None,
              attention_bias, head_sink, k_scale, v_scale, None, None, block_table]
    op.run(inputs, [output])
    return output


@paged_gqa.register_fake
def _(query, key, value, key_cache, value_cache, seqlens_k, total_sequence_length, block_table,
      num_heads, kv_num_heads, kv_layout="BSNH", cos_cache=None, sin_cache=None,
      attention_bias=None, head_sink=None, k_scale=None, v_scale=None, scale=0.0, softcap=0.0,
      local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
      k_quant_type=0, v_quant_type=0, kv_cache_bit_width=0):
    _same_device(query, key, value, key_cache, value_cache, seqlens_k, block_table, cos_cache,
                 sin_cache, attention_bias, head_sink, k_scale, v_scale)
    return query.new_empty(_arrays.value_rows_shape(
        _gqa_output_shape(query, key, num_heads, kv_num_heads), key_cache, value_cache))


# ---- paged attention over packed variable-length batches -----------------------------------------

# The C++ operator (libattnrt_torch.so, same schema) when it is built; else this one.
_CPP_VARLEN = _torch_lib.load()


def _paged_attention_varlen(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                            block_table: torch.Tensor, out: torch.Tensor,
                            k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                            slot_mapping: Optional[torch.Tensor] = None,
                            sinks: Optional[torch.Tensor] = None, softmax_scale: float = 0.0,
                            window_left: int = -1, softcap: float = 0.0,
                            kv_layout: str = "BSNH", p_precision: str = "exact",
                            causal: Optional[bool] = None,
                            k_scale: Optional[torch.Tensor] = None,
                            v_scale: Optional[torch.Tensor] = None,
                            cu_seqlens_k: Optional[torch.Tensor] = None,
                            alibi_slopes: Optional[torch.Tensor] = None,
                            window_right: int = -1) -> None:
    """attnrt.paged_attention_varlen into `out` (FlashAttention/vLLM convention): q [num_tokens,
    N, H]; k_cache/v_cache block pools (views of one cache tensor are fine), written in place where
    slot_mapping says (k, v given); cu_seqlens_q int32 [B+1]; seq_lens int32 [B]; block_table int32
    [B, max_blocks]; window_left as FlashAttention's window_size[0] (-1: off); softmax_scale 0:
    1/sqrt(H); p_precision "exact" or "input"; causal False: every query row sees every key of its
    sequence (None, the default, and True: causal); k_scale/v_scale float32 scales of int8,
    float8_e4m3fn or float8_e5m2 caches; cu_seqlens_k int32 [B+1]: k and v rows of their own
    count, sequence b's [cu_seqlens_k[b], cu_seqlens_k[b+1]) written as its last tokens
    (cross-attention);
    alibi_slopes float32 [N]: ALiBi; window_right as FlashAttention's window_size[1] (causal=False:
    the keys after each row it sees, -1 all) (attnrt.paged_attention_varlen)."""
    _varlen.paged_attention_varlen(
        runtime(), q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, k=k, v=v,
        softmax_scale=softmax_scale if softmax_scale != 0.0 else None,
        window_size=(window_left, 0 if causal is not False else window_right)
        if window_left >= 0 or window_right >= 0 else (-1, -1), softcap=softcap,
        sinks=sinks, slot_mapping=slot_mapping, out=out, kv_layout=kv_layout,
        p_precision=p_precision, causal=True if causal is None else causal, k_scale=k_scale,
        v_scale=v_scale, cu_seqlens_k=cu_seqlens_k, alibi_slopes=alibi_slopes)


def _paged_attention_varlen_fake(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out,
                                 k=None, v=None, slot_mapping=None, sinks=None, softmax_scale=0.0,
                                 window_left=-1, softcap=0.0, kv_layout="BSNH",
                                 p_precision="exact", causal=None, k_scale=None, v_scale=None,
                                 cu_seqlens_k=None, alibi_slopes=None, window_right=-1):
    _same_device(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out, k, v,
                 slot_mapping, sinks, k_scale, v_scale, cu_seqlens_k, alibi_slopes)


paged_attention_varlen: Any  # the C++ operator's packet, or the Python custom op
if _CPP_VARLEN:
    paged_attention_varlen = torch.ops.attnrt.paged_attention_varlen
    torch.library.register_fake("attnrt::paged_attention_varlen")(_paged_attention_varlen_fake)

    @torch.library.register_fake("attnrt::_paged_attention_varlen_on")
    def _(runtime_id, *args, **kwargs):
        _paged_attention_varlen_fake(*args, **kwargs)
else:
    paged_attention_varlen = torch.library.custom_op(
        "attnrt::paged_attention_varlen", mutates_args=("k_cache", "v_cache", "out"),
        device_types="cpu")(_paged_attention_varlen)
    paged_attention_varlen.register_fake(_paged_attention_varlen_fake)


# ---- autograd ---------------------------------------------------------------------------------------

_autograd = torch.library.Library("attnrt", "IMPL")


def _refuse_autograd(name: str) -> None:
    """The ops have no backward: torch's custom_op would run one with an input that requires grad
    under grad mode (writing the caches) and fail only at backward. This AutogradCPU kernel refuses
    such a call first, naming the argument; otherwise it runs the op below autograd, as custom_op's
    own kernel does without grad."""
    op = getattr(torch.ops.attnrt, name).default
    names = [a.name for a in op._schema.arguments]
    written = {a.name for a in op._schema.arguments
               if a.alias_info is not None and a.alias_info.is_write}

    def kernel(keyset, *args, **kwargs):
        if torch.is_grad_enabled():
            for arg, value in [*zip(names, args), *kwargs.items()]:
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    label = f"attnrt::{name}: input '{arg}'"
                    if arg in written:
                        _arrays.check_writable(value, label)
                    raise InvalidArgumentError(_arrays.requires_grad_message(label))
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

    _autograd.impl(name, kernel, "AutogradCPU", with_keyset=True)


# ---- sparse MLA -------------------------------------------------------------------------------------

@torch.library.custom_op("attnrt::sparse_mla", mutates_args=(), device_types="cpu")
def sparse_mla(q: torch.Tensor, ori_kv: torch.Tensor, quant_mode: int,
               cmp_kv: Optional[torch.Tensor] = None,
               cmp_sparse_indices: Optional[torch.Tensor] = None,
               ori_block_table: Optional[torch.Tensor] = None,
               cmp_block_table: Optional[torch.Tensor] = None,
               cu_seqlens_q: Optional[torch.Tensor] = None,
               cu_seqlens_ori_kv: Optional[torch.Tensor] = None,
               cu_seqlens_cmp_kv: Optional[torch.Tensor] = None,
               seqused_q: Optional[torch.Tensor] = None,
               seqused_ori_kv: Optional[torch.Tensor] = None,
               seqused_cmp_kv: Optional[torch.Tensor] = None,
               cmp_residual_kv: Optional[torch.Tensor] = None,
               sinks: Optional[torch.Tensor] = None, softmax_scale: float = 0.04419417382415922,
               cmp_ratio: int = 1, ori_mask_mode: int = 0, cmp_mask_mode: int = 0,
               ori_win_left: int = -1, ori_win_right: int = -1, layout_q: str = "BSND",
               layout_kv: str = "BSND", topk_value_mode: int = 1,
               ori_sparse_indices: Optional[torch.Tensor] = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA (see attnrt.SparseMlaOp for shapes); the metadata op runs inside. Returns
    (attn_out of q's shape and dtype, softmax_lse float32: (B,1,S1,N) for BSND q, (1,T1,N) for
    TND q)."""
    attributes: dict[str, Any] = dict(quant_mode=quant_mode, softmax_scale=softmax_scale, cmp_ratio=cmp_ratio,
                      ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode,
                      ori_win_left=ori_win_left, ori_win_right=ori_win_right, layout_q=layout_q,
                      layout_kv=layout_kv, topk_value_mode=topk_value_mode,
                      return_softmax_lse=1)
    attn_out, lse = _sparse_mla.sparse_mla(
        runtime(), q, ori_kv, cmp_kv, cmp_sparse_indices, ori_block_table, cmp_block_table,
        cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv,
        seqused_cmp_kv, cmp_residual_kv, sinks, ori_sparse_indices=ori_sparse_indices,
        **attributes)
    return attn_out, lse


@sparse_mla.register_fake
def _(q, ori_kv, quant_mode, cmp_kv=None, cmp_sparse_indices=None, ori_block_table=None,
      cmp_block_table=None, cu_seqlens_q=None, cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None,
      seqused_q=None, seqused_ori_kv=None, seqused_cmp_kv=None, cmp_residual_kv=None, sinks=None,
      softmax_scale=0.04419417382415922, cmp_ratio=1, ori_mask_mode=0, cmp_mask_mode=0,
      ori_win_left=-1, ori_win_right=-1, layout_q="BSND", layout_kv="BSND", topk_value_mode=1,
      ori_sparse_indices=None):
    _same_device(q, ori_kv, cmp_kv, cmp_sparse_indices, ori_block_table, cmp_block_table,
                 cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv,
                 seqused_cmp_kv, cmp_residual_kv, sinks, ori_sparse_indices)
    lse_shape: tuple[int, ...]
    if q.dim() == 4:
        lse_shape = (q.shape[0], 1, q.shape[1], q.shape[2])
    else:
        lse_shape = (1, q.shape[0], q.shape[1])
    return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)


for _name in ("gqa", "paged_gqa", "sparse_mla") + (() if _CPP_VARLEN else
                                                   ("paged_attention_varlen",)):
    _refuse_autograd(_name)
