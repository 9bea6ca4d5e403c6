"""The vLLM 0.32 attention backend classes behind attnrt.vllm (imports vLLM and torch).

KV cache: vLLM gives each layer a view [num_blocks, num_kv_heads, block_size, 2 * head_size] of
its cache buffer in the model dtype, laid out as the backend declares (KVCacheLayout.LBHNC here,
as vLLM's CPU backend: block-major, then head). Inside a [block, head] slab the first
block_size * head_size elements are the K rows of the block's tokens and the next ones the V rows,
so the K and V pools are the strided BNSH views kv.view(B, Hkv, 2, bs, H)[:, :, 0] and [:, :, 1];
attnrt reads and writes them in place. (vLLM's own CPU kernels pack K differently inside the slab,
so a cache is read by the backend that wrote it; both write every row they read.)

An fp8 KV cache (kv_cache_dtype "fp8"/"fp8_e4m3", or "fp8_e5m2") is the same slab in uint8, read
as float8 e4m3fn (or e5m2) with the layer's per-tensor k_scale/v_scale; the step's new rows reach attnrt's writer as
the values of the codes vLLM's CPU writer would store (fp8_rows_as_vllm) times the scale, so that
attnrt stores vLLM's bytes (after all of its checks, as any row). Encoder layers
(ENCODER_ONLY, ENCODER) have no cache of vLLM's: each step's metadata holds scratch BNSH pools in
the model dtype that every encoder layer writes its rows into and attends over, non-causally.
Cross-attention layers (ENCODER_DECODER: an encoder-decoder model's decoder, Whisper's) have a
cache of vLLM's: on the step a request's encoder runs, its K/V rows (encoder tokens, not decoder
tokens) are written there through attnrt's key_start_loc (FlashAttention's cu_seqlens_k), and on
every step the decoder's query rows attend non-causally over the encoder's rows in the cache.

q, k and v arrive as views of vLLM's fused QKV projection (row stride (N + 2 Nkv) * H). The C ABI
takes the query, the new K/V rows and the output as compact rows (only the block pools may be
strided views), so this step's q/k/v rows are copied when they are not compact (num_tokens *
(N + 2 Nkv) * H elements; nothing when vLLM hands compact tensors); the cache and the output are
never copied.

Each layer calls torch.ops.attnrt._paged_attention_varlen_on, the C++ operator of
libattnrt_torch.so (attnrt._torch_lib), directly: the pool views, the sinks and the runtime id are
kept between steps, so a call costs a few microseconds besides the kernel. Without the library the
layer calls attnrt.paged_attention_varlen's Python path.

Threads: with the library, attention runs on a runtime whose parallel work runs on torch's
intra-op threads (_torch_lib.torch_threads_runtime: at::parallel_for, the OpenMP team vLLM's
GEMMs run on), with a team of torch.get_num_threads() of the worker; so no second pool of threads
competes with OpenMP threads that spin after each of torch's parallel regions. Without the
library, an attnrt.Runtime with that many threads of its own.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, CommonAttentionMetadata)
from vllm.v1.kv_cache_interface import (AttentionSpec, CrossAttentionSpec, EncoderOnlyAttentionSpec,
                                        KVCacheLayout)

from . import _torch_lib
from ._runtime import Runtime
from ._varlen import paged_attention_varlen

_lock = threading.Lock()
_runtime: Runtime | None = None  # the Python path's runtime (the library is not loaded)
_torch_runtimes: dict[int, int] = {}  # the C++ operator's runtimes on torch's threads, by team size
_runtime_threads = 0  # and _runtime
_announced = False


def runtime() -> Runtime:
    """The process's attnrt Runtime (threads of its own) with vLLM's thread count:
    torch.get_num_threads(), the OpenMP team vLLM gave this worker (remade if vLLM changes it, as
    it does in-process after building the model). The Python paths of the paged varlen op and
    of DeepSeek-V4's sparse attention (attnrt._vllm_deepseek_v4) run on it, used when
    libattnrt_torch.so is not loaded."""
    global _runtime, _runtime_threads
    threads = max(1, torch.get_num_threads())
    rt = _runtime
    if rt is not None and _runtime_threads == threads:
        return rt
    with _lock:
        if _runtime is None or _runtime_threads != threads:
            _runtime = Runtime(num_threads=threads)
            _runtime_threads = threads
            _log_threads(threads, "threads of its own" + (
                " (attnrt's Python-path ops)" if _torch_lib.loaded()
                else " (libattnrt_torch.so is not loaded)"))
        return _runtime


def torch_runtime_id() -> int:
    """The id of the C++ operator's runtime on torch's intra-op threads (a team of
    torch.get_num_threads()), or 0 when the library is not loaded. One runtime per thread count
    the worker has had, kept for the process's life (a runtime with an executor starts no threads):
    a call still running on one when torch's thread count changes is never left on a released
    runtime."""
    threads = max(1, torch.get_num_threads())
    rid = _torch_runtimes.get(threads)
    if rid:
        return rid
    if not _torch_lib.load():
        return 0
    with _lock:
        rid = _torch_runtimes.get(threads)
        if not rid:
            rid = _torch_lib.torch_threads_runtime(threads)
            _torch_runtimes[threads] = rid
            _log_threads(threads, "torch's intra-op threads (at::parallel_for, shared with "
                         "torch's operators)")
        return rid


def _log_threads(threads: int, which: str) -> None:
    from vllm.logger import init_logger

    init_logger("vllm.attnrt").info("attnrt: attention on %d thread%s: %s", threads,
                                    "" if threads == 1 else "s", which)


def describe() -> str:
    """One line for vLLM's log: what the backend serves."""
    return ("decoder layers; prefill, chunked prefill, decode, sliding window, softcap, sinks; "
            "float32/bfloat16/float16; threads: torch's intra-op threads of each worker "
            "(torch.get_num_threads()) with the C++ operator, else as many of attnrt's own")


