"""A float64 numpy oracle for attnrt's sparse MLA op (CANN's MixedQuantSparseFlashMla).

Written from the specification only: CANN's MixedQuantSparseFlashMla operator README and
abi/attnrt/ops/sparse_mla.h. It decodes the raw KV token bytes itself and runs one online softmax
per (query row, head) over the ori window followed by the selected compressed keys (K = V).

topk_value_mode 3 (attnrt's ABI 1.6 definition, PA_BBND only): ori_sparse_indices and
cmp_sparse_indices hold global slot ids block_id * block_size + offset into ori_kv / cmp_kv, no
block tables. Every entry is examined, -1 skipped wherever it stands, anything else outside
[0, num_blocks * block_size) is an error (ValueError naming the entry); a row's keys are its ori
slots then its cmp slots, in index order, duplicates counted; no mask applies.

Rounding points kept from the operator (they are where a faithful kernel differs from exact math):
  * dequantized K/V values are rounded to the KV element dtype (bf16; q's dtype for quant_mode 3),
  * the probabilities P = exp(s - running_max) are rounded to that dtype before the P.V product,
    per tile of `tile` keys, while the running sum uses the unrounded P,
  * the attribute softmax_scale is a C float, so it is rounded to float32 first.
Everything else is float64.
"""
from __future__ import annotations

import math

import numpy as np

HEAD_DIM, NOPE_DIM, ROPE_DIM = 512, 448, 64
MODE1_TOKEN_BYTES, MODE2_TOKEN_BYTES, MODE2_FEATURE_BYTES, TQ4_TOKEN_BYTES = 608, 584, 576, 258
BF16_MAX = 3.3895313892515355e38  # (2 - 2^-7) * 2^127
FP16_MAX = 65504.0

# The 16 TQ4 centroids, ascending; the nibble value is the index. The op multiplies in float32.
TQ4_CODEBOOK = np.array([
    -0.12091285, -0.09111122, -0.07112455, -0.05513602, -0.04132067, -0.02874970, -0.01700489,
    -0.00568677, 0.00547294, 0.01680406, 0.02857605, 0.04108622, 0.05492980, 0.07101817,
    0.09115373, 0.12037795], dtype=np.float32)

DEFAULT_ATTRS = {
    "quant_mode": 0, "rope_head_dim": 64, "softmax_scale": 0.04419417382415922, "cmp_ratio": 1,
    "ori_mask_mode": 0, "cmp_mask_mode": 0, "ori_win_left": -1, "ori_win_right": -1,
    "layout_q": "BSND", "layout_kv": "BSND", "topk_value_mode": 1, "return_softmax_lse": 0,
}
_LAYOUTS = {0: "BSND", 1: "TND", 2: "PA_BBND"}


# ---- scalar formats --------------------------------------------------------------------------

