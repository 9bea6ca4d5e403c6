"""attnrt._vllm_deepseek_v4_support: each eager stand-in for one of vLLM 0.32's DeepSeek-V4
metadata Triton kernels against a scalar, line-by-line transcription of that kernel (the
reference below reads the kernel's source: one Python loop per program id and lane), on batches
with decodes and prefills, padded tokens, replayed windows, image visibility and decode context
parallelism; the module's import and apply() leaving processes without vLLM alone; and, with
vLLM 0.32.0 importable, apply() and attnrt.vllm.register() installing the fixes."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from attnrt import _vllm_deepseek_v4_support as dsv4  # noqa: E402

PAD = -1
I32_MAX = 0x7FFFFFFF


# ----------------------------------------------------------------------------------------------
# A batch in vLLM's layout: decodes first, then prefills, then zero-length padding requests.
# ----------------------------------------------------------------------------------------------


def make_batch(seed, num_decodes=2, num_prefills=3, num_pad_reqs=1, block_size=16,
               max_query=40, max_prefix=70):
    g = torch.Generator().manual_seed(seed)

    def rand(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    query_lens = [1] * num_decodes + [rand(2, max_query) for _ in range(num_prefills)]
    query_lens += [0] * num_pad_reqs
    seq_lens = [q + (rand(0, max_prefix) if q else 0) for q in query_lens]
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    num_reqs = len(query_lens)
    max_blocks = max(-(-s // block_size) for s in seq_lens) + 1
    perm = torch.randperm(num_reqs * max_blocks, generator=g).view(num_reqs, max_blocks)
    return {
        "query_start_loc": torch.tensor(qsl, dtype=torch.int32),
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32),
        "block_table": perm.to(torch.int32),
        "block_size": block_size,
        "num_decodes": num_decodes,
        "num_prefills": num_prefills,
        "generator": g,
    }


def slot_mapping_of(b, num_tokens, pad_every=0):
    """Each real token's own slot (its position through the block table); tokens past the last
    request, and every pad_every-th token (a replayed token), get PAD."""
    qsl, seq, bt, bs = (b["query_start_loc"].tolist(), b["seq_lens"].tolist(),
                        b["block_table"].tolist(), b["block_size"])
    out = [PAD] * num_tokens
    for r in range(len(seq)):
        for t in range(qsl[r], qsl[r + 1]):
            pos = seq[r] - (qsl[r + 1] - qsl[r]) + t - qsl[r]
            out[t] = bt[r][pos // bs] * bs + pos % bs
            if pad_every and t % pad_every == pad_every - 1:
                out[t] = PAD
    return torch.tensor(out, dtype=torch.int64)


def token_to_req_reference(qsl, num_mapped, num_tokens):
    """_token_request_mapping_kernel with _token_request, one lane at a time."""
    num_reqs = len(qsl) - 1
    out = []
    for token in range(num_tokens):
        lo, hi = 0, num_reqs
        while lo < hi:
            mid = (lo + hi) // 2
            end = qsl[mid + 1] if mid < num_reqs else I32_MAX
            if end <= token:
                lo = mid + 1
            else:
                hi = mid
        req = min(lo, num_reqs - 1)
        out.append(req if token < num_mapped else 0)
    return out


# ----------------------------------------------------------------------------------------------
# compute_token_to_req_indices
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_token_to_req_indices_matches_the_kernel(seed):
    b = make_batch(seed)
    qsl = b["query_start_loc"]
    total = int(qsl[-1])
    # num_mapped past the last query token: the device boundaries can end before the host count
    # (the kernel then clamps to the last request).
    for num_mapped, num_tokens in ((total, total), (total, total + 5), (total + 2, total + 5)):
        out = torch.full((num_tokens + 3,), 77, dtype=torch.int32)
        got = dsv4.token_to_req_indices(qsl, out, num_mapped, num_tokens)
        want = token_to_req_reference(qsl.tolist(), num_mapped, num_tokens)
        assert got.tolist() == want
        assert out[num_tokens:].tolist() == [77] * 3, "wrote past num_tokens"
        assert got.data_ptr() == out.data_ptr()


# ----------------------------------------------------------------------------------------------
# _compute_swa_indices_and_lens_kernel
# ----------------------------------------------------------------------------------------------


def swa_reference(index_width, window_size, left, right, qsl, seq, t2r, valid, bt, bs, replay,
                  num_tokens, token_offset, has_image):
    rows, lens = [], []
    for pid in range(num_tokens):
        token_idx = pid + token_offset
        if not valid[token_idx]:
            lens.append(0)
            rows.append([PAD] * index_width)
            continue
        req = t2r[token_idx]
        query_start, query_end = qsl[req], qsl[req + 1]
        query_len = query_end - query_start
        prefix_len = seq[req] - query_len
        pos = prefix_len + token_idx - query_start
        lv, rv = (left[token_idx], right[token_idx]) if has_image else (0, 0)
        left_add = max(lv - (window_size - 1), 0)
        start_pos = max(pos - (window_size - 1) - left_add, 0)
        start_pos = max(start_pos, replay[req])
        end_pos = pos + rv + 1
        swa_len = end_pos - start_pos
        lens.append(swa_len)
        row = []
        for offset in range(index_width):
            p = start_pos + offset
            if offset < swa_len:
                row.append(bt[req][p // bs] * bs + p % bs)
            else:
                row.append(PAD)
        rows.append(row)
    return rows, lens


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("has_image", [False, True])
def test_swa_indices_and_lens_match_the_kernel(seed, has_image):
    b = make_batch(seed, block_size=8)
    g = b["generator"]
    window = 12
    index_width = window + (6 if has_image else 0)
    qsl, seq = b["query_start_loc"], b["seq_lens"]
    num_actual = int(qsl[-1])
    num_total = num_actual + 3  # padded tokens at the end
    slots = slot_mapping_of(b, num_total)
    valid = slots >= 0
    t2r = torch.tensor(token_to_req_reference(qsl.tolist(), num_actual, num_total), dtype=torch.int32)
    prefix = (seq - (qsl[1:] - qsl[:-1])).clamp(min=0)
    replay = (torch.rand(prefix.shape, generator=g) * (prefix + 1).float()).to(torch.int32)
    replay[0] = 0
    left = torch.randint(0, 20, (num_total,), generator=g, dtype=torch.int32)
    right = torch.randint(0, 4, (num_total,), generator=g, dtype=torch.int32)
    right = torch.minimum(right, torch.full_like(right, index_width - window))
    num_decode_tokens = b["num_decodes"]
    for token_offset, num_tokens in ((0, num_decode_tokens), (num_decode_tokens, num_total - num_decode_tokens)):
        indices = torch.full((num_total + 2, 1, index_width), 99, dtype=torch.int32)
        lens = torch.full((num_total + 2,), 99, dtype=torch.int32)
        dsv4.swa_indices_and_lens(indices, lens, window, index_width, left if has_image else None,
                                  right if has_image else None, qsl, seq, t2r, valid,
                                  b["block_table"], b["block_size"], replay, num_tokens,
                                  token_offset)
        rows, want_lens = swa_reference(index_width, window, left.tolist(), right.tolist(),
                                        qsl.tolist(), seq.tolist(), t2r.tolist(), valid.tolist(),
                                        b["block_table"].tolist(), b["block_size"],
                                        replay.tolist(), num_tokens, token_offset, has_image)
        assert lens[:num_tokens].tolist() == want_lens
        assert indices[:num_tokens, 0].tolist() == rows
        assert (indices[num_tokens:] == 99).all() and (lens[num_tokens:] == 99).all()


def test_swa_indices_through_the_adapter_ignore_visibility_without_images():
    b = make_batch(7, block_size=8)
    qsl, seq = b["query_start_loc"], b["seq_lens"]
    n = int(qsl[-1])
    t2r = torch.tensor(token_to_req_reference(qsl.tolist(), n, n), dtype=torch.int32)
    valid = torch.ones(n, dtype=torch.bool)
    replay = torch.zeros(len(seq), dtype=torch.int32)
    lens_a, lens_b = torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)
    ind_a = torch.zeros(n, 1, 8, dtype=torch.int32)
    ind_b = torch.zeros(n, 1, 8, dtype=torch.int32)
    junk = torch.full((n,), 50, dtype=torch.int32)  # the builder passes swa_lens here
    dsv4._SwaIndicesAndLens()(ind_a, lens_a, 8, 8, junk, junk, qsl, seq, t2r, valid,
                              b["block_table"], b["block_size"], replay, num_tokens=n,
                              token_offset=0)
    dsv4.swa_indices_and_lens(ind_b, lens_b, 8, 8, None, None, qsl, seq, t2r, valid,
                              b["block_table"], b["block_size"], replay, n, 0)
    assert torch.equal(ind_a, ind_b) and torch.equal(lens_a, lens_b)


# ----------------------------------------------------------------------------------------------
# ComputePrefillMetadataKernel
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_prefill_gather_lens_match_the_kernel(seed):
    b = make_batch(seed, num_pad_reqs=0)
    g = b["generator"]
    qsl, seq = b["query_start_loc"], b["seq_lens"]
    prefix = seq - (qsl[1:] - qsl[:-1])
    replay = (torch.rand(prefix.shape, generator=g) * (prefix + 1).float()).to(torch.int32)
    nd, npf, window = b["num_decodes"], b["num_prefills"], 16
    out = torch.full((npf + 2,), 99, dtype=torch.int32)
    dsv4.prefill_gather_lens(out, seq, qsl, replay, npf, nd, window)
    want = []
    for offset in range(npf):
        r = nd + offset
        query_len = int(qsl[r + 1] - qsl[r])
        prefix_len = int(seq[r]) - query_len
        visible = max(prefix_len - int(replay[r]), 0)
        want.append(query_len + min(visible, window - 1))
    assert out[:npf].tolist() == want and out[npf:].tolist() == [99, 99]


# ----------------------------------------------------------------------------------------------
# CompressedSlotMappingKernel
# ----------------------------------------------------------------------------------------------


def compressed_slot_reference(out, slot_mapping, qsl, seq, bt, block_size, ratio, dcp_world,
                              interleave):
    out = list(out)
    for batch_idx in range(len(bt)):
        query_start, query_end = qsl[batch_idx], qsl[batch_idx + 1]
        query_len = query_end - query_start
        start_pos = seq[batch_idx] - query_len
        for offset in range(query_len):
            pos = start_pos + offset
            slot = slot_mapping[query_start + offset]
            is_valid = (pos + 1) % ratio == 0 and slot != PAD
            local_pos = pos // (interleave * dcp_world) * interleave + pos % interleave
            after = local_pos // ratio
            if is_valid:
                out[query_start + offset] = bt[batch_idx][after // block_size] * block_size + after % block_size
            else:
                out[query_start + offset] = PAD
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ratio,dcp_world,interleave", [(4, 1, 1), (128, 1, 1), (4, 2, 8),
                                                        (4, 3, 4)])
def test_compressed_slot_mapping_matches_the_kernel(seed, ratio, dcp_world, interleave):
    b = make_batch(seed, block_size=4, max_query=300 if ratio == 128 else 40,
                   max_prefix=600 if ratio == 128 else 70)
    qsl, seq = b["query_start_loc"], b["seq_lens"]
    num_total = int(qsl[-1]) + 4
    slots = slot_mapping_of(b, num_total, pad_every=7)
    # Compressed block table: enough blocks for every request's compressed positions.
    need = max(int(s) // ratio // b["block_size"] + 2 for s in seq)
    bt = torch.randperm(len(seq) * need, generator=b["generator"]).view(len(seq), need).to(torch.int32)
    out = torch.full((num_total,), -7, dtype=torch.int64)
    dsv4.compressed_slot_mapping(out, slots, qsl, seq, bt, b["block_size"], ratio, dcp_world,
                                 interleave)
    want = compressed_slot_reference([-7] * num_total, slots.tolist(), qsl.tolist(), seq.tolist(),
                                     bt.tolist(), b["block_size"], ratio, dcp_world, interleave)
    assert out.tolist() == want
    assert out[-4:].tolist() == [-7] * 4, "tokens past the last request must stay untouched"


# ----------------------------------------------------------------------------------------------
# BuildPrefillChunkMetadataKernel
# ----------------------------------------------------------------------------------------------


def chunk_reference(qsl, useq, cu, row_start_cu, n_t2s, n_out, qs_start, qs_stop, rank, world,
                    interleave, num_reqs, ratio):
    t2s, ks, ke = [None] * n_t2s, [None] * n_out, [None] * n_out
    for batch_idx in range(num_reqs):
        query_start, query_end = qsl[batch_idx], qsl[batch_idx + 1]
        query_len = query_end - query_start
        seq_start, seq_end = cu[batch_idx], cu[batch_idx + 1]
        row_start = row_start_cu[batch_idx]
        start_pos = useq[batch_idx] - query_len
        for offset in range(query_len):
            abs_pos = query_start + offset
            if not (qs_start <= abs_pos < qs_stop):
                continue
            out_pos = abs_pos - qs_start
            ks[out_pos] = row_start
            length = (start_pos + 1 + offset) // ratio
            if world > 1:
                base = (length // interleave // world) * interleave
                remainder = length - base * world
                remainder = min(max(remainder - rank * interleave, 0), interleave)
                length = base + remainder
            ke[out_pos] = row_start + length
        for offset in range(seq_end - seq_start):
            t2s[seq_start + offset] = batch_idx
    return t2s, ks, ke


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ratio", [4, 128])
@pytest.mark.parametrize("rank,world,interleave", [(0, 1, 1), (1, 2, 2), (2, 3, 1)])
@pytest.mark.parametrize("sliced", [False, True])
def test_prefill_chunk_metadata_matches_the_kernel(seed, ratio, rank, world, interleave, sliced):
    b = make_batch(seed, num_decodes=0, num_prefills=3, num_pad_reqs=0,
                   max_query=300 if ratio == 128 else 40, max_prefix=600 if ratio == 128 else 70)
    qsl, useq = b["query_start_loc"], b["seq_lens"]
    num_reqs = len(useq)
    comp = useq // ratio
    cu = torch.zeros(num_reqs + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(comp, 0)
    if world > 1:  # this rank's share of each request's compressed length, as the caller does
        share = torch.tensor([sum(1 for i in range(int(c)) if (i // interleave) % world == rank)
                              for c in comp], dtype=torch.int32)
        row_start = torch.zeros(num_reqs + 1, dtype=torch.int32)
        row_start[1:] = torch.cumsum(share, 0)
    else:
        row_start = cu
    total = int(qsl[-1])
    qs_start, qs_stop = (5, total - 3) if sliced else (0, total)
    n_out = qs_stop - qs_start
    t2s = torch.full((int(cu[-1]) + 2,), -9, dtype=torch.int32)
    ks = torch.full((n_out,), -9, dtype=torch.int32)
    ke = torch.full((n_out,), -9, dtype=torch.int32)
    dsv4.prefill_chunk_metadata(qsl, useq, cu, row_start, t2s, ks, ke, qs_start, qs_stop, rank,
                                world, interleave, num_reqs, ratio)
    want_t2s, want_ks, want_ke = chunk_reference(qsl.tolist(), useq.tolist(), cu.tolist(),
                                                 row_start.tolist(), int(cu[-1]) + 2, n_out,
                                                 qs_start, qs_stop, rank, world, interleave,
                                                 num_reqs, ratio)
    assert ks.tolist() == want_ks and ke.tolist() == want_ke
    assert t2s.tolist() == [-9 if w is None else w for w in want_t2s]


def test_per_rank_lengths_match_vllms_helper_rule():
    """The DCP branch localizes a length the way the kernel's comment says get_dcp_local_seq_lens
    does: the positions i < length with (i // interleave) % world == rank."""
    for length in range(0, 40):
        for world, interleave in ((2, 1), (2, 4), (3, 2)):
            for rank in range(world):
                t2s = torch.zeros(1, dtype=torch.int32)
                ks = torch.zeros(1, dtype=torch.int32)
                ke = torch.zeros(1, dtype=torch.int32)
                qsl = torch.tensor([0, 1], dtype=torch.int32)
                useq = torch.tensor([length], dtype=torch.int32)
                zero = torch.zeros(2, dtype=torch.int32)
                dsv4.prefill_chunk_metadata(qsl, useq, zero, zero, t2s, ks, ke, 0, 1, rank, world,
                                            interleave, 1, 1)
                want = sum(1 for i in range(length) if (i // interleave) % world == rank)
                assert int(ke[0]) == want, (length, world, interleave, rank)


# ----------------------------------------------------------------------------------------------
# apply(): processes without vLLM are left alone; with vLLM 0.32.0 on CPU the fixes go in.
# ----------------------------------------------------------------------------------------------


def run_python(code, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)


def test_import_and_apply_without_vllm_loaded_do_nothing():
    code = ("import sys, attnrt; before = set(sys.modules); "
            "from attnrt import _vllm_deepseek_v4_support as s; "
            "assert s.apply() == [] and s.applied() == []; "
            "new = set(sys.modules) - before; "
            "assert 'vllm' not in sys.modules and 'torch' not in new, sorted(new); print('ok')")
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr


HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")

EXPECTED_FIXES = {
    "vllm.v1.attention.ops.metadata.compute_token_to_req_indices",
    "vllm.v1.attention.backends.mla.sparse_swa.compute_token_to_req_indices",
    "vllm.v1.attention.backends.mla.sparse_swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL",
    "vllm.v1.attention.backends.mla.sparse_swa._COMPUTE_PREFILL_METADATA_KERNEL",
    "vllm.v1.attention.backends.mla.compressor_utils._COMPRESSED_SLOT_MAPPING_KERNEL",
    "vllm.v1.attention.backends.mla.indexer._BUILD_PREFILL_CHUNK_METADATA_KERNEL",
    "vllm.models.deepseek_v4.cpu.cpu_mla.DeepseekV4CPUSparseSWAMetadataBuilder.build_tile_scheduler",
}


@needs_vllm
def test_register_applies_the_fixes_on_vllm_0_32_cpu_without_triton():
    code = r"""
import json, os
os.environ.pop("ATTNRT_VLLM", None)
import vllm
from vllm.platforms import current_platform
from vllm.triton_utils import HAS_TRITON
import attnrt.vllm
from attnrt import _vllm_deepseek_v4_support as s
attnrt.vllm.register()
first = s.applied()
again = s.apply()
from vllm.models.deepseek_v4.cpu.cpu_mla import DeepseekV4CPUSparseSWAMetadataBuilder as B
keys = sorted(B.build_tile_scheduler(None, 0))
print(json.dumps({"version": vllm.__version__, "cpu": current_platform.is_cpu(),
                  "triton": HAS_TRITON, "first": first, "again": again, "keys": keys}))
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    got = json.loads(r.stdout.strip().splitlines()[-1])
    if got["version"] != dsv4.VLLM_VERSION or not got["cpu"] or got["triton"]:
        assert got["first"] == [], got
        pytest.skip(f"vLLM {got['version']} (cpu {got['cpu']}, Triton {got['triton']}): no fixes apply")
    assert set(got["first"]) == EXPECTED_FIXES, got["first"]
    assert got["again"] == [], "apply() must be idempotent"
    assert got["keys"] == ["c128a", "c1a", "c2a", "c4a", "swaonly"]


@needs_vllm
def test_chunked_prefill_variable_is_checked():
    code = ("import vllm; print(vllm.__version__, flush=True); "
            "from attnrt import _vllm_deepseek_v4_support as s; s.apply()")
    r = run_python(code, ATTNRT_VLLM_DSV4_CHUNKED_PREFILL="yes")
    version = r.stdout.strip().splitlines()[0] if r.stdout.strip() else "?"
    if version != dsv4.VLLM_VERSION:
        pytest.skip(f"vLLM {version}: no fixes apply")
    assert r.returncode != 0
    assert "ATTNRT_VLLM_DSV4_CHUNKED_PREFILL='yes'" in r.stderr and "expected 1" in r.stderr
