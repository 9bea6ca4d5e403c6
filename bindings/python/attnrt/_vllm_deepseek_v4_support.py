"""Run-time fixes that let vLLM 0.32.0 run DeepSeek-V4 on CPU without Triton's CPU backend.

vLLM's CPU build of DeepSeek-V4 (vllm.models.deepseek_v4.cpu) runs the model's attention,
compressor and indexer through C++ kernels, but the attention metadata builders it shares with
the GPU backends still launch a few small Triton kernels. Triton's CPU backend is not on PyPI;
without it vllm.triton_utils replaces ``triton.jit`` with a placeholder and the first metadata
build fails with ``TypeError: 'function' object is not subscriptable``. Past that, the CPU SWA
metadata builder's ``build_tile_scheduler`` returns three of the five layer-type keys its base
class's ``build`` reads (``KeyError: 'c1a'``).

``apply()`` replaces exactly the Triton launches that a CPU DeepSeek-V4 step reaches with the
eager torch functions below (each one names the kernel it stands for and computes what the
kernel writes, element for element) and completes the tile-scheduler dictionary. It acts only
on vLLM 0.32.0, on the CPU platform, when vLLM found no usable Triton (``HAS_TRITON`` false),
and only on targets that exist; each fix is logged once through vLLM's logger. Otherwise it does
nothing. attnrt.vllm.register() (the package's ``vllm.general_plugins`` entry point, run in
every vLLM process) calls it whatever ATTNRT_VLLM says: these fixes concern vLLM's own backend.

Without AMX tiles (``torch.cpu._is_amx_tile_supported()`` false) vLLM 0.32's
``CpuPlatform.check_and_update_config`` treats DeepSeek-V4 like the reference MLA backend and
turns chunked prefill and prefix caching off (and raises max_num_batched_tokens to the model
length). With ``ATTNRT_VLLM_DSV4_CHUNKED_PREFILL=1`` ``apply()`` also restores what the
configuration asked for on DeepSeek-V4 models, so that chunked prefill and prefix caching can be
exercised on such hosts; it is off by default.

Importing this module imports neither torch nor vLLM, and apply() does nothing in a process
that has not loaded vLLM. The eager functions take torch tensors and do not need vLLM, so they
can be checked without it (tests/bindings/python/test_vllm_deepseek_v4_support.py compares each
against a scalar transcription of its Triton kernel).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing this module imports no torch
    import torch

__all__ = [
    "apply",
    "applied",
    "token_to_req_indices",
    "swa_indices_and_lens",
    "prefill_gather_lens",
    "compressed_slot_mapping",
    "prefill_chunk_metadata",
]

VLLM_VERSION = "0.32.0"
CHUNKED_PREFILL_ENV = "ATTNRT_VLLM_DSV4_CHUNKED_PREFILL"
PAD_SLOT = -1

_applied: list[str] = []


def applied() -> list[str]:
    """The names of the fixes apply() installed in this process (empty when none)."""
    return list(_applied)


# ---------------------------------------------------------------------------------------------
# Eager equivalents of the Triton kernels. Integer arithmetic: every operand that is divided or
# reduced modulo is non-negative, where Triton's truncating division and torch's floor division
# agree.
# ---------------------------------------------------------------------------------------------


def token_to_req_indices(query_start_loc: torch.Tensor, out: torch.Tensor, num_mapped_tokens: int,
                         num_tokens: int) -> torch.Tensor:
    """Replaces vllm.v1.attention.ops.metadata.compute_token_to_req_indices (Triton kernel
    ``_token_request_mapping_kernel``): token t < num_tokens gets the request whose
    [query_start_loc[r], query_start_loc[r+1]) holds it (the kernel's binary search: the number
    of requests ending at or before t, at most num_reqs - 1), tokens t >= num_mapped_tokens get
    0. Writes out[:num_tokens] and returns that view."""
    import torch

    num_reqs = query_start_loc.shape[0] - 1
    tokens = torch.arange(num_tokens, device=out.device, dtype=torch.int64)
    ends = query_start_loc[1:].to(torch.int64)
    req = torch.searchsorted(ends, tokens, right=True).clamp_(max=num_reqs - 1)
    req = torch.where(tokens < num_mapped_tokens, req, torch.zeros_like(req))
    out[:num_tokens] = req.to(out.dtype)
    return out[:num_tokens]


def _rows(t: "torch.Tensor") -> "torch.Tensor":
    """[N, ...] -> a [N, row_stride] view over the same memory (Triton's ptr + pid * stride(0))."""
    if t.dim() == 1:
        return t.view(-1, 1)
    inner = t[0].numel()
    if t.stride(0) != inner or not t[0].is_contiguous():
        raise ValueError(f"expected rows of {inner} contiguous elements, got strides {t.stride()}")
    return t.view(t.shape[0], inner)


def swa_indices_and_lens(swa_indices: torch.Tensor, swa_lens: torch.Tensor, window_size: int,
                         index_width: int, left_visible: torch.Tensor | None,
                         right_visible: torch.Tensor | None, query_start_loc: torch.Tensor,
                         seq_lens: torch.Tensor, token_to_req_indices: torch.Tensor,
                         is_valid_token: torch.Tensor, block_table: torch.Tensor, block_size: int,
                         replay_start: torch.Tensor, num_tokens: int, token_offset: int) -> None:
    """Replaces the Triton kernel ``_compute_swa_indices_and_lens_kernel``
    (vllm/v1/attention/backends/mla/sparse_swa.py, launched through
    ``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL``). Row i (token t = i + token_offset) gets the
    paged-cache slot ids of the sliding window that ends at the token: positions
    [start, pos + right + 1) with pos the token's position in its request, start =
    max(pos - (window_size - 1) - max(left - (window_size - 1), 0), 0, replay_start[req]), left
    and right the in-image visibility (0 without images); swa_lens[i] = the window's length;
    entries past it (up to index_width) are -1. Padded tokens (is_valid_token false) get length
    0 and a row of -1."""
    import torch

    if num_tokens == 0:
        return
    device = swa_lens.device
    t = torch.arange(num_tokens, device=device) + token_offset
    valid = is_valid_token[t].to(torch.bool)
    req = token_to_req_indices[t].to(torch.int64)
    qsl = query_start_loc.to(torch.int64)
    query_start = qsl[req]
    query_len = qsl[req + 1] - query_start
    pos = seq_lens.to(torch.int64)[req] - query_len + t - query_start
    if left_visible is not None and right_visible is not None:
        left = left_visible[t].to(torch.int64)
        right = right_visible[t].to(torch.int64)
    else:
        left = right = torch.zeros_like(pos)
    left_add = (left - (window_size - 1)).clamp(min=0)
    start = (pos - (window_size - 1) - left_add).clamp(min=0)
    start = torch.maximum(start, replay_start.to(torch.int64)[req])
    end = pos + right + 1
    length = end - start
    swa_lens[:num_tokens] = torch.where(valid, length, torch.zeros_like(length)).to(swa_lens.dtype)
    offsets = torch.arange(index_width, device=device)
    p = start.unsqueeze(1) + offsets
    keep = valid.unsqueeze(1) & (offsets < length.unsqueeze(1))
    block_col = torch.where(keep, p // block_size, torch.zeros_like(p))
    blocks = block_table.to(torch.int64)[req.unsqueeze(1).expand_as(p), block_col]
    slots = torch.where(keep, blocks * block_size + p % block_size, torch.full_like(p, PAD_SLOT))
    _rows(swa_indices)[:num_tokens, :index_width] = slots.to(swa_indices.dtype)


def prefill_gather_lens(out: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                        replay_start: torch.Tensor, num_prefills: int, num_decodes: int,
                        window_size: int) -> None:
    """Replaces ``ComputePrefillMetadataKernel.kernel`` (vllm/v1/attention/backends/mla/
    sparse_swa.py, ``_COMPUTE_PREFILL_METADATA_KERNEL``): for prefill request i (request
    num_decodes + i), out[i] = query_len + min(max(prefix_len - replay_start, 0),
    window_size - 1), with prefix_len = seq_len - query_len."""
    import torch

    if num_prefills <= 0:
        return
    r = torch.arange(num_decodes, num_decodes + num_prefills, device=out.device)
    qsl = query_start_loc.to(torch.int64)
    query_len = qsl[r + 1] - qsl[r]
    prefix_len = seq_lens.to(torch.int64)[r] - query_len
    visible = (prefix_len - replay_start.to(torch.int64)[r]).clamp(min=0)
    out[:num_prefills] = (query_len + visible.clamp(max=window_size - 1)).to(out.dtype)


def compressed_slot_mapping(out: torch.Tensor, slot_mapping: torch.Tensor,
                            query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                            block_table: torch.Tensor, block_size: int, compress_ratio: int,
                            dcp_world_size: int, cp_interleave: int) -> None:
    """Replaces ``CompressedSlotMappingKernel.kernel`` (vllm/v1/attention/backends/mla/
    compressor_utils.py, ``_COMPRESSED_SLOT_MAPPING_KERNEL``, called by
    get_compressed_slot_mapping). For each of the block table's requests b and each of its query
    tokens (position pos = seq_len - query_len + offset): the token that completes a compressed
    state ((pos + 1) % compress_ratio == 0) and has a slot of its own maps to the state's slot
    (local position pos // (cp_interleave * dcp_world_size) * cp_interleave + pos %
    cp_interleave, divided by compress_ratio, through the block table); every other query token
    maps to -1. Tokens outside the requests' query ranges are left as they are."""
    import torch

    num_reqs = block_table.shape[0]
    qsl = query_start_loc.to(torch.int64)
    total = int(qsl[num_reqs].item()) if num_reqs > 0 else 0
    if total == 0:
        return
    device = out.device
    t = torch.arange(total, device=device)
    req = torch.searchsorted(qsl[1:num_reqs + 1], t, right=True)
    inside = (req < num_reqs) & (t >= qsl[0])
    req = req.clamp(max=num_reqs - 1)
    query_start = qsl[req]
    query_len = qsl[req + 1] - query_start
    pos = seq_lens.to(torch.int64)[req] - query_len + (t - query_start)
    slot = slot_mapping[t].to(torch.int64)
    is_valid = inside & ((pos + 1) % compress_ratio == 0) & (slot != PAD_SLOT)
    local_pos = pos // (cp_interleave * dcp_world_size) * cp_interleave + pos % cp_interleave
    state = local_pos // compress_ratio
    block_col = torch.where(is_valid, state // block_size, torch.zeros_like(state))
    blocks = block_table.to(torch.int64)[req, block_col]
    ids = torch.where(is_valid, blocks * block_size + state % block_size,
                      torch.full_like(state, PAD_SLOT))
    out[t[inside]] = ids[inside].to(out.dtype)


def prefill_chunk_metadata(query_start_loc: torch.Tensor, uncompressed_seq_lens: torch.Tensor,
                           cu_compressed_seq_lens: torch.Tensor,
                           row_start_cu_compressed_seq_lens: torch.Tensor,
                           token_to_seq: torch.Tensor, cu_seq_len_ks: torch.Tensor,
                           cu_seq_len_ke: torch.Tensor, query_slice_start: int,
                           query_slice_stop: int, dcp_rank: int, dcp_world: int,
                           dcp_interleave: int, num_reqs: int, compress_ratio: int) -> None:
    """Replaces ``BuildPrefillChunkMetadataKernel.kernel`` (vllm/v1/attention/backends/mla/
    indexer.py, ``_BUILD_PREFILL_CHUNK_METADATA_KERNEL``, called by build_prefill_chunk_metadata).
    For request b's query token at absolute index a = query_start + offset inside
    [query_slice_start, query_slice_stop): cu_seq_len_ks[a - query_slice_start] = the request's
    row start, cu_seq_len_ke[...] = row start + (seq_len - query_len + 1 + offset) //
    compress_ratio (localized to this rank's share under decode context parallelism);
    token_to_seq[cu[b] : cu[b+1]] = b."""
    import torch

    if num_reqs <= 0:
        return
    device = cu_seq_len_ks.device
    qsl = query_start_loc.to(torch.int64)
    cu = cu_compressed_seq_lens.to(torch.int64)
    lens = cu[1:num_reqs + 1] - cu[:num_reqs]
    owners = torch.repeat_interleave(torch.arange(num_reqs, device=device), lens.clamp(min=0))
    token_to_seq[int(cu[0]):int(cu[0]) + owners.numel()] = owners.to(token_to_seq.dtype)

    total = int(qsl[num_reqs].item())
    first = int(qsl[0].item())
    lo, hi = max(first, query_slice_start), min(total, query_slice_stop)
    if hi <= lo:
        return
    a = torch.arange(lo, hi, device=device)
    req = torch.searchsorted(qsl[1:num_reqs + 1], a, right=True)
    query_start = qsl[req]
    query_len = qsl[req + 1] - query_start
    offset = a - query_start
    start_pos = uncompressed_seq_lens.to(torch.int64)[req] - query_len
    row_start = row_start_cu_compressed_seq_lens.to(torch.int64)[req]
    length = (start_pos + 1 + offset) // compress_ratio
    if dcp_world > 1:
        base = (length // dcp_interleave // dcp_world) * dcp_interleave
        remainder = (length - base * dcp_world - dcp_rank * dcp_interleave).clamp(
            min=0, max=dcp_interleave)
        length = base + remainder
    out = a - query_slice_start
    cu_seq_len_ks[out] = row_start.to(cu_seq_len_ks.dtype)
    cu_seq_len_ke[out] = (row_start + length).to(cu_seq_len_ke.dtype)


# ---------------------------------------------------------------------------------------------
# Adapters with the signatures of the objects they stand in for.
# ---------------------------------------------------------------------------------------------


class _SwaIndicesAndLens:
    """Stands in for sparse_swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL (same call signature as
    ComputeSWAIndicesAndLensKernel.__call__)."""

    def __call__(self, swa_indices, swa_lens, window_size, index_width, left_visible,
                 right_visible, query_start_loc, seq_lens, token_to_req_indices, is_valid_token,
                 block_table, block_size, replay_start, *, num_tokens, token_offset,
                 has_image=False):
        swa_indices_and_lens(swa_indices, swa_lens, window_size, index_width,
                             left_visible if has_image else None,
                             right_visible if has_image else None, query_start_loc, seq_lens,
                             token_to_req_indices, is_valid_token, block_table, block_size,
                             replay_start, num_tokens, token_offset)

    def register_warmup(self, *args, **kwargs):  # no Triton kernel to compile
        pass


class _PrefillMetadata:
    """Stands in for sparse_swa._COMPUTE_PREFILL_METADATA_KERNEL."""

    def __call__(self, prefill_gather_lens_out, seq_lens, query_start_loc, replay_start,
                 num_prefills, num_decodes, window_size):
        prefill_gather_lens(prefill_gather_lens_out, seq_lens, query_start_loc, replay_start,
                            num_prefills, num_decodes, window_size)

    def register_warmup(self, *args, **kwargs):
        pass


class _CompressedSlotMapping:
    """Stands in for compressor_utils._COMPRESSED_SLOT_MAPPING_KERNEL."""

    def __call__(self, out, slot_mapping, query_start_loc, seq_lens, block_table, block_size,
                 compress_ratio, dcp_world_size, cp_interleave):
        compressed_slot_mapping(out, slot_mapping, query_start_loc, seq_lens, block_table,
                                block_size, compress_ratio, dcp_world_size, cp_interleave)

    def register_warmup(self, *args, **kwargs):
        pass


class _PrefillChunkMetadata:
    """Stands in for indexer._BUILD_PREFILL_CHUNK_METADATA_KERNEL."""

    def __call__(self, query_start_loc, uncompressed_seq_lens, cu_compressed_seq_lens,
                 row_start_cu_compressed_seq_lens, token_to_seq, cu_compressed_seq_len_ks,
                 cu_compressed_seq_len_ke, query_slice_start, query_slice_stop, DCP_RANK,
                 DCP_WORLD, DCP_INTERLEAVE, *, num_reqs, COMPRESS_RATIO):
        prefill_chunk_metadata(query_start_loc, uncompressed_seq_lens, cu_compressed_seq_lens,
                               row_start_cu_compressed_seq_lens, token_to_seq,
                               cu_compressed_seq_len_ks, cu_compressed_seq_len_ke,
                               int(query_slice_start), int(query_slice_stop), int(DCP_RANK),
                               int(DCP_WORLD), int(DCP_INTERLEAVE), int(num_reqs),
                               int(COMPRESS_RATIO))

    def register_warmup(self, *args, **kwargs):
        pass


# ---------------------------------------------------------------------------------------------
# apply()
# ---------------------------------------------------------------------------------------------


def _logger():
    from vllm.logger import init_logger

    return init_logger("vllm.attnrt")


def _wanted() -> str | None:
    """Why apply() does nothing here (None: it applies). vLLM is never imported here: the fixes
    concern processes vLLM runs in."""
    vllm = sys.modules.get("vllm")
    if vllm is None:
        return "vLLM is not loaded in this process"
    if getattr(vllm, "__version__", None) != VLLM_VERSION:
        return f"vLLM {getattr(vllm, '__version__', '?')} is not {VLLM_VERSION}"
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "the platform is not CPU"
    return None


def _replace(fixes, name: str, module_name: str, attribute: str, replacement) -> None:
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return
    if not hasattr(module, attribute) or getattr(getattr(module, attribute), "_attnrt_fix", False):
        return
    try:
        setattr(replacement, "_attnrt_fix", True)
    except AttributeError:
        pass
    setattr(module, attribute, replacement)
    fixes.append(name)


def _triton_fixes(fixes: list[str]) -> None:
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return

    def compute_token_to_req_indices(query_start_loc, out, num_mapped_tokens, num_tokens):
        return token_to_req_indices(query_start_loc, out, num_mapped_tokens, num_tokens)

    # Import every target first, so that a module that copies a name from another at import
    # time holds vLLM's original (and is listed as fixed) whatever the import order was.
    import importlib

    for module in ("vllm.v1.attention.ops.metadata", "vllm.v1.attention.backends.mla.sparse_swa",
                   "vllm.v1.attention.backends.mla.compressor_utils",
                   "vllm.v1.attention.backends.mla.indexer"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass

    # vllm/v1/attention/backend.py CommonAttentionMetadata.token_to_req_indices imports it from
    # vllm.v1.attention.ops.metadata at call time; sparse_swa.py imported it at load.
    for module in ("vllm.v1.attention.ops.metadata", "vllm.v1.attention.backends.mla.sparse_swa"):
        _replace(fixes, f"{module}.compute_token_to_req_indices", module,
                 "compute_token_to_req_indices", compute_token_to_req_indices)
    swa = "vllm.v1.attention.backends.mla.sparse_swa"
    _replace(fixes, f"{swa}._COMPUTE_SWA_INDICES_AND_LENS_KERNEL", swa,
             "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL", _SwaIndicesAndLens())
    _replace(fixes, f"{swa}._COMPUTE_PREFILL_METADATA_KERNEL", swa,
             "_COMPUTE_PREFILL_METADATA_KERNEL", _PrefillMetadata())
    cu = "vllm.v1.attention.backends.mla.compressor_utils"
    _replace(fixes, f"{cu}._COMPRESSED_SLOT_MAPPING_KERNEL", cu, "_COMPRESSED_SLOT_MAPPING_KERNEL",
             _CompressedSlotMapping())
    ix = "vllm.v1.attention.backends.mla.indexer"
    _replace(fixes, f"{ix}._BUILD_PREFILL_CHUNK_METADATA_KERNEL", ix,
             "_BUILD_PREFILL_CHUNK_METADATA_KERNEL", _PrefillChunkMetadata())


def _tile_scheduler_fix(fixes: list[str]) -> None:
    """vllm/models/deepseek_v4/cpu/cpu_mla.py DeepseekV4CPUSparseSWAMetadataBuilder.
    build_tile_scheduler returns the swaonly/c4a/c128a keys only, while the base
    DeepseekSparseSWAMetadataBuilder.build (vllm/v1/attention/backends/mla/sparse_swa.py) also
    reads c1a and c2a (DeepSeek-V4.1's layer types): every key gets None, as the base's own CPU
    branch returns."""
    try:
        from vllm.models.deepseek_v4.cpu import cpu_mla
        from vllm.v1.attention.backends.mla import sparse_swa
    except ImportError:
        return
    cls = getattr(cpu_mla, "DeepseekV4CPUSparseSWAMetadataBuilder", None)
    keys = [getattr(sparse_swa, n, None) for n in ("_LAYER_TYPE_SWAONLY", "_LAYER_TYPE_C4A",
                                                   "_LAYER_TYPE_C128A", "_LAYER_TYPE_C1A",
                                                   "_LAYER_TYPE_C2A")]
    if cls is None or None in keys or "build_tile_scheduler" not in cls.__dict__:
        return
    original = cls.__dict__["build_tile_scheduler"]
    if getattr(original, "_attnrt_fix", False):
        return

    def build_tile_scheduler(self, num_decode_tokens):
        out = dict(original(self, num_decode_tokens))
        for key in keys:
            out.setdefault(key, None)
        return out

    setattr(build_tile_scheduler, "_attnrt_fix", True)
    cls.build_tile_scheduler = build_tile_scheduler
    fixes.append(f"{cls.__module__}.{cls.__qualname__}.build_tile_scheduler")


def _chunked_prefill_fix(fixes: list[str]) -> None:
    """vllm/platforms/cpu.py CpuPlatform.check_and_update_config disables chunked prefill and
    prefix caching for MLA models unless ``amx_mla_or_dsv4_enabled`` (AMX tiles present). With
    ATTNRT_VLLM_DSV4_CHUNKED_PREFILL=1, on DeepSeek-V4 models only, the values the
    configuration had before that call are put back."""
    raw = os.environ.get(CHUNKED_PREFILL_ENV, "").strip()
    if raw in ("", "0"):
        return
    if raw != "1":
        raise ValueError(f"{CHUNKED_PREFILL_ENV}={raw!r}: expected 1 (keep chunked prefill and "
                         f"prefix caching for DeepSeek-V4 on CPUs without AMX) or 0 / unset")
    from vllm.platforms import current_platform

    cls = current_platform if isinstance(current_platform, type) else type(current_platform)
    original = cls.__dict__.get("check_and_update_config")
    if original is None or getattr(original.__func__, "_attnrt_fix", False):
        return

    def check_and_update_config(klass, vllm_config):
        model_config = vllm_config.model_config
        is_dsv4 = model_config is not None and getattr(model_config.hf_config, "model_type",
                                                       None) == "deepseek_v4"
        sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
        before = (sched.enable_chunked_prefill, cache.enable_prefix_caching,
                  sched.max_num_batched_tokens)
        original.__func__(klass, vllm_config)
        after = (sched.enable_chunked_prefill, cache.enable_prefix_caching,
                 sched.max_num_batched_tokens)
        if is_dsv4 and before != after:
            (sched.enable_chunked_prefill, cache.enable_prefix_caching,
             sched.max_num_batched_tokens) = before
            _logger().warning_once(
                "%s=1: DeepSeek-V4 keeps chunked prefill %s, prefix caching %s and "
                "max_num_batched_tokens %d (vLLM's CPU platform turns them off without AMX)",
                CHUNKED_PREFILL_ENV, before[0], before[1], before[2])

    wrapped = classmethod(check_and_update_config)
    setattr(check_and_update_config, "_attnrt_fix", True)
    setattr(cls, "check_and_update_config", wrapped)
    fixes.append(f"{cls.__module__}.{cls.__qualname__}.check_and_update_config")


def apply() -> list[str]:
    """Installs the fixes (see the module's docstring) in this process when vLLM is 0.32.0 on
    the CPU platform; returns the names of those installed by this call. Idempotent."""
    why_not = _wanted()
    if why_not is not None:
        return []
    fixes: list[str] = []
    _triton_fixes(fixes)
    _tile_scheduler_fix(fixes)
    _chunked_prefill_fix(fixes)
    if fixes:
        log = _logger()
        for name in fixes:
            log.info("attnrt: vLLM %s DeepSeek-V4 CPU fix applied: %s", VLLM_VERSION, name)
    _applied.extend(fixes)
    return fixes
