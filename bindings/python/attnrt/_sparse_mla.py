"""Sparse MLA (CANN MixedQuantSparseFlashMla) and its metadata op: SparseMlaOp,
SparseMlaMetadataOp, sparse_mla(), sparse_mla_metadata() and the KV token encoders."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import attnrt_c as _c
from . import _arrays
from ._errors import InvalidArgumentError
from ._op import Op, io_names

SPARSE_MLA_INPUTS, SPARSE_MLA_OUTPUTS = io_names(_c.ATTNRT_OP_SPARSE_MLA)
_, SPARSE_MLA_METADATA_OUTPUTS = io_names(_c.ATTNRT_OP_SPARSE_MLA_METADATA)
LAYOUTS = {"BSND": _c.ATTNRT_SPARSE_MLA_LAYOUT_BSND, "TND": _c.ATTNRT_SPARSE_MLA_LAYOUT_TND,
           "PA_BBND": _c.ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND}
# Every attribute of attnrt_sparse_mla_attributes, with its Python type.
SPARSE_MLA_ATTRIBUTES: dict[str, type] = {
    "quant_mode": int, "rope_head_dim": int, "softmax_scale": float, "cmp_ratio": int,
    "ori_mask_mode": int, "cmp_mask_mode": int, "ori_win_left": int, "ori_win_right": int,
    "layout_q": int, "layout_kv": int, "topk_value_mode": int, "return_softmax_lse": int}
METADATA_SIZE = _c.ATTNRT_SPARSE_MLA_METADATA_SIZE
TOKEN_BYTES = {1: _c.ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES, 2: _c.ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES,
               3: _c.ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES}
#: The 16 TQ4 codebook values, ascending (index = the 4-bit code).
TQ4_CODEBOOK: tuple[float, ...] = tuple(_c.sparse_mla_tq4_codebook(i) for i in range(16))


def _native_attributes(attributes: dict[str, Any]) -> "_c.SparseMlaAttributes":
    native = _c.SparseMlaAttributes()
    _arrays.set_attributes(native, attributes, SPARSE_MLA_ATTRIBUTES,
                           {"layout_q": LAYOUTS, "layout_kv": LAYOUTS}, "sparse MLA")
    return native


class SparseMlaOp(Op):
    """Sparse MLA, CANN's MixedQuantSparseFlashMla (attnrt/ops/sparse_mla.h): each query head
    attends with one online softmax over an original-KV window followed by compressed keys (HCA:
    the causal prefix of cmp_kv; CSA: the entries of cmp_sparse_indices); K = V, a 512-value token
    (448 "nope" + 64 "rope") dequantized on the fly. Scenario by presence: SWA = ori_kv only,
    CSA = ori_kv + cmp_kv + cmp_sparse_indices, HCA = ori_kv + cmp_kv.

    Attributes: quant_mode (1, 2 or 3; required), softmax_scale (1/sqrt(512)), cmp_ratio (1),
    ori_mask_mode / cmp_mask_mode (0 none, 3 right-down causal, 4 sliding window on the ori side),
    ori_win_left / ori_win_right (-1 unbounded), layout_q ("BSND" or "TND"), layout_kv ("BSND",
    "TND" or "PA_BBND"), topk_value_mode (1 logical positions, 2 physical slots with PA_BBND,
    3 global slot ids with PA_BBND: ori_sparse_indices and cmp_sparse_indices list each row's keys),
    return_softmax_lse (0/1), rope_head_dim (64).

    Inputs (SPARSE_MLA_INPUTS, CANN's order): q bf16 (f16 too with quant_mode 3), BSND (B,S1,N,512)
    or TND (T1,N,512); ori_kv, cmp_kv: uint8 tokens of the quant mode's format (608 / 584 / 258
    bytes, see sparse_mla_encode; quant_mode 3 ori_kv in q's dtype, 512 values), BSND (B,S2,1,kv_d),
    TND (T2,1,kv_d) or PA_BBND (num_blocks,block_size,1,kv_d) (PA_BBND caches may have a block
    stride); ori_sparse_indices int32 (topk_value_mode 3 only); cmp_sparse_indices int32 (CSA),
    block tables, cu_seqlens_*, seqused_*, cmp_residual_kv int32; sinks float32 (N); metadata
    int32 (2048) from SparseMlaMetadataOp (required). Outputs: attn_out (q's shape and dtype);
    softmax_lse float32 BSND (B,1,S1,N) / TND (1,T1,N) with return_softmax_lse.

    Raises:
        InvalidArgumentError: an attribute is invalid (named, with expected and actual values);
            at plan or run, metadata made for another problem (names the word).
    """

    KIND = _c.ATTNRT_OP_SPARSE_MLA
    TITLE = "sparse MLA"
    INPUTS = SPARSE_MLA_INPUTS
    OUTPUTS = SPARSE_MLA_OUTPUTS

    def __init__(self, runtime, quant_mode: int, **attributes):
        native = _native_attributes({"quant_mode": quant_mode, **attributes})
        self.attributes: dict[str, Any] = {n: getattr(native, n) for n in SPARSE_MLA_ATTRIBUTES}
        super().__init__(runtime, native, self.KIND == _c.ATTNRT_OP_SPARSE_MLA_METADATA)

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """attn_out of q's shape and dtype; softmax_lse float32 (B,1,S1,N) for BSND q, (1,T1,N)
        for TND q, with return_softmax_lse."""
        q = _arrays.shape_of(self._by_name(inputs).get("q"), "q")
        shapes: dict[str, tuple[tuple[int, ...], Any]] = {"attn_out": (q, None)}
        if self.attributes["return_softmax_lse"]:
            lse: tuple[int, ...]
            if len(q) == 4:
                lse = (q[0], 1, q[1], q[2])
            elif len(q) == 3:
                lse = (1, q[0], q[1])
            else:
                raise InvalidArgumentError(
                    f"q: expected BSND (B,S1,N,512) or TND (T1,N,512), got {q}")
            shapes["softmax_lse"] = (lse, "float32")
        return shapes

    def __call__(self, attn_out=None, softmax_lse=None, **inputs):
        """Runs on inputs given by name (metadata included); returns attn_out, or (attn_out,
        softmax_lse) with return_softmax_lse, allocated in q's framework unless given."""
        outputs = self.allocate_outputs(inputs, {"attn_out": attn_out, "softmax_lse": softmax_lse})
        self.run(inputs, outputs)
        if "softmax_lse" in outputs:
            return outputs["attn_out"], outputs["softmax_lse"]
        return outputs["attn_out"]


class SparseMlaMetadataOp(SparseMlaOp):
    """MixedQuantSparseFlashMlaMetadata: the main op's int32 [2048] work partition for the same
    attributes and inputs (metadata absent). Computed by the core, no plugin kernel."""

    KIND = _c.ATTNRT_OP_SPARSE_MLA_METADATA
    TITLE = "sparse MLA metadata"
    OUTPUTS = SPARSE_MLA_METADATA_OUTPUTS

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """metadata int32 (2048)."""
        return {self.OUTPUTS[0]: ((METADATA_SIZE,), "int32")}

    def __call__(self, metadata=None, **inputs):  # type: ignore[override]  # other outputs
        """Returns the metadata array (int32 (2048)), allocated in q's framework unless given."""
        outputs = self.allocate_outputs(inputs, {self.OUTPUTS[0]: metadata})
        self.run(inputs, outputs)
        return outputs[self.OUTPUTS[0]]


def _sparse_inputs(q, ori_kv, cmp_kv, cmp_sparse_indices, ori_block_table, cmp_block_table,
                   cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv,
                   seqused_cmp_kv, cmp_residual_kv, sinks,
                   ori_sparse_indices=None) -> dict[str, Any]:
    return {"q": q, "ori_kv": ori_kv, "cmp_kv": cmp_kv,
            "ori_sparse_indices": ori_sparse_indices, "cmp_sparse_indices": cmp_sparse_indices,
            "ori_block_table": ori_block_table, "cmp_block_table": cmp_block_table,
            "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_ori_kv": cu_seqlens_ori_kv,
            "cu_seqlens_cmp_kv": cu_seqlens_cmp_kv, "seqused_q": seqused_q,
            "seqused_ori_kv": seqused_ori_kv, "seqused_cmp_kv": seqused_cmp_kv,
            "cmp_residual_kv": cmp_residual_kv, "sinks": sinks}


def sparse_mla_metadata(runtime, q, ori_kv, cmp_kv=None, cmp_sparse_indices=None,
                        ori_block_table=None, cmp_block_table=None, cu_seqlens_q=None,
                        cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None,
                        seqused_ori_kv=None, seqused_cmp_kv=None, cmp_residual_kv=None,
                        sinks=None, *, quant_mode: int, metadata=None, ori_sparse_indices=None,
                        **attributes):
    """MixedQuantSparseFlashMlaMetadata in one call: the int32 (2048) metadata the main op needs
    for these attributes and inputs (see SparseMlaOp). The op is cached on the runtime."""
    op = runtime.cached_op(SparseMlaMetadataOp, quant_mode=quant_mode, **attributes)
    return op(metadata=metadata, **_sparse_inputs(
        q, ori_kv, cmp_kv, cmp_sparse_indices, ori_block_table, cmp_block_table, cu_seqlens_q,
        cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv,
        cmp_residual_kv, sinks, ori_sparse_indices))


def sparse_mla(runtime, q, ori_kv, cmp_kv=None, cmp_sparse_indices=None, ori_block_table=None,
               cmp_block_table=None, cu_seqlens_q=None, cu_seqlens_ori_kv=None,
               cu_seqlens_cmp_kv=None, seqused_q=None, seqused_ori_kv=None, seqused_cmp_kv=None,
               cmp_residual_kv=None, sinks=None, metadata=None, *, quant_mode: int,
               attn_out=None, softmax_lse=None, ori_sparse_indices=None, **attributes):
    """Sparse MLA (CANN MixedQuantSparseFlashMla) in one call, inputs by CANN's names (see
    SparseMlaOp for shapes and dtypes). Without `metadata`, the metadata op runs first with the
    same attributes and inputs. Returns attn_out, or (attn_out, softmax_lse) with
    return_softmax_lse=1, allocated in q's framework unless given. Ops are cached on the runtime
    per attribute set and plans per shape signature.

    Global slot ids (topk_value_mode=3, layout_kv "PA_BBND"; vLLM's addressing): pass
    ori_sparse_indices int32 (T1,1,W) / (B,S1,1,W) with each row's ori keys as slots
    block_id * block_size + offset of ori_kv, and cmp_sparse_indices as slots of cmp_kv; -1 entries
    are skipped, no block tables. PA_BBND caches may be views with a block stride (e.g.
    as_strided over one layer's pages of a shared buffer): they are read in place.

    Raises:
        attnrt.Error subclasses with the library's message (the offending input named).
    """
    inputs = _sparse_inputs(q, ori_kv, cmp_kv, cmp_sparse_indices, ori_block_table,
                            cmp_block_table, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv,
                            seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv, sinks,
                            ori_sparse_indices)
    if metadata is None:
        meta_op = runtime.cached_op(SparseMlaMetadataOp, quant_mode=quant_mode, **attributes)
        metadata = meta_op(**inputs)
    op = runtime.cached_op(SparseMlaOp, quant_mode=quant_mode, **attributes)
    return op(attn_out=attn_out, softmax_lse=softmax_lse, metadata=metadata, **inputs)


def _checked(kv, written, name: str):
    """kv (read) and the array sparse_mla_encode writes, checked as the ops check theirs
    (_arrays.check_torch_tensors): a negative view of kv is read as its values; a written one that
    is a negative view or requires grad is refused."""
    read, out = [kv], [written]
    _arrays.check_torch_tensors(read, ("kv",), "input")
    _arrays.check_torch_tensors(out, (name,), "output")
    return read[0], out[0]


def sparse_mla_encode(quant_mode: int, kv, *, out=None, block=None, slot: int = 0):
    """Quantizes KV rows of 512 values (nope dims 0..447, rope dims 448..511; float32 or bfloat16,
    shape (num_tokens, 512) or (512,)) into the token format of `quant_mode`:

    - 1: 608-byte tokens (rope bf16[64], nope e4m3fn[448], bf16 scales[7] per 64 dims, pad);
      returns uint8 (num_tokens, 608) (or (608,) for one row), or fills `out`.
    - 2: rows into slots [slot, slot + num_tokens) of one PA_BBND block of block_size tokens
      (`block`: any uint8 array of block_size * 584 bytes, e.g. ori_kv[b] of a
      (num_blocks, block_size, 1, 584) pool), written in place and returned.
    - 3: TQ4 258-byte tokens (4-bit codebook indices, fp16 scale; rows already rotated by the
      caller); returns uint8 (num_tokens, 258) or fills `out`.

    Outputs are allocated in kv's framework. Every row is validated before any byte is written.

    Raises:
        InvalidArgumentError: a wrong dtype or shape, non-finite values, rope values beyond bf16,
            a TQ4 scale beyond fp16, a slot range outside the block (the message names it).
    """
    shape = _arrays.shape_of(kv, "kv")
    lists = _c.Tensors(2)
    if quant_mode == 2 and not isinstance(quant_mode, bool):
        if block is None:
            raise InvalidArgumentError("block is required with quant_mode 2 (one PA_BBND block)")
        nbytes = int(np.prod(_arrays.shape_of(block, "block")))
        if nbytes % TOKEN_BYTES[2] != 0:
            raise InvalidArgumentError(
                f"block: expected block_size * {TOKEN_BYTES[2]} bytes (one PA_BBND block), got "
                f"{nbytes} bytes")
        kv, block = _checked(kv, block, "block")
        lists.set(0, "kv", kv, False)
        lists.set(1, "block", block, True)
        try:
            _c.sparse_mla_encode(2, lists, nbytes // TOKEN_BYTES[2], _arrays.integer(slot, "slot"))
        finally:
            lists.clear_all()
        return block
    if quant_mode not in (1, 3) or isinstance(quant_mode, bool):
        raise InvalidArgumentError(f"quant_mode: expected 1, 2 or 3, got {quant_mode!r}")
    if block is not None or slot != 0:
        raise InvalidArgumentError("block and slot are for quant_mode 2 only")
    if out is None:
        out = _arrays.empty(kv, shape[:-1] + (TOKEN_BYTES[quant_mode],), "uint8")
    kv, out = _checked(kv, out, "out")
    lists.set(0, "kv", kv, False)
    lists.set(1, "out", out, True)
    try:
        _c.sparse_mla_encode(quant_mode, lists)
    finally:
        lists.clear_all()
    return out