# The softmax probabilities' precision for P·V (attnrt.paged_attention_varlen's p_precision):
# "auto" by default, which follows vLLM's own CPU kernel for the layer's dtype and block size: its
# AMX kernel (bfloat16, block sizes that are multiples of 32, on CPUs with AMX) rounds P to
# bfloat16 before P·V, its vector kernels (every other case) keep P in float32.
P_PRECISION_ENV = "ATTNRT_VLLM_P_PRECISION"
DEFAULT_P_PRECISION = "auto"
P_PRECISIONS = ("auto", "exact", "input")


def p_precision_from_env() -> str:
    """ATTNRT_VLLM_P_PRECISION: "auto", "exact" or "input" (any case; unset or empty: "auto").
    Anything else is a ValueError naming the variable."""
    value = os.environ.get(P_PRECISION_ENV, "")
    chosen = value.strip().lower() or DEFAULT_P_PRECISION
    if chosen not in P_PRECISIONS:
        raise ValueError(f"{P_PRECISION_ENV}: expected 'auto', 'exact' or 'input' (unset: "
                         f"'{DEFAULT_P_PRECISION}'), got {value!r}")
    return chosen


def vllm_kernel_p_precision(dtype: torch.dtype, block_size: int, head_size: int,
                            kv_cache_dtype: str = "auto") -> str:
    """The p_precision of vLLM's own CPU attention kernel for these shapes: "input" when vLLM
    would run its AMX kernel (it rounds P to bfloat16), else "exact" (its vector kernels keep P in
    float32: measured against float64 references, 99.9 % of their bfloat16 outputs are the
    exact-P result rounded once)."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    isa = _get_attn_isa(dtype, block_size, head_size, kv_cache_dtype)
    return "input" if isa == "amx" else "exact"


# vLLM's fp8 KV cache dtypes attnrt serves, each with per-layer k_scale/v_scale: the float8 type
# of its codes, the largest code, the smallest normal and the subnormals' unit.
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
_FP8_FORMATS = {
    "fp8": (torch.float8_e4m3fn, 448.0, 2.0**-6, 2.0**-9),
    "fp8_e4m3": (torch.float8_e4m3fn, 448.0, 2.0**-6, 2.0**-9),
    "fp8_e5m2": (torch.float8_e5m2, 57344.0, 2.0**-14, 2.0**-16),
}


def fp8_rows_as_vllm(x: torch.Tensor, scale: float, kv_cache_dtype: str = "fp8") -> torch.Tensor:
    """x / scale as float8_e4m3fn ("fp8", "fp8_e4m3") or float8_e5m2 ("fp8_e5m2"), byte for byte as
    vLLM's CPU cache writer (cpu_attn_reshape_and_cache with that kv_cache_dtype) stores it, found
    by comparing its bytes (tests/bindings/python/test_vllm_backend.py checks every special case
    against it): q = x times the float32 reciprocal of the float32 scale, in float32; NaN as the
    largest code (448, 57344), clamped to +-that; codes of |q| at or above the smallest normal
    (2^-6, 2^-14) rounded toward zero (the float32 mantissa bits past the format's dropped;
    attnrt's own writer rounds to nearest even), subnormal codes floor((|q| + smallest normal -
    smallest normal) / unit) with the sum rounded to float32 first; zero stored as +0, a negative q
    that truncates to zero as -0."""
    dtype, largest, smallest_normal, unit = _FP8_FORMATS[kv_cache_dtype]
    inverse = torch.tensor(scale, dtype=torch.float32).reciprocal()
    q = torch.nan_to_num(x.float() * inverse, nan=largest).clamp_(-largest, largest)
    a = q.abs()
    nearest = a.to(dtype)
    # Where rounding to nearest went up, the next code toward zero (the codes of one sign are
    # ordered by magnitude).
    codes = nearest.view(torch.uint8) - (nearest.float() > a).to(torch.uint8)
    subnormal = torch.floor(((a + smallest_normal) - smallest_normal) / unit).to(torch.uint8)
    codes = torch.where(a < smallest_normal, subnormal, codes)
    codes = torch.where(q < 0, codes | 0x80, codes)
    codes = torch.where(q == 0, torch.zeros_like(codes), codes)
    return codes.view(dtype)


def _announce(p_precision: str) -> None:
    """Says once per process, in vLLM's log, that attnrt serves its attention layers and with
    which p_precision (when the first layer is built: vLLM's logging is configured by then, unlike
    when plugins load)."""
    global _announced
    if _announced:
        return
    _announced = True
    from vllm.logger import init_logger

    logger = init_logger("vllm.attnrt")
    logger.info(
        "attnrt serves attention (attnrt.vllm.AttnrtBackend in vLLM's CPU_ATTN slot; threads: "
        "%s, torch.get_num_threads() at each step, now %d)",
        "torch's intra-op threads" if _torch_lib.load() else "attnrt's own pool",
        torch.get_num_threads())
    logger.info("attnrt p_precision %s (%s=auto|exact|input; 'input' rounds softmax probabilities "
                "to the model dtype before P·V, as vLLM's AMX kernel does; 'auto' follows vLLM's "
                "own kernel for each layer's dtype and block size)", p_precision, P_PRECISION_ENV)


_auto_resolved: set = set()


def _announce_auto(dtype: torch.dtype, block_size: int, head_size: int, p_precision: str) -> None:
    """Says once per process and shape class which mode ATTNRT_VLLM_P_PRECISION=auto chose (the
    start-up line can only say "auto": the choice depends on each layer's dtype and block size)."""
    key = (dtype, block_size, head_size)
    if key in _auto_resolved:
        return
    _auto_resolved.add(key)
    from vllm.logger import init_logger

    init_logger("vllm.attnrt").info(
        "attnrt p_precision auto: %s for %s layers with block_size %d and head_size %d (as vLLM's "
        "own kernel for them)", p_precision, str(dtype).replace("torch.", ""), block_size,
        head_size)


class AttnrtBackend(AttentionBackend):
    """attnrt's paged varlen attention in vLLM's CPU_ATTN slot."""

    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16,
                                                      torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", *FP8_KV_CACHE_DTYPES]

    @staticmethod
    def get_name() -> str:
        return "CPU_ATTN"

    @staticmethod
    def get_impl_cls() -> type["AttnrtImpl"]:
        return AttnrtImpl

    @staticmethod
    def get_builder_cls() -> type["AttnrtMetadataBuilder"]:
        return AttnrtMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        # Empty: any head size (vLLM reads an empty list so). attnrt's paged kernels take any head
        # size over the model-dtype caches this backend keeps (docs/paged-gqa.md).
        return []

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # [block][kv head][K rows of the block | V rows of the block]: see the module docstring.
        return (KVCacheLayout.LBHNC,)

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type in _ATTN_TYPES


# Decoder self-attention, the non-causal self-attention of encoders (ENCODER_ONLY: the embedding
# and cross-encoder models; ENCODER: an encoder-decoder model's encoder) and cross-attention
# (ENCODER_DECODER: an encoder-decoder model's decoder queries over its encoder's rows).
_ENCODER_TYPES = (AttentionType.ENCODER_ONLY, AttentionType.ENCODER)
_ATTN_TYPES = (AttentionType.DECODER, *_ENCODER_TYPES, AttentionType.ENCODER_DECODER)


@dataclass
class AttnrtMetadata:
    """One step's batch: host int tensors as attnrt reads them."""
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    seq_lens: torch.Tensor         # int32 [num_reqs]
    block_table: torch.Tensor      # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor     # int64 [num_actual_tokens]
    causal: bool = True            # False: every query row sees every key of its sequence
    # Encoder attention (no KV cache of vLLM's): the step's scratch K and V pools (BNSH, the model
    # dtype, one block_table row per sequence) that each encoder layer writes its K/V rows into
    # before attending, as vLLM's CPU backend stages them; None for a decoder group.
    encoder_pools: tuple[torch.Tensor, torch.Tensor] | None = None
    # Block tables of sliding-window layers by (window, block_size), made once per step.
    window_tables: dict = field(default_factory=dict)
    # Cross-attention: int32 [num_reqs + 1], the rows of the step's encoder K/V of each request
    # (all of its encoder tokens on the step its encoder ran, else none; vLLM's slot_mapping then
    # has one slot per such row); None for the other groups.
    key_start_loc: torch.Tensor | None = None


def _int_tensor(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    t = t.to("cpu", dtype)
    return t if t.is_contiguous() else t.contiguous()


class AttnrtMetadataBuilder(AttentionMetadataBuilder[AttnrtMetadata]):
    """CommonAttentionMetadata -> AttnrtMetadata (no reordering: decodes and prefills mix)."""

    reorder_batch_threshold: ClassVar[int | None] = None

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.encoder_only = isinstance(kv_cache_spec, EncoderOnlyAttentionSpec)
        self.cross = isinstance(kv_cache_spec, CrossAttentionSpec)
        self.dtype = vllm_config.model_config.dtype

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AttnrtMetadata:
        m = common_attn_metadata
        if isinstance(m.causal, torch.Tensor):
            raise NotImplementedError(
                "attnrt's vLLM backend (ATTNRT_VLLM=1) cannot serve a causal mask given per "
                "request (dynamic causal); unset ATTNRT_VLLM to use vLLM's own CPU attention")
        n = m.num_reqs
        tokens = m.num_actual_tokens
        qsl = getattr(m, "query_start_loc_cpu", None)
        if qsl is None:
            qsl = m.query_start_loc
        query_start_loc = _int_tensor(qsl[:n + 1], torch.int32)
        seq_lens = _int_tensor(m.seq_lens[:n], torch.int32)
        if self.encoder_only:
            table, pools = self._encoder_pools(query_start_loc, seq_lens)
            return AttnrtMetadata(
                num_actual_tokens=tokens, max_query_len=m.max_query_len,
                max_seq_len=m.max_seq_len, query_start_loc=query_start_loc, seq_lens=seq_lens,
                block_table=table, slot_mapping=torch.empty(0, dtype=torch.int64), causal=False,
                encoder_pools=pools)
        key_start_loc = None
        if self.cross:
            # vLLM's cross-attention builder: seq_lens are the encoders' lengths, and
            # encoder_seq_lens_cpu those of the requests whose encoder rows this step writes
            # (0 for the others), in the order of the rows and of its slot_mapping.
            key_start_loc = cross_key_start_loc(m.encoder_seq_lens_cpu, n)
        return AttnrtMetadata(
            num_actual_tokens=tokens, max_query_len=m.max_query_len, max_seq_len=m.max_seq_len,
            query_start_loc=query_start_loc, seq_lens=seq_lens,
            block_table=_int_tensor(m.block_table_tensor[:n], torch.int32),
            slot_mapping=_int_tensor(m.slot_mapping[:tokens], torch.int64),
            causal=bool(m.causal) and not self.cross, key_start_loc=key_start_loc)

    def _encoder_pools(self, query_start_loc: torch.Tensor,
                       seq_lens: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """An encoder step's block table (sequence b's blocks follow sequence b-1's) and scratch
        K/V pools, BNSH in the model dtype (a kv head's rows of a block contiguous: measured 10 %
        faster than BSNH on a bfloat16 BERT-sized step). Encoder attention sees a whole sequence
        at once: each sequence's new rows must be all of it (q_len_b == seq_len_b)."""
        q_lens = query_start_loc[1:] - query_start_loc[:-1]
        if not torch.equal(q_lens, seq_lens):
            raise NotImplementedError(
                "attnrt's vLLM backend: encoder attention over a sequence split across steps "
                f"(query lengths {q_lens.tolist()}, sequence lengths {seq_lens.tolist()})")
        spec = self.kv_cache_spec
        # The scratch is attnrt's own: vLLM's block size, within the paged op's limit of 1024.
        block_size = min(spec.block_size, 1024)
        blocks = (seq_lens + block_size - 1) // block_size
        first = blocks.cumsum(0, dtype=torch.int32) - blocks
        width = max(1, int(blocks.max())) if blocks.numel() else 1
        table = first[:, None] + torch.arange(width, dtype=torch.int32)[None, :]
        # Slots past a sequence's own blocks are never read; keep them inside the pool.
        total = max(1, int(blocks.sum()))
        table = table.clamp_(max=total - 1).contiguous()
        shape = (total, spec.num_kv_heads, block_size, spec.head_size)
        return table, (torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype))


def cross_key_start_loc(encoder_seq_lens, num_reqs: int) -> torch.Tensor:
    """key_start_loc of a cross-attention step: the running sum of the encoder rows each request
    writes (vLLM's encoder_seq_lens_cpu, a numpy array or tensor), from 0."""
    lens = torch.as_tensor(encoder_seq_lens[:num_reqs]).to(torch.int32)
    out = torch.zeros(num_reqs + 1, dtype=torch.int32)
    torch.cumsum(lens, 0, out=out[1:])
    return out


# vLLM's null block: block 0 of every KV cache, never written (kv_cache_manager's block pool).
NULL_BLOCK = 0


def _drop_blocks_behind_window(md: AttnrtMetadata, window: int, block_size: int) -> torch.Tensor:
    """The block table with the slots no query of this step can see (wholly before the first
    query row's window of `window` keys) set to vLLM's null block. vLLM frees those blocks of
    sliding-window layers and may give them to newer tokens of the same sequence while the worker's
    table still names them at the old slots; attnrt checks every slot of a sequence and refuses a
    block named twice when one of the slots is being written."""
    q_lens = md.query_start_loc[1:] - md.query_start_loc[:-1]
    first_key = (md.seq_lens - q_lens - (window - 1)).clamp(min=0)
    dead = first_key // block_size
    if int(dead.max()) == 0:
        return md.block_table
    slots = torch.arange(md.block_table.shape[1], dtype=torch.int32)
    table = torch.where(slots[None, :] < dead[:, None],
                        torch.tensor(NULL_BLOCK, dtype=torch.int32), md.block_table)
    return table.contiguous()


class AttnrtImpl(AttentionImpl[AttnrtMetadata]):
    """Runs a decoder attention layer through attnrt.paged_attention_varlen."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **unsupported) -> None:
        def refuse(what: str) -> None:
            raise NotImplementedError(f"attnrt's vLLM backend (ATTNRT_VLLM=1) cannot serve {what}; "
                                      f"unset ATTNRT_VLLM to use vLLM's own CPU attention")

        if unsupported:
            refuse(f"the attention options {sorted(unsupported)}")
        if attn_type not in _ATTN_TYPES:
            refuse(f"attn_type {attn_type!r} (served: decoder self-attention, the encoders' "
                   f"non-causal self-attention and cross-attention)")
        if kv_sharing_target_layer_name is not None and attn_type != AttentionType.DECODER:
            refuse(f"{attn_type} attention sharing the KV cache of "
                   f"{kv_sharing_target_layer_name!r}")
        if kv_cache_dtype not in ("auto", *FP8_KV_CACHE_DTYPES):
            refuse(f"kv_cache_dtype {kv_cache_dtype!r} (served: 'auto', the model dtype, "
                   f"'fp8'/'fp8_e4m3', float8 e4m3fn, and 'fp8_e5m2', float8 e5m2, with "
                   f"per-layer scales)")
        if not isinstance(head_size, int) or head_size < 1:
            refuse(f"head_size {head_size!r} (expected a positive integer)")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            refuse(f"{num_heads} query heads over {num_kv_heads} KV heads (must divide)")
        if alibi_slopes is not None and len(alibi_slopes) != num_heads:
            refuse(f"{len(alibi_slopes)} ALiBi slopes for {num_heads} query heads")
        if sinks is not None and tuple(sinks.shape) != (num_heads,):
            refuse(f"sinks of shape {tuple(sinks.shape)} (expected ({num_heads},))")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.encoder = attn_type in _ENCODER_TYPES
        self.cross = attn_type == AttentionType.ENCODER_DECODER
        # fp8 KV cache (decoder layers; the encoders' scratch pools stay in the model dtype).
        self.fp8 = kv_cache_dtype in FP8_KV_CACHE_DTYPES and not self.encoder
        self._scales: tuple = ()  # (k_scale, v_scale, their float32 tensors)
        # A layer reading the KV cache of an earlier layer (vLLM gives it that layer's cache
        # tensor): it writes no rows, the target layer wrote this step's.
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        # ALiBi (Bloom, MPT, Baichuan-style models): slope * (key position - query position) added
        # to each score, as vLLM's kernel adds it.
        self.alibi_slopes = (None if alibi_slopes is None
                             else torch.tensor(alibi_slopes, dtype=torch.float32))
        # vLLM's sliding_window W: the query at position i sees keys j with i - j < W, that is
        # FlashAttention's window (W - 1, 0); without the causal mask (encoder layers) |i - j| < W,
        # (W - 1, W - 1), as vLLM's CPU kernel bounds it.
        self.sliding_window = sliding_window
        self.window_size = (-1, -1) if sliding_window is None else (int(sliding_window) - 1, 0)
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.sinks = sinks
        self._sinks_cast: torch.Tensor | None = None
        self._kv_cache: torch.Tensor | None = None
        self._pools: tuple = ()
        self._auto_for: tuple = ()  # the (dtype, block_size) p_precision "auto" was resolved for
        self.p_precision = p_precision_from_env()
        self._p_precision = "exact" if self.p_precision == "auto" else self.p_precision
        _announce(self.p_precision)

    def _set_kv_cache(self, kv_cache: torch.Tensor, dtype: torch.dtype) -> None:
        """The layer's K and V pools: BNSH views of the slab halves (kept while vLLM passes the
        same cache tensor), float8_e4m3fn (float8_e5m2) views of vLLM's uint8 cache for an fp8
        KV cache."""
        if self.fp8:
            kv_cache = kv_cache.view(_FP8_FORMATS[self.kv_cache_dtype][0])
        num_blocks, kv_heads, block_size, width = kv_cache.shape
        if width != 2 * self.head_size or kv_heads != self.num_kv_heads:
            raise ValueError(f"attnrt's vLLM backend: KV cache of shape {tuple(kv_cache.shape)}, "
                             f"expected [num_blocks, {self.num_kv_heads}, block_size, "
                             f"{2 * self.head_size}]")
        pools = kv_cache.view(num_blocks, kv_heads, 2, block_size, self.head_size)
        self._pools = (pools[:, :, 0], pools[:, :, 1], block_size)
        self._follow_vllm_kernel(dtype, block_size, self.kv_cache_dtype)

    def _follow_vllm_kernel(self, dtype: torch.dtype, block_size: int,
                            kv_cache_dtype: str) -> None:
        """With ATTNRT_VLLM_P_PRECISION=auto, the p_precision of vLLM's own kernel for the pools
        this layer reads (resolved again when their dtype or block size changes)."""
        if self.p_precision != "auto" or self._auto_for == (dtype, block_size):
            return
        self._auto_for = (dtype, block_size)
        self._p_precision = vllm_kernel_p_precision(dtype, block_size, self.head_size,
                                                    kv_cache_dtype)
        _announce_auto(dtype, block_size, self.head_size, self._p_precision)

    @staticmethod
    def _window_table(md: AttnrtMetadata, window: int, block_size: int) -> torch.Tensor:
        """This step's block table for a window of `window` keys (made once per step and
        window)."""
        key = (window, block_size)
        table = md.window_tables.get(key)
        if table is None:
            table = md.window_tables[key] = _drop_blocks_behind_window(md, window, block_size)
        return table

    def _scale_tensors(self, layer) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's k_scale/v_scale (vLLM's _k_scale_float/_v_scale_float, 1.0 until a
        checkpoint sets them) as the float32 tensors attnrt reads, remade when they change; a
        scale that is not a positive finite number is an error, as in vLLM's own fp8 writer."""
        k = float(getattr(layer, "_k_scale_float", 1.0))
        v = float(getattr(layer, "_v_scale_float", 1.0))
        if not self._scales or self._scales[:2] != (k, v):
            for name, value in (("k_scale", k), ("v_scale", v)):
                if not (math.isfinite(value) and value > 0):
                    raise ValueError(f"attnrt's vLLM backend: {name} must be a positive finite "
                                     f"number for an fp8 KV cache, got {value}")
            self._scales = (k, v, torch.tensor([k], dtype=torch.float32),
                            torch.tensor([v], dtype=torch.float32))
        return self._scales[2], self._scales[3]

    def _vllm_kv_rows(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's new K and V rows as _vllm_rows makes them, at the layer's scales."""
        return self._vllm_rows(k, self._scales[0]), self._vllm_rows(v, self._scales[1])

    def _vllm_rows(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        """The rows attnrt's writer turns into vLLM's bytes: the values of vLLM's codes
        (fp8_rows_as_vllm) times the scale, in x's dtype. attnrt stores row / scale rounded to
        the nearest code; each of these values is within a dtype rounding (2^-9 relative for
        bfloat16) of its code times the scale, far inside half a code's spacing (at least 2^-4
        relative for e4m3, 2^-3 for e5m2), so the nearest code is vLLM's: one write path, after
        all of attnrt's checks."""
        unit = _FP8_FORMATS[self.kv_cache_dtype][3]
        if x.dtype == torch.float16 and scale * unit < 2.0**-22:
            # float16 would hold the smallest codes' values as subnormals too coarse to round
            # back (the smallest code times the scale must stay 4 spacings of float16's 2^-24).
            raise NotImplementedError(
                f"attnrt's vLLM backend: a {self.kv_cache_dtype} KV cache with a float16 model "
                f"and a scale of {scale} (below 2^{math.log2(2.0**-22 / unit):.0f}) is not served")
        return (fp8_rows_as_vllm(x, scale, self.kv_cache_dtype).float() * scale).to(x.dtype)

    def window(self, attn_metadata: AttnrtMetadata) -> tuple[int, int]:
        """FlashAttention-style (left, right) window of this step (called every step: the end-to-end
        check's negative control overrides it)."""
        return self.window_size

    def causal(self, attn_metadata: AttnrtMetadata) -> bool:
        """Whether this step's query rows see only the keys up to their own position (False for
        the encoders, cross-attention and non-causal decoder groups; called every step: the
        end-to-end checks' negative controls override it)."""
        return attn_metadata.causal and not self.encoder and not self.cross

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: AttnrtMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("attnrt's vLLM backend: fused output quantization is not "
                                      "served")
        if attn_metadata is None:  # profiling / warm-up run
            return output
        n = attn_metadata.num_actual_tokens
        if n == 0:
            return output
        if self.encoder:
            if key is None or value is None:
                raise ValueError(f"attnrt's vLLM backend: {self.attn_type} attention needs this "
                                 f"step's key and value rows (its scratch pools hold nothing else)")
            if attn_metadata.encoder_pools is None:
                raise ValueError(f"attnrt's vLLM backend: {self.attn_type} attention was given a "
                                 f"decoder's metadata (no encoder pools)")
            k_pool, v_pool = attn_metadata.encoder_pools
            block_size = k_pool.shape[2]
            self._follow_vllm_kernel(k_pool.dtype, block_size, "auto")
        else:
            if kv_cache is not self._kv_cache:
                self._set_kv_cache(kv_cache, query.dtype)
                self._kv_cache = kv_cache
            k_pool, v_pool, block_size = self._pools
        sinks = self.sinks
        if sinks is not None and sinks.dtype != query.dtype:
            if self._sinks_cast is None or self._sinks_cast.dtype != query.dtype:
                self._sinks_cast = sinks.to(query.dtype)
            sinks = self._sinks_cast
        q = _rows(query, n)
        out = output if output.shape[0] == n else output[:n]
        k = v = slots = key_start_loc = None
        if key is not None and value is not None and self.kv_sharing_target_layer_name is None:
            rows = n
            if self.cross:
                # The encoder rows of the requests whose encoder ran this step.
                key_start_loc = attn_metadata.key_start_loc
                if key_start_loc is None:
                    raise ValueError("attnrt's vLLM backend: a cross-attention layer was given "
                                     "another group's metadata (no key_start_loc)")
                rows = int(key_start_loc[-1])
            if rows > 0:
                k, v = _rows(key, rows), _rows(value, rows)
                # Encoder rows go where the scratch table and seq_lens say.
                slots = None if self.encoder else attn_metadata.slot_mapping
            else:
                key_start_loc = None
        k_scale = v_scale = None
        if self.fp8:
            k_scale, v_scale = self._scale_tensors(layer)
            if k is not None and v is not None:
                k, v = self._vllm_kv_rows(k, v)
        causal = self.causal(attn_metadata)
        window = self.window(attn_metadata)
        if not causal and window[0] >= 0 and window[1] == 0:
            # vLLM's sliding window W without the causal mask: W - 1 keys on either side
            # (ModernBERT-style local encoder layers).
            window = (window[0], window[0])
        table = attn_metadata.block_table
        if window[0] >= 0 and not self.encoder:
            # (The encoders' scratch blocks are all written and all read by their own sequence.)
            table = self._window_table(attn_metadata, window[0] + 1, block_size)
        rid = torch_runtime_id()
        if rid:
            try:
                _torch_lib._varlen_on(
                    rid, q, k_pool, v_pool, attn_metadata.query_start_loc,
                    attn_metadata.seq_lens, table, out, k, v, slots, sinks, self.scale,
                    window[0], self.logits_soft_cap, "BNSH", self._p_precision, causal,
                    k_scale, v_scale, key_start_loc, self.alibi_slopes,
                    -1 if causal else window[1])
            except (RuntimeError, ValueError) as e:
                _torch_lib.raise_attnrt_error(e)
            return output
        paged_attention_varlen(
            runtime(), q, k_pool, v_pool, attn_metadata.query_start_loc,
            attn_metadata.seq_lens, table, k=k, v=v, cu_seqlens_k=key_start_loc,
            alibi_slopes=self.alibi_slopes, slot_mapping=slots, softmax_scale=self.scale,
            causal=causal, window_size=window, softcap=self.logits_soft_cap, sinks=sinks, out=out,
            kv_layout="BNSH", block_size=block_size, k_scale=k_scale, v_scale=v_scale,
            p_precision=self._p_precision)
        return output


def _rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """The first n rows of x as a compact tensor (the C ABI's query/key/value rows are compact):
    x itself when it is, else a copy."""
    if x.shape[0] != n:
        x = x[:n]
    return x if x.is_contiguous() else x.contiguous()
