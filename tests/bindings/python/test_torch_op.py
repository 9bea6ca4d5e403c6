"""The C++ torch operator (libattnrt_torch.so, bindings/torch/):
torch.ops.attnrt.paged_attention_varlen and attnrt.paged_attention_varlen through it give what the Python path gives (bitwise, same kernel)
and what a float64 reference written from the definition gives; caches and out are written in
place, cache views of every layout are read without copies; the runtime's errors come back with
its message (the status name first; attnrt.Error subclasses from the function), and the runtime
a call names (or attnrt.torch.set_runtime's) is the one it runs on. A runtime on torch's
intra-op threads (torch.ops.attnrt._torch_threads_runtime, what the vLLM backend runs on) gives
bitwise what an attnrt.Runtime with as many threads of its own gives.

Skipped when the library was not built (no torch at configure), unless ATTNRT_REQUIRE_TORCH_OPS=1
(scripts/test.sh builds it and sets it)."""
from __future__ import annotations

import math
import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from attnrt import _torch_lib, _varlen  # noqa: E402

if not _torch_lib.load():
    if os.environ.get("ATTNRT_REQUIRE_TORCH_OPS") == "1":
        raise RuntimeError(f"ATTNRT_REQUIRE_TORCH_OPS=1 but {_torch_lib.LIBRARY} is not loaded")
    pytest.skip("libattnrt_torch.so is not built", allow_module_level=True)
import attnrt.torch  # noqa: E402,F401

N, NKV, H, BS = 8, 2, 64, 16
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
SEQUENCES = [(1, 50), (7, 7), (1, 130), (5, 21), (0, 9)]  # (q_len, seq_len)