def round_float(x, mant_bits, emin, max_finite):
    """Round float64 values to a binary format with `mant_bits` stored mantissa bits, minimum
    normal exponent `emin` (subnormals below it) and largest finite value `max_finite`, nearest
    even, overflowing to +-inf. Done directly from float64 to avoid a float32 double rounding."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(x)                            # x = f * 2^e, 0.5 <= |f| < 1
        quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - mant_bits)
        y = np.round(x / quantum) * quantum           # np.round ties to even; x / quantum exact
        y = np.where(np.abs(y) > max_finite, np.copysign(np.inf, x), y)
        return np.where(np.isfinite(x), y, x)


def round_bf16(x):
    return round_float(x, 7, -126, BF16_MAX)


def round_fp16(x):
    return round_float(x, 10, -14, FP16_MAX)


def _rounder(dtype):
    return {"bf16": round_bf16, "fp16": round_fp16}[dtype]


def _e4m3fn_table():
    """All 256 OCP fp8 e4m3fn values: bias 7, no infinities, S.1111.111 is NaN."""
    c = np.arange(256)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, (c & 7).astype(np.float64)
    mag = np.where(e == 0, np.ldexp(m / 8.0, -6), np.ldexp(1.0 + m / 8.0, e - 7))
    return np.where((e == 15) & (m == 7), np.nan, sign * mag)


E4M3FN = _e4m3fn_table()


def decode_e4m3fn(codes):
    return E4M3FN[np.asarray(codes, dtype=np.uint8)]


def decode_e8m0(codes):
    """e8m0 byte e = 2^(e - 127); 0xFF is NaN."""
    e = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    return np.where(e == 255, np.nan, np.ldexp(1.0, e - 127))


def decode_bf16(raw):
    """Little-endian bf16 pairs along the last axis -> float64 (bf16 = top half of a float32)."""
    raw = np.asarray(raw, dtype=np.uint8)
    bits = raw[..., 0::2].astype(np.uint32) | (raw[..., 1::2].astype(np.uint32) << 8)
    return (bits << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def decode_fp16(raw):
    return np.ascontiguousarray(raw, dtype=np.uint8).view("<f2").astype(np.float64)


# ---- token decoders (each returns float64 [..., 512]: nope 448 then rope 64) -----------------

def decode_mode1_tokens(tokens):
    """608-byte tokens: rope bf16[64] | nope e4m3fn[448] | bf16 scales[7] | 18 pad bytes.
    nope_d = bf16(e4m3(code_d) * scale[d // 64]) (the kernel multiplies in bf16)."""
    t = np.asarray(tokens, dtype=np.uint8)
    rope = decode_bf16(t[..., 0:128])
    scales = np.repeat(decode_bf16(t[..., 576:590]), 64, axis=-1)
    nope = round_bf16(decode_e4m3fn(t[..., 128:576]) * scales)
    return np.concatenate([nope, rope], axis=-1)


def decode_mode2_blocks(blocks):
    """quant_mode 2 blocks (num_blocks, block_size, 1, 584) -> (num_blocks * block_size, 512).
    A block is block-planar: token `slot` has nope e4m3[448] | rope bf16[64] at slot * 576 and
    e8m0 scales[7] | pad at block_size * 576 + slot * 8."""
    blocks = np.asarray(blocks, dtype=np.uint8)
    nb, bs = blocks.shape[0], blocks.shape[1]
    flat = blocks.reshape(nb, bs * MODE2_TOKEN_BYTES)
    feat = flat[:, :bs * MODE2_FEATURE_BYTES].reshape(nb, bs, MODE2_FEATURE_BYTES)
    meta = flat[:, bs * MODE2_FEATURE_BYTES:].reshape(nb, bs, 8)
    scales = np.repeat(decode_e8m0(meta[..., :7]), 64, axis=-1)
    nope = round_bf16(decode_e4m3fn(feat[..., :NOPE_DIM]) * scales)
    rope = decode_bf16(feat[..., NOPE_DIM:])
    return np.concatenate([nope, rope], axis=-1).reshape(nb * bs, HEAD_DIM)


def decode_tq4_tokens(tokens, kv_dtype="bf16"):
    """258-byte TQ4 tokens: byte t holds dim 2t (low nibble) and 2t+1 (high nibble) as codebook
    indices; bytes 256..257 are the fp16 scale. value = kv_dtype(float32(codebook[n] * scale)).
    No rotation: the caller works in the rotated domain."""
    t = np.asarray(tokens, dtype=np.uint8)
    codes = np.empty(t.shape[:-1] + (HEAD_DIM,), dtype=np.uint8)
    codes[..., 0::2] = t[..., :256] & 0xF
    codes[..., 1::2] = t[..., :256] >> 4
    scale = decode_fp16(t[..., 256:258]).astype(np.float32)      # (..., 1), exact in float32
    return _rounder(kv_dtype)((TQ4_CODEBOOK[codes] * scale).astype(np.float64))


# ---- the operator ----------------------------------------------------------------------------

def _opt(inputs, name):
    value = inputs.get(name)
    return None if value is None else np.asarray(value)


class _KvSide:
    """One KV tensor decoded to a table of 512-value rows, plus how (batch, position) maps to a
    row of that table for its layout."""

    def __init__(self, kv, layout, decode, block_table, cu_seqlens):
        self.layout, self.block_table, self.cu = layout, block_table, cu_seqlens
        if layout == "PA_BBND":
            self.block_size, self.num_blocks = kv.shape[1], kv.shape[0]
            if block_table is None:
                raise ValueError("PA_BBND needs a block table")
        elif layout == "BSND":
            self.capacity = kv.shape[1]
        elif cu_seqlens is None:
            raise ValueError("TND kv needs cu_seqlens")
        self.table = decode(kv)

    def rows(self, b, positions, length):
        """Table rows of logical positions of batch b (all < length, checked against storage)."""
        pos = np.asarray(positions, dtype=np.int64)
        if self.layout == "BSND":
            if length > self.capacity:
                raise ValueError(f"batch {b}: length {length} exceeds the BSND capacity")
            return b * self.capacity + pos
        if self.layout == "TND":
            if self.cu[b] + length > self.table.shape[0]:
                raise ValueError(f"batch {b}: length {length} exceeds the TND rows")
            return int(self.cu[b]) + pos
        used = -(-length // self.block_size)
        if used > self.block_table.shape[1]:
            raise ValueError(f"batch {b}: block table too short for length {length}")
        blocks = self.block_table[b, pos // self.block_size].astype(np.int64)
        if np.any((blocks < 0) | (blocks >= self.num_blocks)):
            raise ValueError(f"batch {b}: block table entry out of range")
        return blocks * self.block_size + pos % self.block_size

    def physical_to_logical(self, b, slot, length):
        """topk_value_mode 2 (attnrt's definition): slot = block_id * block_size + offset maps to
        k * block_size + offset for the first k among the batch's used blocks with
        block_table[b][k] == block_id; None when no used block matches (skipped like an
        out-of-range index)."""
        used = -(-length // self.block_size)
        block, offset = divmod(int(slot), self.block_size)
        hits = np.nonzero(self.block_table[b, :used] == block)[0]
        return None if hits.size == 0 else int(hits[0]) * self.block_size + offset


def _layout(value):
    return _LAYOUTS[value] if isinstance(value, (int, np.integer)) else str(value)


def sparse_mla_reference(inputs, attrs, *, q_dtype="bf16", tile=128, round_p=True,
                         round_output=False):
    """Compute attn_out and softmax_lse of the sparse MLA op in float64.

    inputs: the header's input names in lower case; absent = missing or None. q holds the bf16 /
      fp16 values as floats; ori_kv / cmp_kv are uint8 byte arrays in the header's shapes, except
      quant_mode 3's ori_kv, given as float values (B,S2,1,512) / (T2,1,512) / (nb,bs,1,512).
    attrs: attnrt_sparse_mla_attributes fields; missing ones take the header's defaults.
    q_dtype: 'bf16' or 'fp16' (fp16 only for quant_mode 3); the KV element dtype of quant_mode 3,
      hence the dtype TQ4 values and P are rounded to. Modes 1/2 always use bf16.
    tile: keys per online-softmax step (P is rounded relative to the running max of its step).
    round_p: round P before P.V as the operator does; False gives the exact softmax.
    round_output: round attn_out to q_dtype (the operator's output dtype).
    Returns (attn_out float64 shaped like q, softmax_lse float64 or None): lse is BSND-q
    (B,1,S1,N), TND-q (1,T1,N); natural log with the sink in the sum; -inf (or the sink) for rows without output.
    """
    a = dict(DEFAULT_ATTRS)
    a.update(attrs)
    qm = int(a["quant_mode"])
    if qm not in (1, 2, 3):
        raise ValueError("quant_mode must be 1, 2 or 3")
    layout_q, layout_kv = _layout(a["layout_q"]), _layout(a["layout_kv"])
    if qm == 2 and layout_kv != "PA_BBND":
        raise ValueError("quant_mode 2 needs PA_BBND")
    kv_dtype = q_dtype if qm == 3 else "bf16"
    rnd = _rounder(kv_dtype)
    scale = float(np.float32(a["softmax_scale"]))     # the attribute is a C float
    r = int(a["cmp_ratio"])
    ori_mode, cmp_mode = int(a["ori_mask_mode"]), int(a["cmp_mask_mode"])
    win_l, win_r = int(a["ori_win_left"]), int(a["ori_win_right"])
    topk_mode = int(a["topk_value_mode"])

    q = np.asarray(inputs["q"], dtype=np.float64)
    g = {name: _opt(inputs, name) for name in (
        "ori_sparse_indices", "cmp_kv", "cmp_sparse_indices", "ori_block_table", "cmp_block_table", "cu_seqlens_q",
        "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_ori_kv",
        "seqused_cmp_kv", "cmp_residual_kv", "sinks")}
    has_cmp, indices = g["cmp_kv"] is not None, g["cmp_sparse_indices"]
    if indices is not None and not has_cmp:
        raise ValueError("cmp_sparse_indices without cmp_kv")
    scenario = "SWA" if not has_cmp else ("CSA" if indices is not None else "HCA")
    if topk_mode == 2 and scenario == "CSA" and layout_kv != "PA_BBND":
        raise ValueError("topk_value_mode 2 needs PA_BBND")
    slots = topk_mode == 3
    if (g["ori_sparse_indices"] is not None) != slots:
        raise ValueError("ori_sparse_indices is required with topk_value_mode 3, absent otherwise")
    if slots:
        if layout_kv != "PA_BBND" or scenario == "HCA" or ori_mode != 0 or cmp_mode != 0:
            raise ValueError("topk_value_mode 3 needs PA_BBND, no HCA and mask modes 0")
        for name in ("ori_block_table", "cmp_block_table", "cu_seqlens_ori_kv",
                     "cu_seqlens_cmp_kv", "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv"):
            if g[name] is not None:
                raise ValueError(f"{name} must be absent with topk_value_mode 3")

    if qm == 1:
        dec_ori = dec_cmp = lambda kv: decode_mode1_tokens(kv).reshape(-1, HEAD_DIM)
    elif qm == 2:
        dec_ori = dec_cmp = decode_mode2_blocks
    else:
        dec_ori = lambda kv: np.asarray(kv, dtype=np.float64).reshape(-1, HEAD_DIM)
        dec_cmp = lambda kv: decode_tq4_tokens(kv, kv_dtype).reshape(-1, HEAD_DIM)
    ori_kv = np.asarray(inputs["ori_kv"])
    if slots:
        return _slots_reference(q, ori_kv, g, dec_ori, dec_cmp, layout_q, scale, tile, rnd,
                                round_p, round_output, q_dtype, int(a["return_softmax_lse"]))
    ori = _KvSide(ori_kv, layout_kv, dec_ori, g["ori_block_table"], g["cu_seqlens_ori_kv"])
    cmp = (_KvSide(g["cmp_kv"], layout_kv, dec_cmp, g["cmp_block_table"],
                   g["cu_seqlens_cmp_kv"]) if has_cmp else None)

    n_heads = q.shape[-2]
    cu_q = g["cu_seqlens_q"]
    if layout_q == "TND" and cu_q is None:
        raise ValueError("TND q needs cu_seqlens_q")
    batches = q.shape[0] if layout_q == "BSND" else len(cu_q) - 1
    sinks = None if g["sinks"] is None else g["sinks"].astype(np.float64).reshape(n_heads)
    out = np.zeros_like(q)
    # Rows that see no key: softmax_lse -inf (weight 0 in an LSE merge), or the sink alone.
    lse = np.full((batches, 1, q.shape[1], n_heads) if layout_q == "BSND"
                  else (1, q.shape[0], n_heads), -np.inf)
    if sinks is not None:
        lse[...] = sinks

    for b in range(batches):
        # Lengths: seqused_* override the shape / cu_seqlens lengths.
        cap_q = q.shape[1] if layout_q == "BSND" else int(cu_q[b + 1] - cu_q[b])
        s1 = int(g["seqused_q"][b]) if g["seqused_q"] is not None else cap_q
        if s1 > cap_q:
            raise ValueError(f"batch {b}: seqused_q exceeds the q rows")
        if g["seqused_ori_kv"] is not None:
            s2 = int(g["seqused_ori_kv"][b])
        elif layout_kv == "TND":
            s2 = int(ori.cu[b + 1] - ori.cu[b])
        elif layout_kv == "BSND":
            s2 = ori_kv.shape[1]
        else:
            raise ValueError("PA_BBND needs seqused_ori_kv")
        c_len = lc = 0
        if has_cmp:
            if g["seqused_cmp_kv"] is not None:
                c_len = int(g["seqused_cmp_kv"][b])
            elif layout_kv == "TND" and cmp.cu is not None:
                c_len = int(cmp.cu[b + 1] - cmp.cu[b])
            else:
                c_len = s2 // r                      # not the BSND shape (operator's rule)
            res = 0 if g["cmp_residual_kv"] is None else int(g["cmp_residual_kv"][b])
            lc = c_len * r + res                     # uncompressed length of the cmp mask

        for i in range(s1):
            qrow = (b, i) if layout_q == "BSND" else (int(cu_q[b]) + i,)
            thr = s2 - s1 + i + 1                    # queries aligned to the end of the kv
            if thr <= 0:
                continue                             # no visible key: zero output (lse above)
            lo, hi = 0, s2
            if ori_mode == 3:
                hi = min(thr, s2)
            elif ori_mode == 4:
                lo = 0 if win_l == -1 else max(thr - 1 - win_l, 0)
                hi = s2 if win_r == -1 else min(thr + win_r, s2)
            keys = [ori.table[ori.rows(b, np.arange(lo, hi), s2)]]

            if has_cmp:
                limit = (lc - s1 + i + 1) // r if cmp_mode == 3 else s2 // r
                limit = min(max(limit, 0), c_len)
                if scenario == "HCA":
                    sel = list(range(limit))
                else:
                    row = indices[qrow][0]
                    sel = []
                    # Only the first min(K, limit) slots are examined; -1 ends the row; other
                    # entries outside [0, limit) are skipped; duplicates count again.
                    for x in row[:min(row.shape[0], limit)]:
                        x = int(x)
                        if x == -1:
                            break
                        if topk_mode == 2:
                            x = cmp.physical_to_logical(b, x, c_len) if x >= 0 else None
                            if x is None:
                                continue
                        if 0 <= x < limit:
                            sel.append(x)
                if sel:
                    keys.append(cmp.table[cmp.rows(b, np.array(sel), c_len)])
            kmat = np.concatenate(keys, axis=0)       # ori keys first, then cmp keys
            if kmat.shape[0] == 0:
                continue
            o, row_lse = _attend(q[qrow], kmat, sinks, scale, tile, rnd, round_p)
            out[qrow] = _rounder(q_dtype)(o) if round_output else o
            if layout_q == "BSND":
                lse[b, 0, i] = row_lse
            else:
                lse[0, qrow[0]] = row_lse

    return out, (lse if int(a["return_softmax_lse"]) else None)


def _attend(q_row, kmat, sinks, scale, tile, rnd, round_p):
    """One query row (N, 512) over the keys kmat (keys, 512): online softmax in tiles of `tile`
    keys with the sink; returns (attn_out (N, 512) float64, softmax_lse (N,))."""
    n_heads = q_row.shape[0]
    scores = scale * (q_row @ kmat.T)                 # (N, keys)
    # The sink is a logit with no value: the running max starts at it, the sum at 1.
    m = sinks.copy() if sinks is not None else np.full(n_heads, -np.inf)
    l = np.ones(n_heads) if sinks is not None else np.zeros(n_heads)
    acc = np.zeros((n_heads, HEAD_DIM))
    for t0 in range(0, kmat.shape[0], tile):
        st = scores[:, t0:t0 + tile]
        m_new = np.maximum(m, st.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(st - m_new[:, None])
        l = alpha * l + p.sum(axis=1)                 # the sum uses the unrounded P
        pv = rnd(p) if round_p else p                 # P enters P.V in the KV dtype
        acc = alpha[:, None] * acc + pv @ kmat[t0:t0 + tile]
        m = m_new
    return acc / l[:, None], m + np.log(l)


def _slot_rows(indices, slots, name):
    """The entries of each row of a slot-id tensor, -1 dropped; ValueError for any other entry
    outside [0, slots)."""
    flat = indices.reshape(-1, indices.shape[-1]).astype(np.int64)
    bad = np.argwhere((flat != -1) & ((flat < 0) | (flat >= slots)))
    if bad.size:
        r, k = bad[0]
        raise ValueError(f"{name}[{r}][{k}] = {flat[r, k]} outside [0, {slots})")
    return [row[row != -1] for row in flat]


def _slots_reference(q, ori_kv, g, dec_ori, dec_cmp, layout_q, scale, tile, rnd, round_p,
                     round_output, q_dtype, return_lse):
    """topk_value_mode 3: each query row attends its ori slots then its cmp slots."""
    n_heads = q.shape[-2]
    ori_table = dec_ori(ori_kv)                       # (num_blocks * block_size, 512)
    ori_rows = _slot_rows(g["ori_sparse_indices"], ori_table.shape[0], "ori_sparse_indices")
    cmp_rows = None
    if g["cmp_kv"] is not None:
        cmp_table = dec_cmp(g["cmp_kv"])
        cmp_rows = _slot_rows(g["cmp_sparse_indices"], cmp_table.shape[0], "cmp_sparse_indices")
    cu_q = g["cu_seqlens_q"]
    if layout_q == "TND" and cu_q is None:
        raise ValueError("TND q needs cu_seqlens_q")
    batches = q.shape[0] if layout_q == "BSND" else len(cu_q) - 1
    sinks = None if g["sinks"] is None else g["sinks"].astype(np.float64).reshape(n_heads)
    out = np.zeros_like(q)
    lse = np.full((batches, 1, q.shape[1], n_heads) if layout_q == "BSND"
                  else (1, q.shape[0], n_heads), -np.inf)
    if sinks is not None:
        lse[...] = sinks
    for b in range(batches):
        cap_q = q.shape[1] if layout_q == "BSND" else int(cu_q[b + 1] - cu_q[b])
        s1 = int(g["seqused_q"][b]) if g["seqused_q"] is not None else cap_q
        if s1 > cap_q:
            raise ValueError(f"batch {b}: seqused_q exceeds the q rows")
        for i in range(s1):
            row = b * q.shape[1] + i if layout_q == "BSND" else int(cu_q[b]) + i
            qrow = (b, i) if layout_q == "BSND" else (row,)
            keys = [ori_table[ori_rows[row]]]
            if cmp_rows is not None:
                keys.append(cmp_table[cmp_rows[row]])
            kmat = np.concatenate(keys, axis=0)
            if kmat.shape[0] == 0:
                continue                              # no key: zero output, lse -inf or the sink
            o, row_lse = _attend(q[qrow], kmat, sinks, scale, tile, rnd, round_p)
            out[qrow] = _rounder(q_dtype)(o) if round_output else o
            if layout_q == "BSND":
                lse[b, 0, i] = row_lse
            else:
                lse[0, row] = row_lse
    return out, (lse if return_lse else None)


# ---- self-checks -----------------------------------------------------------------------------

def _bf16_bytes(values):
    """Bytes of values that are exact bf16 (test helper)."""
    v = np.asarray(values, dtype=np.float64)
    assert np.array_equal(round_bf16(v), v)
    bits = (v.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    return bits.view(np.uint8)


def _e4m3_code(value):
    return int(np.nonzero(E4M3FN == value)[0][0])


def _token_values(nope_vals, scales, rope):
    """Exact expected 512-vector for a token built by _mode1/_mode2 below."""
    return np.concatenate([np.asarray(nope_vals) * np.repeat(scales, 64), rope])


def _mode1(nope_vals, scales, rope):
    tok = np.zeros(MODE1_TOKEN_BYTES, dtype=np.uint8)
    tok[0:128] = _bf16_bytes(rope)
    tok[128:576] = [_e4m3_code(v) for v in nope_vals]
    tok[576:590] = _bf16_bytes(scales)
    return tok


def _mode2_block(tokens, block_size):
    """tokens: list of (nope_vals, e8m0 exponents[7], rope) -> one (block_size, 1, 584) block."""
    flat = np.zeros(block_size * MODE2_TOKEN_BYTES, dtype=np.uint8)
    for slot, (nope_vals, exps, rope) in enumerate(tokens):
        f = slot * MODE2_FEATURE_BYTES
        flat[f:f + 448] = [_e4m3_code(v) for v in nope_vals]
        flat[f + 448:f + 576] = _bf16_bytes(rope)
        s = block_size * MODE2_FEATURE_BYTES + slot * 8
        flat[s:s + 7] = np.asarray(exps) + 127
    return flat.reshape(block_size, 1, MODE2_TOKEN_BYTES)


def _const_token(v):
    """A mode-1 token whose 512 values all equal v (v exact in e4m3 and bf16)."""
    return _mode1(np.full(448, v), np.ones(7), np.full(64, v))


def _self_check():
    close = lambda x, y, tol=1e-12: np.testing.assert_allclose(x, y, rtol=tol, atol=tol)
    # Scalar formats.
    assert E4M3FN[0x01] == 2.0 ** -9 and E4M3FN[0x08] == 2.0 ** -6 and E4M3FN[0x38] == 1.0
    assert E4M3FN[0x7E] == 448.0 and E4M3FN[0xFE] == -448.0 and np.isnan(E4M3FN[0x7F])
    assert list(decode_e8m0([127, 128, 0])) == [1.0, 2.0, 2.0 ** -127]
    assert decode_bf16(np.array([0x49, 0x40], np.uint8))[0] == 3.140625
    assert decode_fp16(np.array([0x00, 0x3C], np.uint8))[0] == 1.0
    assert round_bf16(1 + 2 ** -8) == 1.0 and round_bf16(1 + 3 * 2 ** -8) == 1 + 2 ** -6
    assert round_bf16(2.0 ** -133) == 2.0 ** -133 and round_bf16(2.0 ** -135) == 0.0
    assert np.isinf(round_bf16(3.4e38)) and round_bf16(3.3895e38) == BF16_MAX
    assert round_fp16(65519.0) == FP16_MAX and np.isinf(round_fp16(65520.0))

    rng = np.random.default_rng(0)
    nope = E4M3FN[rng.integers(0, 0x7E, 448)] * np.where(rng.random(448) < .5, -1, 1)
    scales, rope = np.array([1, 2, .5, 4, .25, 1.5, 3.0]), round_bf16(rng.normal(size=64))
    tok = _mode1(nope, scales, rope)
    want = _token_values(nope, scales, rope)      # products of 4 and 8 significant bits: exact
    assert np.array_equal(decode_mode1_tokens(tok), want)

    # One key: the output is that key for every head; lse = its score.
    n = 4
    q = round_bf16(rng.normal(size=(1, 1, n, 512)))
    kv = tok.reshape(1, 1, 1, 608)
    o, lse = sparse_mla_reference({"q": q, "ori_kv": kv}, {"quant_mode": 1,
                                                           "return_softmax_lse": 1})
    close(o[0, 0], np.tile(want, (n, 1)))
    close(lse[0, 0, 0], np.float32(DEFAULT_ATTRS["softmax_scale"]) * (q[0, 0] @ want))
    assert lse.shape == (1, 1, 1, n)

    # Two keys, scores 1 and 2 (q = e_0, softmax_scale 1): exact softmax and the bf16-P rule.
    q = np.zeros((1, 1, 1, 512)); q[..., 0] = 1.0
    kv = np.stack([_const_token(1.0), _const_token(2.0)]).reshape(1, 2, 1, 608)
    base = {"quant_mode": 1, "softmax_scale": 1.0, "return_softmax_lse": 1}
    o, lse = sparse_mla_reference({"q": q, "ori_kv": kv}, base, round_p=False)
    w2 = 1 / (1 + math.exp(-1))
    close(o[0, 0, 0], np.full(512, (1 - w2) * 1 + w2 * 2))
    close(lse[0, 0, 0, 0], math.log(math.e + math.e ** 2))
    o, _ = sparse_mla_reference({"q": q, "ori_kv": kv}, base)
    close(o[0, 0, 0], np.full(512, (round_bf16(math.exp(-1)) * 1 + 2) / (1 + math.exp(-1))))
    # Tiling does not change the exact softmax.
    o1, _ = sparse_mla_reference({"q": q, "ori_kv": kv}, base, round_p=False, tile=1)
    close(o1, sparse_mla_reference({"q": q, "ori_kv": kv}, base, round_p=False)[0])

    # Sink equal to the only score: weight 1/2, lse = s + ln 2.
    kv1 = _const_token(2.0).reshape(1, 1, 1, 608)
    o, lse = sparse_mla_reference({"q": q, "ori_kv": kv1, "sinks": np.array([2.0])}, base)
    close(o[0, 0, 0], np.full(512, 1.0)); close(lse[0, 0, 0, 0], 2 + math.log(2))

    # Masks with q = 0 (every score 0): the output is the mean of the visible keys.
    vals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    kv6 = np.stack([_const_token(v) for v in vals]).reshape(1, 6, 1, 608)
    q0 = np.zeros((1, 2, 1, 512))
    run = lambda **at: sparse_mla_reference({"q": q0, "ori_kv": kv6},
                                            {"quant_mode": 1, **at})[0][0, :, 0, 0]
    close(run(ori_mask_mode=4, ori_win_left=2, ori_win_right=0), [4.0, 5.0])  # {2,3,4},{3,4,5}
    close(run(ori_mask_mode=3), [3.0, 3.5])                                     # [0,5), [0,6)
    close(run(ori_mask_mode=0), [3.5, 3.5])
    close(run(ori_mask_mode=4, ori_win_left=0, ori_win_right=1), [5.5, 6.0])   # {4,5}, {5}
    # S1 > S2: rows with thr <= 0 give zero output and lse -inf (the sink with sinks).
    o, lse = sparse_mla_reference({"q": np.zeros((1, 3, 1, 512)), "ori_kv": kv6[:, :1]},
                                  {"quant_mode": 1, "return_softmax_lse": 1})
    close(o[0, :, 0, 0], [0, 0, 1.0]); assert list(lse[0, 0, :, 0]) == [-np.inf, -np.inf, 0.0]
    o, lse = sparse_mla_reference({"q": np.zeros((1, 3, 1, 512)), "ori_kv": kv6[:, :1],
                                   "sinks": np.array([0.5])},
                                  {"quant_mode": 1, "return_softmax_lse": 1})
    close(o[0, :2, 0, 0], [0, 0]); close(lse[0, 0, :2, 0], [0.5, 0.5])

    # TND/TND HCA, two batches, cmp_ratio 2: C and Lc from cu_seqlens_cmp_kv.
    tnd = {"q": np.zeros((2, 1, 512)), "cu_seqlens_q": np.array([0, 1, 2]),
           "ori_kv": np.stack([_const_token(v) for v in (1.0, 2.0, 4.0)]).reshape(3, 1, 608),
           "cmp_kv": np.stack([_const_token(v) for v in (8.0, 16.0)]).reshape(2, 1, 608),
           "cu_seqlens_ori_kv": np.array([0, 2, 3]), "cu_seqlens_cmp_kv": np.array([0, 1, 2])}
    o, _ = sparse_mla_reference(tnd, {"quant_mode": 1, "layout_q": "TND", "layout_kv": "TND",
                                      "cmp_ratio": 2, "cmp_mask_mode": 3})
    close(o[:, 0, 0], [11.0 / 3, 10.0])

    # quant_mode 2, PA_BBND (scrambled blocks), HCA and CSA, topk_value_mode 2, residual.
    bs = 2
    ori_vals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    tok2 = lambda v: (np.full(448, v / 2), [1] * 7, np.full(64, v))   # scale 2^1
    ori_blocks = np.zeros((5, bs, 1, 584), np.uint8)
    ori_bt = np.array([[4, 0, 2, 1]])
    for k, blk in enumerate(ori_bt[0]):
        ori_blocks[blk] = _mode2_block([tok2(ori_vals[2 * k]), tok2(ori_vals[2 * k + 1])], bs)
    assert np.array_equal(decode_mode2_blocks(ori_blocks)[4 * bs + 1], np.full(512, 2.0))
    cmp_blocks = np.zeros((4, 1, 1, 584), np.uint8)
    cmp_bt = np.array([[3, 1]])                          # logical 0 -> block 3, 1 -> block 1
    cmp_blocks[3], cmp_blocks[1] = _mode2_block([tok2(16.0)], 1), _mode2_block([tok2(32.0)], 1)
    pa = {"q": np.zeros((1, 2, 1, 512)), "ori_kv": ori_blocks, "cmp_kv": cmp_blocks,
          "ori_block_table": ori_bt, "cmp_block_table": cmp_bt, "seqused_ori_kv": np.array([8])}
    at = {"quant_mode": 2, "layout_kv": "PA_BBND", "cmp_ratio": 4, "ori_mask_mode": 4,
          "ori_win_left": 1, "ori_win_right": 0, "cmp_mask_mode": 3}
    mean = lambda *v: sum(v) / len(v)
    o, _ = sparse_mla_reference(pa, at)                  # HCA; C = 8 // 4 = 2, Lc = 8
    close(o[0, :, 0, 0], [mean(6, 7, 16), mean(7, 8, 16, 32)])  # limits 7//4 = 1, 8//4 = 2
    o, _ = sparse_mla_reference({**pa, "cmp_residual_kv": np.array([3])}, at)  # Lc = 11
    close(o[0, :, 0, 0], [mean(6, 7, 16, 32), mean(7, 8, 16, 32)])
    o, _ = sparse_mla_reference(pa, {**at, "cmp_mask_mode": 0})   # limit = S2 // r = 2
    close(o[0, :, 0, 0], [mean(6, 7, 16, 32), mean(7, 8, 16, 32)])
    idx = np.array([[[[1, 0]], [[1, 1]]]])             # row 0: limit 1 -> 1 dropped, scan ends
    o, _ = sparse_mla_reference({**pa, "cmp_sparse_indices": idx}, at)
    close(o[0, :, 0, 0], [mean(6, 7), mean(7, 8, 32, 32)])  # duplicates count twice
    idx = np.array([[[[0, -1, 1]], [[-1, 1, 0]]]], np.int32)
    o, _ = sparse_mla_reference({**pa, "cmp_sparse_indices": idx}, at)
    close(o[0, :, 0, 0], [mean(6, 7, 16), mean(7, 8)])      # -1 stops the scan
    # topk_value_mode 2: physical slot 3 = logical 0, slot 1 = logical 1, slot 2 unused.
    idx = np.array([[[[1, 3]], [[2, 1]]]], np.int32)
    o, _ = sparse_mla_reference({**pa, "cmp_sparse_indices": idx}, {**at, "topk_value_mode": 2})
    close(o[0, :, 0, 0], [mean(6, 7), mean(7, 8, 32)])      # row 0: logical 1 >= limit 1
    # topk_value_mode 3: global slots (logical j of ori is slot ori_bt[j // 2] * 2 + j % 2),
    # -1 skipped anywhere, duplicates counted, ori keys then cmp keys, no mask, no block table.
    oslot = lambda j: int(ori_bt[0, j // 2]) * 2 + j % 2
    at_slots = {"quant_mode": 2, "layout_kv": "PA_BBND", "cmp_ratio": 4, "topk_value_mode": 3,
                "return_softmax_lse": 1}
    sl = {"q": np.zeros((1, 3, 1, 512)), "ori_kv": ori_blocks, "cmp_kv": cmp_blocks,
          "ori_sparse_indices": np.array([[[[-1, oslot(5), oslot(6), -1]],
                                           [[oslot(0), oslot(0), -1, oslot(7)]],
                                           [[-1, -1, -1, -1]]]], np.int32),
          "cmp_sparse_indices": np.array([[[[1, -1, 3]], [[-1, -1, -1]], [[-1, -1, -1]]]],
                                         np.int32)}
    o, lse = sparse_mla_reference(sl, at_slots)
    close(o[0, :, 0, 0], [mean(6, 7, 32, 16), mean(1, 1, 8), 0.0])
    assert lse[0, 0, 2, 0] == -np.inf                      # no slot at all: no key
    for bad in (10, -2):                                   # 5 blocks of 2: slots [0, 10)
        wrong = {**sl, "ori_sparse_indices": sl["ori_sparse_indices"].copy()}
        wrong["ori_sparse_indices"][0, 1, 0, 2] = bad
        try:
            sparse_mla_reference(wrong, at_slots)
            raise AssertionError("an out-of-range slot was accepted")
        except ValueError as e:
            assert "ori_sparse_indices[1][2]" in str(e), e

    # quant_mode 3: TQ4 decode and a CSA row, TND q with seqused_q, lse shape (1, T1, N).
    t4 = np.zeros((1, 1, 1, 258), np.uint8)
    t4[..., 0] = 0x8F                                     # dim 0 -> code 15, dim 1 -> code 8
    t4[..., 1:256] = 0x88
    t4[..., 256:258] = np.frombuffer(np.array([2.0], "<f2").tobytes(), np.uint8)
    dec = decode_tq4_tokens(t4[0, 0, 0])
    assert dec[0] == round_bf16(np.float32(0.12037795) * 2) and dec[1] == dec[2]
    assert dec[1] == round_bf16(np.float32(0.00547294) * 2)
    ori3 = np.full((1, 4, 1, 512), 0.5)                   # one block of 4 unquantized tokens
    q3 = np.zeros((3, 2, 512))
    tq = {"q": q3, "ori_kv": ori3, "cmp_kv": t4, "cmp_sparse_indices": np.zeros((3, 1, 4), int),
          "ori_block_table": np.array([[0], [0]]), "cmp_block_table": np.array([[0], [0]]),
          "cu_seqlens_q": np.array([0, 2, 3]), "seqused_q": np.array([1, 1]),
          "seqused_ori_kv": np.array([4, 1]), "seqused_cmp_kv": np.array([1, 0])}
    at3 = {"quant_mode": 3, "layout_q": "TND", "layout_kv": "PA_BBND", "cmp_ratio": 4,
           "ori_mask_mode": 4, "ori_win_left": 0, "ori_win_right": 0, "cmp_mask_mode": 3,
           "return_softmax_lse": 1}
    o, lse = sparse_mla_reference(tq, at3, q_dtype="fp16")
    assert lse.shape == (1, 3, 2)
    dec16 = decode_tq4_tokens(t4[0, 0, 0], "fp16")
    close(o[0, 1], (0.5 + dec16) / 2)                     # batch 0 row 0: thr 4, limit 1
    close(o[1], 0); assert np.all(lse[0, 1] == -np.inf)    # beyond seqused_q: no key
    close(o[2, 0], np.full(512, 0.5))                     # batch 1: no cmp rows (C = 0)
    return True


if __name__ == "__main__":
    _self_check()
    print("sparse_mla_reference self-checks passed")