def reference(q, keys, values, past, window, softcap, sink, scale):
    """float64 attention of q [q_len, N, H] over keys/values [T, Nkv, H]; row i at position
    past + i sees keys (position - window, position] (window -1: every earlier key)."""
    k = keys.double().repeat_interleave(N // NKV, dim=1)
    v = values.double().repeat_interleave(N // NKV, dim=1)
    scores = torch.einsum("qnh,tnh->nqt", q.double(), k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    pos = past + torch.arange(q.shape[0]).reshape(-1, 1)
    j = torch.arange(keys.shape[0]).reshape(1, -1)
    visible = (j <= pos) & ((j > pos - window) if window > 0 else True)
    scores = scores.masked_fill(~visible, float("-inf"))
    if sink is not None:
        sinks = sink.double().reshape(N, 1, 1).expand(N, q.shape[0], 1)
        p = torch.softmax(torch.cat([scores, sinks], -1), -1)[..., :-1]
    else:
        p = torch.softmax(scores, -1)
    return torch.einsum("nqt,tnh->qnh", p, v)


def make_cache(layout, num_blocks, dtype, g):
    """(owner tensor, k view, v view, kv_layout) of one cache tensor in an engine's layout."""
    if layout == "vllm_cpu":  # [blocks, Nkv, block_size, 2H]: K then V columns per row
        kv = torch.randn(num_blocks, NKV, BS, 2 * H, generator=g).to(dtype)
        return kv, kv[..., :H], kv[..., H:], "BNSH"
    if layout == "vllm_cpu_slab":  # [blocks, Nkv, 2 * block_size, H]: K rows then V rows
        kv = torch.randn(num_blocks, NKV, 2, BS, H, generator=g).to(dtype)
        return kv, kv[:, :, 0], kv[:, :, 1], "BNSH"
    if layout == "flash_attention":  # [2, blocks, block_size, Nkv, H]
        kv = torch.randn(2, num_blocks, BS, NKV, H, generator=g).to(dtype)
        return kv, kv[0], kv[1], "BSNH"
    kv = torch.randn(num_blocks, 2, NKV, BS, H, generator=g).to(dtype)  # flashinfer_hnd
    return kv, kv[:, 0], kv[:, 1], "BNSH"


class Batch:
    """A mixed batch (decodes, a first prompt, prefill chunks, a sequence without new rows) with
    its new K/V rows, slot mapping and a permuted block table; two padding rows at the end."""

    def __init__(self, layout, dtype, g):
        self.q_lens = [s[0] for s in SEQUENCES]
        self.seq_lens = torch.tensor([s[1] for s in SEQUENCES], dtype=torch.int32)
        cu = [0]
        for q_len in self.q_lens:
            cu.append(cu[-1] + q_len)
        self.cu = torch.tensor(cu, dtype=torch.int32)
        self.num_tokens = cu[-1] + 2
        slots = max((t + BS - 1) // BS for t in self.seq_lens.tolist())
        num_blocks = len(SEQUENCES) * slots + 3
        self.kv, self.k_cache, self.v_cache, self.kv_layout = make_cache(layout, num_blocks,
                                                                          dtype, g)
        self.table = torch.randperm(num_blocks, generator=g)[:len(SEQUENCES) * slots]
        self.table = self.table.to(torch.int32).reshape(len(SEQUENCES), slots)
        self.q = (2 * torch.randn(self.num_tokens, N, H, generator=g)).to(dtype)
        self.k = torch.randn(self.num_tokens, NKV, H, generator=g).to(dtype)
        self.v = torch.randn(self.num_tokens, NKV, H, generator=g).to(dtype)
        self.slot_mapping = torch.full((self.num_tokens,), -1, dtype=torch.int64)
        for b, (q_len, t) in enumerate(SEQUENCES):
            for i in range(q_len):
                pos = t - q_len + i
                self.slot_mapping[cu[b] + i] = int(self.table[b, pos // BS]) * BS + pos % BS
        self.sinks = torch.randn(N, generator=g).to(dtype)

    def rows(self, cache, b, length):
        out = []
        for j in range(length):
            block, o = int(self.table[b, j // BS]), j % BS
            out.append(cache[block, :, o] if self.kv_layout == "BNSH" else cache[block, o])
        return torch.stack(out)


@pytest.mark.parametrize("layout", ["vllm_cpu", "vllm_cpu_slab", "flash_attention",
                                    "flashinfer_hnd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("features", ["plain", "window_softcap_sinks"])
def test_same_as_python_path_and_reference(layout, dtype, features):
    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    g = torch.Generator().manual_seed(SEED)
    batch = Batch(layout, dtype, g)
    window, softcap, sinks = (24, 30.0, batch.sinks) if features != "plain" else (-1, 0.0, None)
    kw = dict(k=batch.k, v=batch.v, slot_mapping=batch.slot_mapping, sinks=sinks,
              window_size=(window - 1, 0) if window > 0 else (-1, -1), softcap=softcap,
              kv_layout=batch.kv_layout)
    kv_before = batch.kv.clone()
    out_py = torch.full((batch.num_tokens, N, H), 7.0, dtype=dtype)
    with attnrt.Runtime(num_threads=2) as rt:
        _varlen.paged_attention_varlen_python(rt, batch.q, batch.k_cache, batch.v_cache, batch.cu,
                                              batch.seq_lens, batch.table, out=out_py, **kw)
        kv_py = batch.kv.clone()
        batch.kv.copy_(kv_before)
        out_cpp = torch.full_like(out_py, 7.0)
        result = attnrt.paged_attention_varlen(rt, batch.q, batch.k_cache, batch.v_cache,
                                               batch.cu, batch.seq_lens, batch.table, out=out_cpp,
                                               **kw)
        stats = torch.ops.attnrt._runtime_stats(_torch_lib.runtime_id(rt))
    assert stats == [1, 0, 1], "the call did not go through the C++ operator"
    assert result is out_cpp
    assert torch.equal(out_cpp, out_py), "the C++ operator differs from the Python path"
    assert torch.equal(batch.kv, kv_py), "the caches differ from the Python path's"
    assert not torch.equal(batch.kv, kv_before)
    assert torch.all(out_cpp[int(batch.cu[-1]):] == 7.0), "padding rows were written"

    tol = 2e-5 if dtype == torch.float32 else 3e-2
    scale = 1 / math.sqrt(H)
    cu = batch.cu.tolist()
    for b, (q_len, t) in enumerate(SEQUENCES):
        if q_len == 0:
            continue
        keys, values = batch.rows(batch.k_cache, b, t), batch.rows(batch.v_cache, b, t)
        # The new rows are where slot_mapping says.
        assert torch.equal(keys[t - q_len:], batch.k[cu[b]:cu[b] + q_len])
        assert torch.equal(values[t - q_len:], batch.v[cu[b]:cu[b] + q_len])
        want = reference(batch.q[cu[b]:cu[b] + q_len], keys, values, t - q_len, window, softcap,
                         sinks, scale)
        err = (out_cpp[cu[b]:cu[b] + q_len].double() - want).abs().max().item()
        assert err <= tol, f"sequence {b}: max |error| {err} > {tol}"


def test_torch_op_writes_in_place_also_compiled():
    """torch.ops.attnrt.paged_attention_varlen (the C++ operator) on the runtime set_runtime gives,
    eagerly and under torch.compile(fullgraph), the function's result in out and the caches."""
    assert "_paged_attention_varlen_on" in dir(torch.ops.attnrt)
    g = torch.Generator().manual_seed(SEED)
    batch = Batch("vllm_cpu", torch.float32, g)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.cu, batch.seq_lens, batch.table)
    kw = dict(k=batch.k, v=batch.v, slot_mapping=batch.slot_mapping, kv_layout="BNSH")
    kv_before = batch.kv.clone()
    with attnrt.Runtime(num_threads=1) as rt:
        expected = _varlen.paged_attention_varlen_python(rt, *args, **kw)
    kv_expected = batch.kv.clone()

    previous = attnrt.torch.runtime()
    with attnrt.Runtime(num_threads=1) as rt:
        attnrt.torch.set_runtime(rt)
        try:
            rid = _torch_lib.runtime_id(rt)
            batch.kv.copy_(kv_before)
            out = torch.zeros_like(batch.q)
            ptr = out.data_ptr()
            torch.ops.attnrt.paged_attention_varlen(*args, out, **kw)
            assert out.data_ptr() == ptr and torch.equal(out[:-2], expected[:-2])
            assert torch.equal(batch.kv, kv_expected)

            @torch.compile(fullgraph=True, backend="eager")
            def step(q, kc, vc, out):
                torch.ops.attnrt.paged_attention_varlen(q, kc, vc, batch.cu, batch.seq_lens,
                                                        batch.table, out, **kw)
                return out * 1

            batch.kv.copy_(kv_before)
            out2 = torch.zeros_like(batch.q)
            got = step(batch.q, batch.k_cache, batch.v_cache, out2)
            assert torch.equal(got[:-2], expected[:-2]) and torch.equal(out2[:-2], expected[:-2])
            assert torch.equal(batch.kv, kv_expected), "compiled: the caches were not written"
            ops, hits, misses = torch.ops.attnrt._runtime_stats(rid)
            assert (ops, hits, misses) == (1, 1, 1), "one op, one plan, reused"
        finally:
            attnrt.torch.set_runtime(previous)


def test_errors_carry_the_runtime_message_and_nothing_is_written():
    g = torch.Generator().manual_seed(SEED)
    kv = torch.randn(6, NKV, BS, 2 * H, generator=g)
    k_cache, v_cache = kv[..., :H], kv[..., H:]
    q = torch.randn(2, N, H, generator=g)
    k = torch.randn(2, NKV, H, generator=g)
    cu = torch.tensor([0, 2], dtype=torch.int32)
    lens = torch.tensor([20], dtype=torch.int32)
    table = torch.tensor([[3, 4]], dtype=torch.int32)
    bad_slots = torch.tensor([4 * BS + 2, 5], dtype=torch.int64)
    out = torch.full_like(q, 7.0)
    before = kv.clone()
    message = r"slot_mapping\[1\] = 5 but"
    # The torch operator: ValueError with the status name and the runtime's message.
    with pytest.raises(ValueError, match=r"^ATTNRT_ERROR_INVALID_ARGUMENT: .*" + message):
        torch.ops.attnrt.paged_attention_varlen(q, k_cache, v_cache, cu, lens, table, out, k=k,
                                                v=k, slot_mapping=bad_slots, kv_layout="BNSH")
    with attnrt.Runtime(num_threads=1) as rt:
        # The function: the attnrt.Error subclass of the status, as the Python path raises.
        with pytest.raises(attnrt.InvalidArgumentError, match=message) as e:
            attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, lens, table, k=k, v=k,
                                          slot_mapping=bad_slots, out=out, kv_layout="BNSH")
        assert not e.value.message.startswith("ATTNRT_")
        with pytest.raises(attnrt.InvalidArgumentError,
                           match=r"seq_lens\[0\] = 1 must be at least 2"):
            attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu,
                                          torch.tensor([1], dtype=torch.int32), table, k=k, v=k,
                                          out=out, kv_layout="BNSH")
        # Query rows must be compact (the C ABI takes strided views for the block pools only).
        strided_q = torch.randn(2, 2 * N, H, generator=g)[:, ::2]
        with pytest.raises(attnrt.InvalidArgumentError, match="query: only compact row-major"):
            attnrt.paged_attention_varlen(rt, strided_q, k_cache, v_cache, cu, lens, table,
                                          out=out, kv_layout="BNSH")
        # The operator's own checks (before the runtime sees the call) read the same way.
        with pytest.raises(attnrt.InvalidArgumentError, match=r"k_cache: expected 4 dimensions"):
            attnrt.paged_attention_varlen(rt, q, k_cache[0], v_cache, cu, lens, table, out=out)
    with pytest.raises(ValueError, match=r"^ATTNRT_ERROR_INVALID_ARGUMENT: kv_layout: expected "
                                         r"one of BSNH, BNSH, got 'NHSB'"):
        torch.ops.attnrt.paged_attention_varlen(q, k_cache, v_cache, cu, lens, table, out,
                                                kv_layout="NHSB")
    with pytest.raises(ValueError, match=r"cu_seqlens_q: dtype Double is not one attnrt takes"):
        torch.ops.attnrt.paged_attention_varlen(q, k_cache, v_cache, cu.double(), lens, table, out,
                                                kv_layout="BNSH")
    assert torch.equal(kv, before) and torch.all(out == 7.0)


def test_runtime_of_the_call_is_used_and_a_closed_one_is_refused():
    g = torch.Generator().manual_seed(SEED)
    batch = Batch("flash_attention", torch.float32, g)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.cu, batch.seq_lens, batch.table)
    # A runtime that pins no paged varlen kernel: no kernel accepts, the plan fails with each
    # kernel's reason.
    with attnrt.Runtime(kernel="cpu_x86.gqa.*") as rt:
        with pytest.raises(attnrt.UnsupportedError, match="not-pinned|pins|pinned"):
            attnrt.paged_attention_varlen(rt, *args, kv_layout="BSNH")
        previous = attnrt.torch.runtime()
        attnrt.torch.set_runtime(rt)
        try:
            with pytest.raises(RuntimeError, match="^ATTNRT_ERROR_UNSUPPORTED: "):
                torch.ops.attnrt.paged_attention_varlen(*args, torch.empty_like(batch.q))
        finally:
            attnrt.torch.set_runtime(previous)
    # The same call on a runtime with that kernel runs; a closed runtime is refused by name.
    rt = attnrt.Runtime(kernel="cpu_x86.paged_gqa_varlen.naive.scalar", num_threads=1)
    out = attnrt.paged_attention_varlen(rt, *args, kv_layout="BSNH")
    expected = _varlen.paged_attention_varlen_python(rt, *args, kv_layout="BSNH")
    assert torch.equal(out[:-2], expected[:-2])  # the two padding rows are not written
    rid = _torch_lib.runtime_id(rt)
    rt.close()
    with pytest.raises(attnrt.InvalidArgumentError, match="runtime is closed"):
        attnrt.paged_attention_varlen(rt, *args, kv_layout="BSNH")
    with pytest.raises(ValueError, match="runtime is closed"):
        torch.ops.attnrt._paged_attention_varlen_on(rid, *args, torch.empty_like(batch.q))


def test_register_runtime_refuses_an_address_that_is_no_live_runtime():
    """_register_runtime takes a runtime's address from the Python package; any other integer (a
    closed runtime's, a made-up one) is refused by libattnrt, which keeps the set of live runtimes,
    instead of being read at the first call."""
    with pytest.raises(ValueError, match="runtime: not a live attnrt_runtime"):
        torch.ops.attnrt._register_runtime(12345)
    buffer = torch.zeros(64, dtype=torch.int64)  # live memory that is no runtime
    with pytest.raises(ValueError, match="runtime: not a live attnrt_runtime"):
        torch.ops.attnrt._register_runtime(buffer.data_ptr())
    rt = attnrt.Runtime(num_threads=1)
    handle = int(rt._h().this)
    rid = torch.ops.attnrt._register_runtime(handle)  # live: taken
    assert rid > 0
    _torch_lib.release_runtime(rid)
    rt.close()
    with pytest.raises(ValueError, match="runtime: not a live attnrt_runtime"):
        torch.ops.attnrt._register_runtime(handle)


@pytest.mark.parametrize("team, torch_threads", [(1, 1), (2, 2), (2, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("features", ["plain", "window_softcap_sinks"])
def test_torch_threads_runtime_is_bitwise_the_own_pool(team, torch_threads, dtype, features):
    """A mixed batch (prefill chunks, a first prompt, decodes) on a runtime whose parallel work
    runs in at::parallel_for gives the output and caches of an attnrt.Runtime with `team` threads
    of its own; also when torch has fewer threads than the team (members one after another).
    "plain" runs the flash kernels, whose workspace is per thread; softcap the naive ones."""
    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    g = torch.Generator().manual_seed(SEED)
    batch = Batch("vllm_cpu_slab", dtype, g)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.cu, batch.seq_lens, batch.table)
    window_left, softcap, sinks = (23, 30.0, batch.sinks) if features != "plain" else (-1, 0.0,
                                                                                      None)
    kv_before = batch.kv.clone()
    out_own = torch.full((batch.num_tokens, N, H), 7.0, dtype=dtype)
    with attnrt.Runtime(num_threads=team) as rt:
        attnrt.paged_attention_varlen(rt, *args, out=out_own, k=batch.k, v=batch.v,
                                      slot_mapping=batch.slot_mapping, sinks=sinks,
                                      window_size=(window_left, 0 if window_left >= 0 else -1),
                                      softcap=softcap, kv_layout="BNSH")
    kv_own = batch.kv.clone()
    batch.kv.copy_(kv_before)

    previous = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        # 0: torch.get_num_threads(), the team when torch has as many threads.
        rid = _torch_lib.torch_threads_runtime(0 if team == torch_threads else team)
        out = torch.full_like(out_own, 7.0)
        torch.ops.attnrt._paged_attention_varlen_on(
            rid, *args, out, batch.k, batch.v, batch.slot_mapping, sinks, 0.0, window_left,
            softcap, "BNSH")
        stats = torch.ops.attnrt._runtime_stats(rid)
    finally:
        torch.set_num_threads(previous)
    assert stats == [1, 0, 1], "the call did not run on the torch-threads runtime"
    assert torch.equal(out, out_own), "the torch-threads runtime differs from the own pool"
    assert torch.equal(batch.kv, kv_own), "the caches differ from the own pool's"
    assert torch.all(out[int(batch.cu[-1]):] == 7.0), "padding rows were written"
    # Released: destroyed, and calls naming it are refused by name.
    _torch_lib.release_runtime(rid)
    with pytest.raises(ValueError, match="runtime is closed"):
        torch.ops.attnrt._paged_attention_varlen_on(rid, *args, torch.empty_like(batch.q))


def test_torch_threads_runtime_refuses_a_negative_team():
    with pytest.raises(ValueError, match="num_threads: expected 0 .* got -1"):
        torch.ops.attnrt._torch_threads_runtime(-1)
    with pytest.raises(ValueError, match="options.num_threads: expected 0 .*1024, got 1025"):
        torch.ops.attnrt._torch_threads_runtime(1025)
    # Past int32: the value asked for, not what a cast would make of it.
    for team in (2**31, 2**40):
        with pytest.raises(ValueError, match=f"num_threads: expected 0 .* got {team}$"):
            torch.ops.attnrt._torch_threads_runtime(team)


def test_torch_threads_runtimes_from_several_threads_while_others_are_released():
    """Three Python threads call the C++ operator on a torch-threads runtime (team 2, torch on 2
    threads) while a fourth remakes it with another team and releases the previous one, as the
    vLLM backend does when torch's thread count changes: every call either gives the own pool's
    output bitwise or is refused as "runtime is closed"; nothing else fails or crashes."""
    import threading
    import time

    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    batches = [Batch("vllm_cpu_slab", torch.float32, torch.Generator().manual_seed(SEED + i))
               for i in range(3)]
    expected = []
    with attnrt.Runtime(num_threads=2) as rt:
        for batch in batches:
            out = torch.full((batch.num_tokens, N, H), 7.0)
            attnrt.paged_attention_varlen(rt, batch.q, batch.k_cache, batch.v_cache, batch.cu,
                                          batch.seq_lens, batch.table, out=out, kv_layout="BNSH")
            expected.append(out)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    current = [_torch_lib.torch_threads_runtime(2)]
    stop = threading.Event()
    results = {"equal": 0, "closed": 0, "other": []}
    lock = threading.Lock()

    def caller(i):
        batch = batches[i]
        while not stop.is_set():
            out = torch.full((batch.num_tokens, N, H), 7.0)
            try:
                torch.ops.attnrt._paged_attention_varlen_on(
                    current[0], batch.q, batch.k_cache, batch.v_cache, batch.cu, batch.seq_lens,
                    batch.table, out, None, None, None, None, 0.0, -1, 0.0, "BNSH")
                key = "equal" if torch.equal(out, expected[i]) else None
                error = None if key else f"thread {i}: output differs from the own pool's"
            except ValueError as e:
                key = "closed" if "runtime is closed" in str(e) else None
                error = None if key else f"thread {i}: {e}"
            with lock:
                if key:
                    results[key] += 1
                else:
                    results["other"].append(error)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        for k in range(20):
            old = current[0]
            current[0] = _torch_lib.torch_threads_runtime(1 + k % 3)
            _torch_lib.release_runtime(old)
            time.sleep(0.01)  # the callers run meanwhile
    finally:
        stop.set()
        for t in threads:
            t.join()
        _torch_lib.release_runtime(current[0])
        torch.set_num_threads(previous)
    assert results["other"] == [], results["other"][:3]
    assert results["equal"] > 0


def _small_call(g):
    """A valid small call (BSNH, two sequences) as keyword arguments of the operator."""
    return dict(q=torch.randn(3, N, H, generator=g),
                k_cache=torch.randn(4, BS, NKV, H, generator=g),
                v_cache=torch.randn(4, BS, NKV, H, generator=g),
                cu_seqlens_q=torch.tensor([0, 1, 3], dtype=torch.int32),
                seq_lens=torch.tensor([5, 18], dtype=torch.int32),
                block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
                out=torch.full((3, N, H), 7.0), kv_layout="BSNH")


def test_negative_views_read_as_their_values_and_are_refused_where_written():
    """A negative view (torch._neg_view) of q is read as its values; one of a cache or out (torch's
    own fallback cannot write it back: an internal assert, then an abort at exit) is refused by
    name and nothing is written."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    expected = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, q=-call["q"], out=expected))
    got = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, q=torch._neg_view(call["q"]), out=got))
    assert torch.equal(got, expected)
    for name in ("k_cache", "v_cache", "out"):
        kw = dict(call)
        kw[name] = torch._neg_view(call[name])
        before = {n: call[n].clone() for n in ("k_cache", "v_cache", "out")}
        with pytest.raises(ValueError, match=rf"^ATTNRT_ERROR_INVALID_ARGUMENT: {name}: expected "
                                             r"a tensor the call can write, got a negative view"):
            torch.ops.attnrt.paged_attention_varlen(**kw)
        assert all(torch.equal(call[n], before[n]) for n in before)


@pytest.mark.parametrize("window_left", [2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**40])
def test_window_left_past_int32_is_refused_not_wrapped(window_left):
    """window_left + 1 is the op's int32 local_window_size: 2**32 + 1 had wrapped to a window of 2
    keys (a silently different result), 2**31 - 1 to a negative size; the Python path refuses
    them too."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    with pytest.raises(ValueError, match=r"window_left: expected -1 \(off\) or 0\.\.2147483646, "
                                         rf"got {window_left}"):
        torch.ops.attnrt.paged_attention_varlen(**call, window_left=window_left)
    assert torch.all(call["out"] == 7.0)
    # The largest window there is sees every key: the result without a window.
    full = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, out=full))
    torch.ops.attnrt.paged_attention_varlen(**call, window_left=2**31 - 2)
    assert torch.equal(call["out"], full)


def test_causal_false_sees_every_key_and_refuses_a_later_key_window_when_causal():
    """causal=False (the schema's last argument): every row sees its whole sequence, as SDPA
    without a mask; window_right > 0 with causal attention is refused naming window_right, nothing
    written; the default is causal (the older schemas' callers)."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    with pytest.raises(ValueError, match=r"window_right: causal attention sees no later key"):
        torch.ops.attnrt.paged_attention_varlen(**call, window_left=3, window_right=2)
    with pytest.raises(ValueError, match=r"window_right: expected -1"):
        torch.ops.attnrt.paged_attention_varlen(**call, window_right=-2, causal=False)
    assert torch.all(call["out"] == 7.0)
    causal = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, out=causal))
    default = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, out=default), causal=True)
    assert torch.equal(causal, default)
    torch.ops.attnrt.paged_attention_varlen(**call, causal=False)
    assert not torch.equal(call["out"], causal)
    with attnrt.Runtime(num_threads=1) as rt:
        again = attnrt.paged_attention_varlen(
            rt, call["q"], call["k_cache"], call["v_cache"], call["cu_seqlens_q"],
            call["seq_lens"], call["block_table"], kv_layout=call.get("kv_layout", "BSNH"),
            causal=False)
    assert torch.equal(again, call["out"])


@pytest.mark.parametrize("cache_dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantized_caches_through_the_operator(cache_dtype, per_channel):
    """8-bit caches with k_scale/v_scale (the schema's last arguments) through the C++ operator:
    the bits and the written rows of the Python path (PagedGqaVarlenOp over SWIG); a float
    cache given scales is refused naming k_scale, nothing written."""
    from attnrt._varlen import paged_attention_varlen_python

    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    for name in ("k_cache", "v_cache"):
        call[name] = (3 * call[name]).to(cache_dtype)
    width = NKV * H if per_channel else 1
    k_scale = 0.5 + torch.rand(width, generator=g)
    v_scale = 0.5 + torch.rand(width, generator=g)
    k = torch.randn(3, NKV, H, generator=g)
    v = torch.randn(3, NKV, H, generator=g)
    python = {n: call[n].clone() for n in ("k_cache", "v_cache")}
    torch.ops.attnrt.paged_attention_varlen(**call, k=k, v=v, k_scale=k_scale, v_scale=v_scale)
    with attnrt.Runtime(num_threads=1) as rt:
        want = paged_attention_varlen_python(
            rt, call["q"], python["k_cache"], python["v_cache"], call["cu_seqlens_q"],
            call["seq_lens"], call["block_table"], k=k, v=v, k_scale=k_scale, v_scale=v_scale)
    assert torch.equal(call["out"], want)
    for n in ("k_cache", "v_cache"):
        assert torch.equal(call[n].view(torch.uint8), python[n].view(torch.uint8))
    plain = _small_call(g)
    before = plain["out"].clone()
    with pytest.raises(ValueError, match=r"k_scale: scales are for 8-bit caches"):
        torch.ops.attnrt.paged_attention_varlen(**plain, k_scale=k_scale, v_scale=v_scale)
    assert torch.equal(plain["out"], before)


@pytest.mark.parametrize("name", ["softmax_scale", "softcap"])
def test_a_value_that_rounds_to_zero_in_float32_is_refused(name):
    """0 means the default scale and no softcap; 1e-50 (a valid double) became float32 0 and was
    silently read as that."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    with pytest.raises(ValueError, match=rf"^ATTNRT_ERROR_INVALID_ARGUMENT: {name}: 1e-50 rounds "
                                         r"to 0 in float32"):
        torch.ops.attnrt.paged_attention_varlen(**call, **{name: 1e-50})
    assert torch.all(call["out"] == 7.0)


@pytest.mark.parametrize("through", ["function", "python_path"])
def test_window_size_past_int32_names_window_size(through):
    """attnrt.paged_attention_varlen's window_size (left, 0) past int32 is refused naming
    window_size on both paths (the C++ operator's path had reported it as its window_left)."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    args = [call[n] for n in ("q", "k_cache", "v_cache", "cu_seqlens_q", "seq_lens",
                              "block_table")]
    fn = (attnrt.paged_attention_varlen if through == "function"
          else _varlen.paged_attention_varlen_python)
    with attnrt.Runtime(num_threads=1) as rt:
        with pytest.raises(attnrt.InvalidArgumentError,
                           match=r"window_size: left must be below 2\^31 - 1, got 2147483647"):
            fn(rt, *args, out=call["out"], window_size=(2**31 - 1, 0), kv_layout="BSNH")
    assert torch.all(call["out"] == 7.0)


@pytest.mark.parametrize("name", ["q", "k_cache", "v_cache", "block_table", "out"])
def test_a_storage_smaller_than_the_view_is_refused(name):
    """A storage resized under its view (untyped_storage().resize_, as sharded-parameter code
    does) keeps the view's shape: the kernels had read or written past the allocation (heap
    corruption); with no storage at all the C ABI saw a NULL pointer."""
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    call[name] = call[name].clone()
    call[name].untyped_storage().resize_(4)
    with pytest.raises(ValueError, match=rf"^ATTNRT_ERROR_INVALID_ARGUMENT: {name}: its elements "
                                         r"\(shape .*\) reach past its storage of 4 bytes"):
        torch.ops.attnrt.paged_attention_varlen(**call)


def test_causal_none_is_the_default_and_bounds_are_the_python_paths():
    """causal=None means causal (torch reads None as False for a plain bool: the schema's
    argument is optional); window_left below -1 is refused as the Python path refuses it; scales
    on another device (meta) are refused rather than dispatched to the fake kernel; only a
    v_scale on a float cache is named as v_scale; a numpy window_size is read as a window."""
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(SEED)
    call = _small_call(g)
    causal = torch.zeros_like(call["out"])
    torch.ops.attnrt.paged_attention_varlen(**dict(call, out=causal))
    torch.ops.attnrt.paged_attention_varlen(**call, causal=None)
    assert torch.equal(call["out"], causal)
    with pytest.raises(ValueError, match=r"window_left: expected -1 \(off\) or 0\.\."):
        torch.ops.attnrt.paged_attention_varlen(**call, window_left=-5)
    quantized = dict(call)
    for name in ("k_cache", "v_cache"):
        quantized[name] = call[name].to(torch.int8)
    before = quantized["out"].clone()
    meta = torch.ones(1, device="meta")
    with pytest.raises((ValueError, RuntimeError), match=r"device|meta"):
        torch.ops.attnrt.paged_attention_varlen(**quantized, k_scale=meta, v_scale=meta)
    assert torch.equal(quantized["out"], before)
    with pytest.raises(ValueError, match=r"^ATTNRT_ERROR_INVALID_ARGUMENT: v_scale: scales are"):
        torch.ops.attnrt.paged_attention_varlen(**call, v_scale=torch.ones(1))
    with attnrt.Runtime(num_threads=1) as rt:
        with pytest.raises(attnrt.InvalidArgumentError, match=r"v_scale: scales are for 8-bit"):
            attnrt.paged_attention_varlen(
                rt, call["q"], call["k_cache"], call["v_cache"], call["cu_seqlens_q"],
                call["seq_lens"], call["block_table"], v_scale=torch.ones(1))
        got = attnrt.paged_attention_varlen(
            rt, call["q"], call["k_cache"], call["v_cache"], call["cu_seqlens_q"],
            call["seq_lens"], call["block_table"], window_size=np.array([3, 0]))
        want = torch.zeros_like(got)
        torch.ops.attnrt.paged_attention_varlen(**dict(call, out=want), window_left=3)
        assert torch.equal(got, want)
        for window, side in (((-2, 0), "left"), ((0, -3), "right"), ((3, 2**31), "right")):
            with pytest.raises(attnrt.InvalidArgumentError, match=f"window_size: {side}"):
                attnrt.paged_attention_varlen(
                    rt, call["q"], call["k_cache"], call["v_cache"], call["cu_seqlens_q"],
                    call["seq_lens"], call["block_table"], causal=False, window_size=window)
