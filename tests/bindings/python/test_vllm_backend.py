"""attnrt.vllm: the package works without vLLM (nothing imported, the plugin a no-op unless
ATTNRT_VLLM=1); with vLLM importable, the backend's impl against a float64 reference on a mixed
batch in vLLM's CPU cache layout, on encoder (non-causal) layers and on a layer sharing another's
KV cache, its refusals, and the runtime it runs on (torch's intra-op
threads when the C++ operator is loaded)."""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_import_and_plugin_without_opt_in_leave_vllm_alone():
    code = ("import sys, os; os.environ.pop('ATTNRT_VLLM', None); import attnrt.vllm as v; "
            "v.register(); assert not v.enabled(); "
            "assert 'vllm' not in sys.modules, 'attnrt.vllm imported vllm'; print('ok')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_entry_point_is_declared():
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "pyproject.toml")).read()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert 'attnrt = "attnrt.vllm:register"' in text


needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")

N, NKV, H, BS = 8, 2, 64, 16


def reference(q, keys, values, pos, scale, window, softcap, sinks):
    """float64 attention of one query row at position pos over keys[0..pos]."""
    group = N // NKV
    out = torch.empty(N, H, dtype=torch.float64)
    for h in range(N):
        k = keys[: pos + 1, h // group].double()
        v = values[: pos + 1, h // group].double()
        s = (k @ q[h].double()) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        j = torch.arange(pos + 1)
        if window is not None:
            s = torch.where(pos - j < window, s, torch.tensor(-math.inf, dtype=torch.float64))
        m = s.max()
        e = torch.exp(s - m)
        den = e.sum() + (torch.exp(sinks[h].double() - m) if sinks is not None else 0)
        out[h] = (e / den) @ v
    return out


@needs_vllm
@pytest.mark.parametrize("features", ["plain", "window_softcap_sinks", "window_hook"])
def test_impl_mixed_batch_in_vllm_cache_layout(features):
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    class WindowHookImpl(AttnrtImpl):
        """A window from the window() hook alone, as the end-to-end check's negative control
        sets one: forward must ask it every step."""

        def window(self, attn_metadata):
            return (4, 0)

    g = torch.Generator().manual_seed(3)
    window = 5 if features != "plain" else None
    softcap = 2.0 if features == "window_softcap_sinks" else 0.0
    sinks = torch.randn(N, generator=g) if features == "window_softcap_sinks" else None
    if features == "window_hook":
        impl = WindowHookImpl(N, H, 0.125, NKV, None, None, "auto", None)
    else:
        impl = AttnrtImpl(N, H, 0.125, NKV, None, window, "auto", softcap or None, sinks=sinks)
    # Sequence 0: 20 cached tokens + a 7-token chunk; sequence 1: a decode after 33 tokens.
    ctx, q_lens = [20, 33], [7, 1]
    seq_lens = [c + q for c, q in zip(ctx, q_lens)]
    tables = [[5, 2], [1, 7, 3]]
    if window is not None:
        # Sequence 1's first block is behind every query's window: vLLM has freed it and given
        # it to the block this step writes, while the worker's table still names it at slot 0.
        tables[1][0] = tables[1][2]
    num_blocks = 9
    kv = torch.randn(num_blocks, NKV, BS, 2 * H, generator=g)
    full_k = [torch.randn(s, NKV, H, generator=g) for s in seq_lens]
    full_v = [torch.randn(s, NKV, H, generator=g) for s in seq_lens]
    slab = kv.view(num_blocks, NKV, 2, BS, H)
    for b, s in enumerate(ctx):  # the cached rows, where vLLM's layout puts them
        for p in range(s):
            blk = tables[b][p // BS]
            slab[blk, :, 0, p % BS] = full_k[b][p]
            slab[blk, :, 1, p % BS] = full_v[b][p]
    t = sum(q_lens)
    # q/k/v as vLLM gives them: views of one fused projection (row stride (N + 2 NKV) * H).
    qkv = torch.randn(t + 2, (N + 2 * NKV) * H, generator=g)
    q, k, v = qkv.split([N * H, NKV * H, NKV * H], dim=-1)
    q, k, v = q.view(-1, N, H), k.view(-1, NKV, H), v.view(-1, NKV, H)
    slots, row = [], 0
    for b in range(2):
        for i in range(q_lens[b]):
            p = ctx[b] + i
            k[row] = full_k[b][p]
            v[row] = full_v[b][p]
            slots.append(tables[b][p // BS] * BS + p % BS)
            row += 1
    width = max(len(tb) for tb in tables)
    md = AttnrtMetadata(
        num_actual_tokens=t, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
        query_start_loc=torch.tensor([0, q_lens[0], t], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_table=torch.tensor([tb + [0] * (width - len(tb)) for tb in tables], dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64))
    output = torch.full((t + 2, N, H), 7.0)
    impl.forward(None, q, k, v, kv, md, output)
    row = 0
    for b in range(2):
        for i in range(q_lens[b]):
            p = ctx[b] + i
            expect = reference(q[row], full_k[b], full_v[b], p, 0.125, window, softcap, sinks)
            assert torch.allclose(output[row].double(), expect, atol=2e-5), (b, i)
            blk = tables[b][p // BS]  # the new row was written into the cache
            assert torch.equal(slab[blk, :, 0, p % BS], full_k[b][p])
            assert torch.equal(slab[blk, :, 1, p % BS], full_v[b][p])
            row += 1
    assert torch.all(output[t:] == 7.0), "padding rows past num_actual_tokens were written"


def encoder_reference(q, keys, values, scale):
    """float64 non-causal attention of one sequence: every query row sees every key."""
    group = N // NKV
    out = torch.empty(q.shape[0], N, H, dtype=torch.float64)
    for h in range(N):
        s = (q[:, h].double() @ keys[:, h // group].double().T) * scale
        out[:, h] = torch.softmax(s, dim=-1) @ values[:, h // group].double()
    return out


class _EncoderGroup:
    """The builder's state _encoder_pools reads (an EncoderOnlyAttentionSpec's fields)."""

    def __init__(self, block_size, dtype):
        from types import SimpleNamespace

        self.kv_cache_spec = SimpleNamespace(block_size=block_size, num_kv_heads=NKV, head_size=H)
        self.dtype = dtype


@needs_vllm
@pytest.mark.parametrize("attn_type", ["encoder_only", "encoder"])
@pytest.mark.parametrize("causal_hook", [False, True])
def test_impl_encoder_attention_sees_every_key(attn_type, causal_hook):
    """ENCODER_ONLY / ENCODER layers: the builder's scratch pools and table, the new rows written
    there, every query row attending to its whole sequence (float64 reference, scores sharp
    enough that a causal mask shows); causal_hook: the negative control's override must make the
    comparison fail."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, AttnrtMetadataBuilder

    class CausalImpl(AttnrtImpl):
        def causal(self, attn_metadata):
            return True

    g = torch.Generator().manual_seed(11)
    print(f"seed 11, attn_type {attn_type}")
    lens = [37, 1, 16, 5]
    t = sum(lens)
    qsl = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    table, pools = AttnrtMetadataBuilder._encoder_pools(_EncoderGroup(BS, torch.float32), qsl,
                                                        seq_lens)
    assert table.dtype == torch.int32 and table.shape == (4, 3), table
    md = AttnrtMetadata(num_actual_tokens=t, max_query_len=max(lens), max_seq_len=max(lens),
                        query_start_loc=qsl, seq_lens=seq_lens, block_table=table,
                        slot_mapping=torch.empty(0, dtype=torch.int64), causal=False,
                        encoder_pools=pools)
    cls = CausalImpl if causal_hook else AttnrtImpl
    impl = cls(N, H, 0.125, NKV, None, None, "auto", None, attn_type=attn_type)
    qkv = torch.randn(t + 3, (N + 2 * NKV) * H, generator=g) * 2
    q, k, v = qkv.split([N * H, NKV * H, NKV * H], dim=-1)
    q, k, v = q.view(-1, N, H), k.view(-1, NKV, H), v.view(-1, NKV, H)
    output = torch.full((t + 3, N, H), 7.0)
    impl.forward(None, q, k, v, None, md, output)
    worst = 0.0
    for b in range(len(lens)):
        rows = slice(int(qsl[b]), int(qsl[b + 1]))
        expect = encoder_reference(q[rows], k[rows], v[rows], 0.125)
        worst = max(worst, float((output[rows].double() - expect).abs().max()))
    assert torch.all(output[t:] == 7.0), "padding rows past num_actual_tokens were written"
    if causal_hook:
        assert worst > 0.1, f"a causal mask came within {worst} of non-causal attention"
    else:
        assert worst < 2e-5, worst


@needs_vllm
@pytest.mark.parametrize("head_size", [40, 72, 512])
def test_impl_any_head_size(head_size):
    """Head sizes outside vLLM's own CPU list (which has no 40 or 72) run, in vLLM's cache layout:
    a decode and a 6-token chunk after 19 cached tokens against SDPA (float64) per sequence."""
    from attnrt._vllm_backend import AttnrtBackend, AttnrtImpl, AttnrtMetadata

    assert AttnrtBackend.supports_head_size(head_size)
    g = torch.Generator().manual_seed(17)
    impl = AttnrtImpl(N, head_size, head_size ** -0.5, NKV, None, None, "auto", None)
    ctx, q_lens, tables = [30, 19], [1, 6], [[2, 0], [1, 3]]
    seq_lens = [c + q for c, q in zip(ctx, q_lens)]
    kv = torch.randn(4, NKV, BS, 2 * head_size, generator=g)
    slab = kv.view(4, NKV, 2, BS, head_size)
    t = sum(q_lens)
    q = 2 * torch.randn(t, N, head_size, generator=g)
    k = torch.randn(t, NKV, head_size, generator=g)
    v = torch.randn(t, NKV, head_size, generator=g)
    slots = [tables[b][p // BS] * BS + p % BS for b in range(2) for p in range(ctx[b], seq_lens[b])]
    md = AttnrtMetadata(
        num_actual_tokens=t, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
        query_start_loc=torch.tensor([0, 1, t], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_table=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64))
    output = torch.empty(t, N, head_size)
    impl.forward(None, q, k, v, kv, md, output)
    for b in range(2):
        keys = torch.stack([slab[tables[b][p // BS], :, 0, p % BS] for p in range(seq_lens[b])])
        values = torch.stack([slab[tables[b][p // BS], :, 1, p % BS] for p in range(seq_lens[b])])
        rows = slice(0, 1) if b == 0 else slice(1, t)
        qs = q[rows].double().transpose(0, 1)
        ks = keys.double().repeat_interleave(N // NKV, 1).transpose(0, 1)
        vs = values.double().repeat_interleave(N // NKV, 1).transpose(0, 1)
        mask = torch.arange(seq_lens[b])[None, :] <= (ctx[b] + torch.arange(q_lens[b]))[:, None]
        want = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
        err = (output[rows].double() - want.transpose(0, 1)).abs().max().item()
        assert err < 2e-5, (b, err)


@needs_vllm
def test_encoder_pools_of_a_block_size_past_the_ops_limit():
    """A vLLM block size above the paged op's 1024 gives scratch blocks of 1024 (the scratch is
    attnrt's own), and the layer runs."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, AttnrtMetadataBuilder

    qsl = torch.tensor([0, 3, 1203], dtype=torch.int32)
    lens = torch.tensor([3, 1200], dtype=torch.int32)
    table, pools = AttnrtMetadataBuilder._encoder_pools(_EncoderGroup(4096, torch.float32), qsl,
                                                        lens)
    assert pools[0].shape[2] == 1024 and table[0, 0] == 0 and table[1].tolist() == [1, 2]
    md = AttnrtMetadata(num_actual_tokens=1203, max_query_len=1200, max_seq_len=1200,
                        query_start_loc=qsl, seq_lens=lens, block_table=table,
                        slot_mapping=torch.empty(0, dtype=torch.int64), causal=False,
                        encoder_pools=pools)
    g = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(1203, n, H, generator=g) for n in (N, NKV, NKV))
    out = torch.empty(1203, N, H)
    AttnrtImpl(N, H, 0.125, NKV, None, None, "auto", None, attn_type="encoder_only").forward(
        None, q, k, v, None, md, out)
    expect = encoder_reference(q[3:], k[3:], v[3:], 0.125)
    assert (out[3:].double() - expect).abs().max().item() < 2e-5


@needs_vllm
def test_encoder_pools_refuse_a_sequence_split_across_steps():
    from attnrt._vllm_backend import AttnrtMetadataBuilder

    with pytest.raises(NotImplementedError, match="split across steps"):
        AttnrtMetadataBuilder._encoder_pools(_EncoderGroup(BS, torch.float32),
                                             torch.tensor([0, 4], dtype=torch.int32),
                                             torch.tensor([9], dtype=torch.int32))


@needs_vllm
def test_impl_sharing_a_kv_cache_reads_it_and_writes_nothing():
    """A layer reading an earlier layer's KV cache (KV sharing): its new K/V rows are not written
    (the target layer wrote this step's rows), attention reads the cache as it is."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    g = torch.Generator().manual_seed(5)
    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, "auto", None,
                      kv_sharing_target_layer_name="model.layers.0.self_attn.attn")
    ctx, q_len = 21, 4
    total = ctx + q_len
    tables = [3, 0, 6]
    kv = torch.randn(8, NKV, BS, 2 * H, generator=g)
    slab = kv.view(8, NKV, 2, BS, H)
    keys = torch.stack([slab[tables[p // BS], :, 0, p % BS] for p in range(total)])
    values = torch.stack([slab[tables[p // BS], :, 1, p % BS] for p in range(total)])
    before = kv.clone()
    q = torch.randn(q_len, N, H, generator=g) * 2
    k = torch.full((q_len, NKV, H), 1e4)  # must not reach the cache
    v = torch.full((q_len, NKV, H), 1e4)
    md = AttnrtMetadata(
        num_actual_tokens=q_len, max_query_len=q_len, max_seq_len=total,
        query_start_loc=torch.tensor([0, q_len], dtype=torch.int32),
        seq_lens=torch.tensor([total], dtype=torch.int32),
        block_table=torch.tensor([tables], dtype=torch.int32),
        slot_mapping=torch.tensor([tables[p // BS] * BS + p % BS for p in range(ctx, total)],
                                  dtype=torch.int64))
    output = torch.empty(q_len, N, H)
    impl.forward(None, q, k, v, kv, md, output)
    assert torch.equal(kv, before), "a KV-sharing layer wrote into the shared cache"
    for i in range(q_len):
        expect = reference(q[i], keys, values, ctx + i, 0.125, None, 0.0, None)
        assert torch.allclose(output[i].double(), expect, atol=2e-5), i


@needs_vllm
@pytest.mark.parametrize("kwargs, reason", [
    (dict(alibi_slopes=[0.5] * (N - 1)), "ALiBi slopes"),
    (dict(attn_type="decoder_typo"), "attn_type"),
    (dict(attn_type="encoder_only", kv_sharing_target_layer_name="model.layers.0.attn"),
     "sharing"),
    (dict(kv_cache_dtype="int8_per_token_head"), "kv_cache_dtype"),
])
def test_impl_refuses_what_it_cannot_serve(kwargs, reason):
    from attnrt._vllm_backend import AttnrtImpl

    args = dict(num_heads=N, head_size=H, scale=0.125, num_kv_heads=NKV, alibi_slopes=None,
                sliding_window=None, kv_cache_dtype="auto")
    args.update(kwargs)
    with pytest.raises(NotImplementedError, match=reason):
        AttnrtImpl(**args)


@needs_vllm
def test_layers_run_on_torch_threads_when_the_operator_is_loaded():
    """With libattnrt_torch.so the backend's runtime is the library's runtime on torch's intra-op
    threads, with a team of torch.get_num_threads(): one per thread count, kept (a call still on
    the runtime of the previous count must not find it released)."""
    from attnrt import _torch_lib, _vllm_backend

    if not _torch_lib.load():
        pytest.skip("libattnrt_torch.so is not built")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        first = _vllm_backend.torch_runtime_id()
        assert first > 0 and _vllm_backend.torch_runtime_id() == first
        torch.set_num_threads(2)
        second = _vllm_backend.torch_runtime_id()
        assert second not in (0, first)
        # Both still open (a closed one raises "runtime is closed").
        assert len(torch.ops.attnrt._runtime_stats(first)) == 3
        assert len(torch.ops.attnrt._runtime_stats(second)) == 3
        torch.set_num_threads(1)
        assert _vllm_backend.torch_runtime_id() == first
    finally:
        torch.set_num_threads(previous)


# ---- ATTNRT_VLLM_P_PRECISION: the probabilities' precision of the backend's layers -------------


def _impl_args():
    return dict(num_heads=N, head_size=H, scale=0.125, num_kv_heads=NKV, alibi_slopes=None,
                sliding_window=None, kv_cache_dtype="auto")


@needs_vllm
@pytest.mark.parametrize("value, mode", [(None, "auto"), ("", "auto"), ("input", "input"),
                                         ("exact", "exact"), (" EXACT ", "exact"),
                                         ("Auto", "auto")])
def test_p_precision_from_the_environment(monkeypatch, value, mode):
    from attnrt._vllm_backend import AttnrtImpl

    if value is None:
        monkeypatch.delenv("ATTNRT_VLLM_P_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ATTNRT_VLLM_P_PRECISION", value)
    assert AttnrtImpl(**_impl_args()).p_precision == mode


@needs_vllm
@pytest.mark.parametrize("value", ["fp32", "1", "inputs", "exact input"])
def test_p_precision_other_values_fail_at_start_up_naming_the_variable(monkeypatch, value):
    from attnrt._vllm_backend import AttnrtImpl

    monkeypatch.setenv("ATTNRT_VLLM_P_PRECISION", value)
    with pytest.raises(ValueError, match=r"ATTNRT_VLLM_P_PRECISION: expected 'auto', 'exact' or 'input'"):
        AttnrtImpl(**_impl_args())


def _bf16_layer_outputs(monkeypatch, modes, isa=None):
    """One bfloat16 decode through AttnrtImpl per ATTNRT_VLLM_P_PRECISION value in `modes`, with
    vLLM's ISA choice replaced by `isa` when given."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    if isa is not None:
        import vllm.v1.attention.backends.cpu_attn as cpu_attn

        monkeypatch.setattr(cpu_attn, "_get_attn_isa", lambda *args, **kwargs: isa)
    g = torch.Generator().manual_seed(5)
    seq, num_blocks = 40, 4
    outs = {}
    kv0 = (torch.randn(num_blocks, NKV, BS, 2 * H, generator=g) * 2).to(torch.bfloat16)
    qkv = (torch.randn(1, (N + 2 * NKV) * H, generator=g) * 2).to(torch.bfloat16)
    for mode in modes:
        monkeypatch.setenv("ATTNRT_VLLM_P_PRECISION", mode)
        impl = AttnrtImpl(**_impl_args())
        kv = kv0.clone()
        q, k, v = qkv.split([N * H, NKV * H, NKV * H], dim=-1)
        md = AttnrtMetadata(
            num_actual_tokens=1, max_query_len=1, max_seq_len=seq,
            query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
            seq_lens=torch.tensor([seq], dtype=torch.int32),
            block_table=torch.tensor([[0, 1, 2]], dtype=torch.int32),
            slot_mapping=torch.tensor([(seq - 1) // BS * BS + (seq - 1) % BS],
                                      dtype=torch.int64))
        output = torch.zeros(1, N, H, dtype=torch.bfloat16)
        impl.forward(None, q.view(-1, N, H), k.view(-1, NKV, H), v.view(-1, NKV, H), kv, md,
                     output)
        outs[mode] = output
    return outs


@needs_vllm
def test_p_precision_reaches_the_layer(monkeypatch):
    """bfloat16 layers give different outputs in the two modes (float32 ones the same)."""
    outs = _bf16_layer_outputs(monkeypatch, ("exact", "input"))
    assert not torch.equal(outs["exact"], outs["input"])


@needs_vllm
@pytest.mark.parametrize("isa, follows", [("amx", "input"), ("vec", "exact"),
                                          ("vec16", "exact")])
def test_p_precision_auto_follows_vllms_kernel(monkeypatch, isa, follows):
    """auto: INPUT where vLLM would run its AMX kernel (which rounds P to bfloat16), EXACT where
    it would run a vector kernel (P in float32)."""
    outs = _bf16_layer_outputs(monkeypatch, ("auto", "exact", "input"), isa=isa)
    assert torch.equal(outs["auto"], outs[follows])
    other = "exact" if follows == "input" else "input"
    assert not torch.equal(outs["auto"], outs[other])


@needs_vllm
@pytest.mark.parametrize("isa, mode", [("amx", "input"), ("vec", "exact")])
def test_p_precision_auto_logs_the_mode_it_chose(monkeypatch, isa, mode):
    """With auto, vLLM's log says which mode the layers run (the start-up line says only
    "auto"; docs/python.md: the log says which mode runs)."""
    import logging

    import attnrt._vllm_backend as backend

    monkeypatch.setattr(backend, "_auto_resolved", set())
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger("vllm.attnrt")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        _bf16_layer_outputs(monkeypatch, ("auto",), isa=isa)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    chosen = [m for m in records if m.startswith("attnrt p_precision auto:")]
    assert len(chosen) == 1, records
    assert f"auto: {mode} for bfloat16 layers with block_size {BS} and head_size {H}" in chosen[0]


# ---- ATTNRT_VLLM: asked for attnrt, vLLM gets it or fails to start -------------------------------


@pytest.mark.parametrize("value", ["true", "yes", "2", "on", "1 1"])
def test_attnrt_vllm_other_values_are_errors(monkeypatch, value):
    """ATTNRT_VLLM=true left attnrt off without a word."""
    import attnrt.vllm

    monkeypatch.setenv("ATTNRT_VLLM", value)
    with pytest.raises(ValueError, match=r"ATTNRT_VLLM=.*: expected 1 .* or 0 / unset"):
        attnrt.vllm.enabled()
    with pytest.raises(ValueError, match=r"ATTNRT_VLLM="):
        attnrt.vllm.register()


@pytest.mark.parametrize("value, on", [("1", True), (" 1 ", True), ("0", False), ("", False)])
def test_attnrt_vllm_on_and_off(monkeypatch, value, on):
    import attnrt.vllm

    monkeypatch.setenv("ATTNRT_VLLM", value)
    assert attnrt.vllm.enabled() is on


def test_missing_torch_operators_make_attnrt_unusable(monkeypatch):
    """Without libattnrt_torch.so, ATTNRT_VLLM=1 fails rather than serving through a path the
    build did not mean (ATTNRT_TORCH_OPS=0 asks for the Python path explicitly)."""
    import attnrt.vllm
    from attnrt import _torch_lib

    monkeypatch.setattr(_torch_lib, "_state", False)
    monkeypatch.setattr(_torch_lib, "_why_not", "/x/libattnrt_torch.so is missing")
    with pytest.raises(RuntimeError, match=r"ATTNRT_VLLM=1 but attnrt's torch operators are not "
                                           r"usable: /x/libattnrt_torch.so is missing"):
        attnrt.vllm.check_usable()
    monkeypatch.setenv("ATTNRT_TORCH_OPS", "0")
    attnrt.vllm.check_usable()


FAKE_ABI_12 = """#include <stdint.h>
void attnrt_abi_version(uint32_t* major, uint32_t* minor) { *major = 1; *minor = 2; }
"""

# vLLM's own plugin loading (as its engine and workers run it at start-up), then its CPU
# platform's backend lookup for an MLA layer and for a plain decoder layer.
START = """
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()
print("plugins loaded")
from vllm.platforms import current_platform
from vllm.v1.attention.selector import AttentionSelectorConfig
for mla in (True, False):
    config = AttentionSelectorConfig(head_size=64, dtype=torch.float32, kv_cache_dtype=None,
                                     block_size=16, use_mla=mla)
    print("backend", current_platform.get_attn_backend_cls(None, attn_selector_config=config))
"""


@pytest.fixture(scope="module")
def vllm_env(tmp_path_factory):
    """An environment whose vLLM finds attnrt's entry point (a dist-info naming it beside this
    build's package), and a stand-in library answering ABI 1.2 for LD_PRELOAD."""
    d = tmp_path_factory.mktemp("vllm_plugin")
    info = d / "attnrt_entry_point-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: attnrt-entry-point\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[vllm.general_plugins]\nattnrt = attnrt.vllm:register\n")
    import attnrt

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(d), os.path.dirname(os.path.dirname(attnrt.__file__))] + sys.path))
    env.pop("ATTNRT_VLLM", None)
    env.pop("VLLM_PLUGINS", None)
    abi12 = None
    cc = next((c for c in ("cc", "gcc", "clang") if subprocess.run(
        ["sh", "-c", f"command -v {c}"], capture_output=True).returncode == 0), None)
    if cc is not None:
        (d / "fake.c").write_text(FAKE_ABI_12)
        abi12 = str(d / "libfake_abi12.so")
        subprocess.run([cc, "-shared", "-fPIC", "-o", abi12, str(d / "fake.c")], check=True)
    return env, abi12


def start(env, **extra):
    return subprocess.run([sys.executable, "-c", START], env=dict(env, **extra),
                          capture_output=True, text=True, timeout=300)


@needs_vllm
def test_vllm_start_fails_when_attnrt_is_asked_for_but_unusable(vllm_env):
    """libattnrt.so of ABI 1.2 under ATTNRT_VLLM=1: vLLM logged "Failed to load plugin attnrt" and
    started with its own attention. Now its plugin loading raises the reason."""
    env, abi12 = vllm_env
    if abi12 is None:
        pytest.skip("no C compiler to build the stand-in library")
    r = start(env, ATTNRT_VLLM="1", LD_PRELOAD=abi12)
    assert r.returncode != 0 and "plugins loaded" not in r.stdout, r.stdout + r.stderr
    assert "RuntimeError: ATTNRT_VLLM=1 but attnrt is not usable: attnrt: the loaded libattnrt.so " \
           "has ABI 1.2" in r.stderr, r.stderr
    r = start(env, ATTNRT_VLLM="true")
    assert r.returncode != 0 and "ValueError: ATTNRT_VLLM='true'" in r.stderr, r.stderr
    # Without ATTNRT_VLLM the stand-in library leaves vLLM alone (its own attention).
    r = start(env, LD_PRELOAD=abi12)
    assert r.returncode == 0 and "backend vllm.v1.attention.backends.cpu_attn" in r.stdout, \
        r.stdout + r.stderr


@needs_vllm
def test_vllm_layers_attnrt_does_not_serve_are_named_in_the_log(vllm_env):
    """An MLA model under ATTNRT_VLLM=1 ran on vLLM's CPU_MLA without a word about attnrt."""
    env, _ = vllm_env
    r = start(env, ATTNRT_VLLM="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "backend attnrt.vllm.AttnrtBackend" in r.stdout
    assert "attnrt does not serve this model's MLA attention layers (ATTNRT_VLLM=1): vLLM's " \
           "vllm.v1.attention.backends.mla." in r.stdout + r.stderr, r.stdout + r.stderr


FP8_SPECIAL = [500.0, -500.0, 448.0, 460.0, 1e6, math.inf, -math.inf, math.nan, 1e-3, 2**-9, 2**-10,
               3 * 2**-10, 1e-4, -1e-3, 0.0, -0.0, 0.0019531, 447.9, 449.0, 464.0, 465.0, -0.4375,
               # e5m2's: its largest code, the values past it, subnormals (units of 2^-16), ties
               57344.0, 61440.0, 65504.0, -70000.0, 2**-16, 2**-17, 3 * 2**-17, 1e-7, 1.125,
               1.375, 1.0625, 1.1875]


@needs_vllm
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("scale", [1.0, 0.7, 3.3, 1.7, 1e-3])
@pytest.mark.parametrize("dtype, isa", [(torch.float32, "vec"), (torch.bfloat16, "vec"),
                                        (torch.bfloat16, "amx"), (torch.float16, "vec")])
def test_fp8_rows_are_vllms_bytes(scale, dtype, isa, kv_cache_dtype):
    """attnrt's fp8 rows (fp8_rows_as_vllm) are the bytes vLLM's CPU writer stores
    (cpu_attn_reshape_and_cache, kv_cache_dtype "fp8" or "fp8_e5m2"), special values included
    (overflow, inf, NaN, subnormals, signed zeros, ties): V rows where vLLM's vector layout keeps
    them plain, and the bytes of each [block, kv head] slab as a multiset where vLLM packs them
    (K, and V under AMX). Round-to-nearest (torch's own conversion) must fail the same
    comparison."""
    from vllm import _custom_ops as ops

    from attnrt._vllm_backend import fp8_rows_as_vllm

    g = torch.Generator().manual_seed(23)
    bs, n = 32, 64
    # bfloat16 rows hit e4m3's codes exactly after the scale (1.0625 / 1.7 = 0.625), where the
    # order of vLLM's float32 operations decides the byte.
    key = 5 * torch.randn(n, NKV, H, generator=g)
    key.view(-1)[:n * NKV * H // 2] *= torch.logspace(-8, 5, n * NKV * H // 2)  # every exponent
    value = 3 * torch.randn(n, NKV, H, generator=g)
    value.view(-1)[:len(FP8_SPECIAL)] = torch.tensor(FP8_SPECIAL)
    key, value = key.to(dtype), value.to(dtype)
    kv = torch.zeros(2, NKV, bs, 2 * H, dtype=torch.uint8)
    k_cache, v_cache = kv.view(2, NKV, 2 * bs, H).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(key, value, k_cache, v_cache, torch.arange(n), isa,
                                   k_scale=scale, v_scale=scale, kv_cache_dtype=kv_cache_dtype)

    def rows(x, convert):
        return convert(x).view(torch.uint8).view(2, bs, NKV, H).transpose(1, 2)  # [blk, h, s, H]

    ours_k = rows(key, lambda x: fp8_rows_as_vllm(x, scale, kv_cache_dtype))
    ours_v = rows(value, lambda x: fp8_rows_as_vllm(x, scale, kv_cache_dtype))

    def multiset(x):
        return x.reshape(2, NKV, -1).sort(-1).values

    assert torch.equal(multiset(ours_k), multiset(k_cache))
    assert torch.equal(multiset(ours_v), multiset(v_cache))
    if isa == "vec":
        assert torch.equal(ours_v, v_cache)
    fp8 = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else torch.float8_e4m3fn
    nearest = rows(value, lambda x: (x.float() / scale).to(fp8))
    assert not torch.equal(multiset(nearest), multiset(v_cache))


@needs_vllm
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_impl_fp8_cache_matches_vllms_kernel(dtype, kv_cache_dtype):
    """kv_cache_dtype "fp8" (e4m3) and "fp8_e5m2": a decode and a 9-token chunk over cached rows, attnrt's layer (its
    rows stored as vLLM's bytes, read per tensor with k_scale/v_scale) against vLLM's own fp8
    kernel over vLLM's cache written from the same rows, and against a float64 reference over the
    dequantized rows; a wrong v_scale must fail the comparison."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, fp8_rows_as_vllm

    g = torch.Generator().manual_seed(29)
    bs, ks, vs = 32, 0.6, 1.7
    isa = _get_attn_isa(dtype, bs, H, kv_cache_dtype)
    print(f"seed 29, vLLM ISA {isa}")
    layer = type("Layer", (), {"_k_scale_float": ks, "_v_scale_float": vs})()
    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, kv_cache_dtype, None)
    ctx, q_lens, tables = [70, 40], [1, 9], [[4, 1, 6], [2, 5, 3]]
    seq_lens = [c + q for c, q in zip(ctx, q_lens)]
    num_blocks = 7
    rows_k = [(3 * torch.randn(s, NKV, H, generator=g)).to(dtype) for s in seq_lens]
    rows_v = [(3 * torch.randn(s, NKV, H, generator=g)).to(dtype) for s in seq_lens]
    ours = torch.zeros(num_blocks, NKV, bs, 2 * H, dtype=torch.uint8)
    theirs = torch.zeros_like(ours)
    vk, vv = theirs.view(num_blocks, NKV, 2 * bs, H).chunk(2, dim=2)
    pools = ours.view(num_blocks, NKV, 2, bs, H)
    slot = [[tables[b][p // bs] * bs + p % bs for p in range(seq_lens[b])] for b in range(2)]
    for b in range(2):  # the cached rows: vLLM's writer, and vLLM's bytes in attnrt's layout
        pos = torch.arange(ctx[b])
        ops.cpu_attn_reshape_and_cache(rows_k[b][:ctx[b]], rows_v[b][:ctx[b]], vk, vv,
                                       torch.tensor(slot[b][:ctx[b]]), isa, k_scale=ks,
                                       v_scale=vs, kv_cache_dtype=kv_cache_dtype)
        blocks = torch.tensor(tables[b])[pos // bs]
        pools[blocks, :, 0, pos % bs] = fp8_rows_as_vllm(rows_k[b][:ctx[b]], ks, kv_cache_dtype).view(torch.uint8)
        pools[blocks, :, 1, pos % bs] = fp8_rows_as_vllm(rows_v[b][:ctx[b]], vs, kv_cache_dtype).view(torch.uint8)
    t = sum(q_lens)
    q = (2 * torch.randn(t, N, H, generator=g)).to(dtype)
    k = torch.cat([rows_k[b][ctx[b]:] for b in range(2)])
    v = torch.cat([rows_v[b][ctx[b]:] for b in range(2)])
    new_slots = torch.tensor([s for b in range(2) for s in slot[b][ctx[b]:]], dtype=torch.int64)
    qsl = torch.tensor([0, q_lens[0], t], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    table = torch.tensor(tables, dtype=torch.int32)
    md = AttnrtMetadata(num_actual_tokens=t, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
                        query_start_loc=qsl, seq_lens=lens, block_table=table,
                        slot_mapping=new_slots)
    out = torch.full((t, N, H), 7.0, dtype=dtype)
    impl.forward(layer, q, k, v, ours, md, out)

    ops.cpu_attn_reshape_and_cache(k, v, vk, vv, new_slots, isa, k_scale=ks, v_scale=vs,
                                   kv_cache_dtype=kv_cache_dtype)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=2, num_heads=N, num_kv_heads=NKV, head_dim=H, seq_lens=lens, dtype=dtype,
        query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=False,
        kv_cache_dtype=kv_cache_dtype)
    expect = torch.empty_like(out)
    ops.cpu_attention_with_kv_cache(
        query=q, key_cache=vk, value_cache=vv, output=expect, query_start_loc=qsl, seq_lens=lens,
        scale=0.125, causal=True, alibi_slopes=None, sliding_window=-1, block_table=table,
        softcap=0.0, scheduler_metadata=metadata, s_aux=None, k_scale=ks, v_scale=vs,
        kv_cache_dtype=kv_cache_dtype)
    # bfloat16: outputs up to about 8 (half an ulp 0.016) and P rounded to bfloat16 (p_precision
    # "input", as vLLM's AMX kernel); measured 0.030 at this seed.
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    diff = (out.float() - expect.float()).abs().max().item()
    # The new rows are vLLM's bytes; the float64 reference over the dequantized cache.
    fp8 = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else torch.float8_e4m3fn
    pool_k = pools[:, :, 0].view(fp8)
    pool_v = pools[:, :, 1].view(fp8)
    worst = worst_wrong = worst_vllm = 0.0
    for b in range(2):
        pos = torch.arange(seq_lens[b])
        blocks = torch.tensor(tables[b])[pos // bs]
        keys = pool_k[blocks, :, pos % bs].double() * ks
        values = pool_v[blocks, :, pos % bs].double() * vs
        assert torch.equal(pools[blocks, :, 0, pos % bs],
                           fp8_rows_as_vllm(rows_k[b], ks, kv_cache_dtype).view(torch.uint8))
        rows = slice(0, 1) if b == 0 else slice(1, t)
        for i in range(q_lens[b]):
            p = ctx[b] + i
            want = reference(q[rows][i], keys, values, p, 0.125, None, 0.0, None)
            worst = max(worst, (out[rows][i].double() - want).abs().max().item())
            worst_vllm = max(worst_vllm, (expect[rows][i].double() - want).abs().max().item())
            wrong = reference(q[rows][i], keys, values * 1.1, p, 0.125, None, 0.0, None)
            worst_wrong = max(worst_wrong, (out[rows][i].double() - wrong).abs().max().item())
    print(f"max |error| vs float64: attnrt {worst:.3g}, vLLM {worst_vllm:.3g}, v_scale 10 % off "
          f"{worst_wrong:.3g}; between them {diff:.3g}")
    assert worst <= tol, worst
    # vLLM's bfloat16 (AMX) fp8 kernel rounds the dequantized rows to bfloat16 (measured: up to
    # 3x attnrt's error); the two agree within the sum of their errors.
    assert diff <= worst + max(worst_vllm, tol), diff
    assert worst_wrong > 10 * tol, "a v_scale 10 % off went unnoticed"  # measured 0.87, 0.90


@needs_vllm
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_rows_reach_attnrts_writer_as_vllms_codes(dtype, kv_cache_dtype):
    """The fp8 layer hands attnrt's writer each vLLM code's value times the scale (_vllm_rows),
    which attnrt rounds back to that code: the pools hold fp8_rows_as_vllm's bytes for rows over
    the whole code range (each just below a code's value, so vLLM truncates it to the code before:
    subnormals, the largest codes, signed zeros) at several scales, for e4m3 and e5m2 codes. 2-D
    rows [n, Nkv * H] are taken as 3-D ones."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, fp8_rows_as_vllm

    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, kv_cache_dtype, None)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    # vLLM's writer never stores NaN (nor e5m2's infinities).
    e5m2 = kv_cache_dtype == "fp8_e5m2"
    fp8 = torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn
    codes = codes[(codes & 0x7F) < 0x7C] if e5m2 else codes[(codes & 0x7F) != 0x7F]
    for scale in (1.0, 0.37, 5.0):
        layer = type("Layer", (), {"_k_scale_float": scale, "_v_scale_float": scale})()
        # The codes' values times the scale, nudged toward zero by less than a code's spacing.
        values = codes.view(fp8).float() * scale
        rows = (values * (1 - 2.0**-6)).to(dtype)
        n = 2 * BS
        x = torch.zeros(n * NKV * H)
        x[:rows.numel()] = rows.float()
        x = x.view(n, NKV * H).to(dtype)  # 2-D rows
        kv = torch.zeros(2, NKV, BS, 2 * H, dtype=torch.uint8)
        md = AttnrtMetadata(
            num_actual_tokens=n, max_query_len=n, max_seq_len=n,
            query_start_loc=torch.tensor([0, n], dtype=torch.int32),
            seq_lens=torch.tensor([n], dtype=torch.int32),
            block_table=torch.tensor([[1, 0]], dtype=torch.int32),
            slot_mapping=torch.cat([torch.arange(BS, 2 * BS), torch.arange(BS)]).long())
        impl.forward(layer, torch.zeros(n, N * H, dtype=dtype), x, x, kv, md,
                     torch.empty(n, N * H, dtype=dtype))
        pools = kv.view(2, NKV, 2, BS, H)
        stored = torch.cat([pools[1, :, 0], pools[0, :, 0]], dim=1).transpose(0, 1)  # [n, Nkv, H]
        want = fp8_rows_as_vllm(x.view(n, NKV, H), scale, kv_cache_dtype).view(torch.uint8)
        assert torch.equal(stored, want), (dtype, scale)
        assert torch.equal(torch.cat([pools[1, :, 1], pools[0, :, 1]], 1).transpose(0, 1), want)


@needs_vllm
def test_fp8_layer_checks_before_writing_and_refuses_bad_scales():
    """A wrong slot or a failing step writes nothing into the fp8 cache (the rows go through
    attnrt's writer, after its checks); a k_scale/v_scale that is zero, negative, NaN or infinite
    is refused as vLLM's own fp8 writer refuses it."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, "fp8", None)
    layer = type("Layer", (), {"_k_scale_float": 1.0, "_v_scale_float": 1.0})()
    kv = torch.zeros(4, NKV, BS, 2 * H, dtype=torch.uint8)
    x = torch.randn(2, NKV, H)

    def md(slots, seq_len=2):
        return AttnrtMetadata(
            num_actual_tokens=2, max_query_len=2, max_seq_len=seq_len,
            query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
            seq_lens=torch.tensor([seq_len], dtype=torch.int32),
            block_table=torch.tensor([[2]], dtype=torch.int32),
            slot_mapping=torch.tensor(slots, dtype=torch.int64))

    out = torch.empty(2, N, H)
    for slots, seq_len in (([2 * BS, 3 * BS + 1], 2), ([2 * BS, -2], 2), ([2 * BS, 2 * BS + 1], 1)):
        with pytest.raises(Exception) as e:
            impl.forward(layer, torch.randn(2, N, H), x, x, kv, md(slots, seq_len), out)
        assert "ATTNRT_ERROR_INVALID_ARGUMENT" in str(e.value) or \
            isinstance(e.value, ValueError), e.value
        assert not kv.any(), f"slots {slots}: a failing step wrote into the cache"
    for bad in (0.0, -1.0, math.nan, math.inf):
        wrong = type("Layer", (), {"_k_scale_float": 1.0, "_v_scale_float": bad})()
        with pytest.raises(ValueError, match="v_scale must be a positive finite number"):
            AttnrtImpl(N, H, 0.125, NKV, None, None, "fp8", None).forward(
                wrong, torch.randn(2, N, H), x, x, kv, md([2 * BS, 2 * BS + 1]), out)
    assert not kv.any()


@needs_vllm
def test_encoder_layer_without_key_and_value_is_an_error():
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, AttnrtMetadataBuilder

    qsl = torch.tensor([0, 3], dtype=torch.int32)
    lens = torch.tensor([3], dtype=torch.int32)
    table, pools = AttnrtMetadataBuilder._encoder_pools(_EncoderGroup(BS, torch.float32), qsl, lens)
    md = AttnrtMetadata(num_actual_tokens=3, max_query_len=3, max_seq_len=3, query_start_loc=qsl,
                        seq_lens=lens, block_table=table,
                        slot_mapping=torch.empty(0, dtype=torch.int64), causal=False,
                        encoder_pools=pools)
    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, "auto", None, attn_type="encoder_only")
    with pytest.raises(ValueError, match="needs this step's key and value rows"):
        impl.forward(None, torch.randn(3, N, H), None, None, None, md, torch.empty(3, N, H))


@needs_vllm
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal_hook", [False, True])
def test_impl_cross_attention_matches_vllms_kernel(dtype, causal_hook):
    """ENCODER_DECODER layers (an encoder-decoder model's cross-attention): on a step where two
    requests' encoders ran (their encoder rows, not decoder rows, written into vLLM's cache through
    key_start_loc, in the order of vLLM's cross slot_mapping) beside a request decoding over rows
    cached earlier, then on a decode step with no rows, every decoder query row sees every encoder
    row of its request: against vLLM's own CPU kernel (vLLM's writer into its cache, causal off)
    and a float64 reference. causal_hook: a causal mask must fail the comparison."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, cross_key_start_loc

    class CausalImpl(AttnrtImpl):
        def causal(self, attn_metadata):
            return True

    g = torch.Generator().manual_seed(31)
    print(f"seed 31, dtype {dtype}")
    bs = 16
    isa = _get_attn_isa(dtype, bs, H, "auto")
    cls = CausalImpl if causal_hook else AttnrtImpl
    impl = cls(N, H, 0.125, NKV, None, None, "auto", None, attn_type="encoder_decoder")
    enc = [50, 30, 21]               # encoder lengths (the cross-attention context)
    tables = [[3, 7, 1, 9], [4, 2, -1, -1], [8, 5, -1, -1]]
    num_blocks = 10
    rows_k = [(2 * torch.randn(e, NKV, H, generator=g)).to(dtype) for e in enc]
    rows_v = [(2 * torch.randn(e, NKV, H, generator=g)).to(dtype) for e in enc]
    slot = [[tables[b][p // bs] * bs + p % bs for p in range(enc[b])] for b in range(3)]
    ours = torch.zeros(num_blocks, NKV, bs, 2 * H, dtype=dtype)
    theirs = torch.zeros_like(ours)
    vk, vv = theirs.view(num_blocks, NKV, 2 * bs, H).chunk(2, dim=2)
    pools = ours.view(num_blocks, NKV, 2, bs, H)
    # Request 1's encoder ran on an earlier step: its rows are cached in both caches.
    pos = torch.arange(enc[1])
    blocks = torch.tensor(tables[1])[pos // bs]
    pools[blocks, :, 0, pos % bs] = rows_k[1]
    pools[blocks, :, 1, pos % bs] = rows_v[1]
    ops.cpu_attn_reshape_and_cache(rows_k[1], rows_v[1], vk, vv, torch.tensor(slot[1]), isa)
    table = torch.tensor(tables, dtype=torch.int32)
    lens = torch.tensor(enc, dtype=torch.int32)

    def step(q_lens, writers):
        t = sum(q_lens)
        qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
        q = (3 * torch.randn(t + 2, N, H, generator=g)).to(dtype)  # 2 padding rows
        written = [enc[b] if b in writers else 0 for b in range(3)]
        ksl = cross_key_start_loc(torch.tensor(written).numpy(), 3)
        k = v = None
        slots = torch.empty(0, dtype=torch.int64)
        if writers:
            k = torch.cat([rows_k[b] for b in writers] + [rows_k[0][:3]])  # + padding rows
            v = torch.cat([rows_v[b] for b in writers] + [rows_v[0][:3]])
            slots = torch.tensor([s for b in writers for s in slot[b]], dtype=torch.int64)
        md = AttnrtMetadata(num_actual_tokens=t, max_query_len=max(q_lens),
                            max_seq_len=max(enc), query_start_loc=qsl, seq_lens=lens,
                            block_table=table, slot_mapping=slots, causal=False,
                            key_start_loc=ksl)
        out = torch.full((t + 2, N, H), 7.0, dtype=dtype)
        impl.forward(None, q, k, v, ours, md, out)
        assert torch.all(out[t:] == 7.0), "padding rows were written"
        if writers:
            ops.cpu_attn_reshape_and_cache(k[:int(ksl[-1])], v[:int(ksl[-1])], vk, vv, slots, isa)
        metadata = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=3, num_heads=N, num_kv_heads=NKV, head_dim=H, seq_lens=lens, dtype=dtype,
            query_start_loc=qsl, causal=False, sliding_window_size=-1, isa=isa,
            enable_kv_split=False)
        expect = torch.empty(t, N, H, dtype=dtype)
        ops.cpu_attention_with_kv_cache(
            query=q[:t], key_cache=vk, value_cache=vv, output=expect, query_start_loc=qsl,
            seq_lens=lens, scale=0.125, causal=False, alibi_slopes=None, sliding_window=-1,
            block_table=table, softcap=0.0, scheduler_metadata=metadata, s_aux=None)
        worst = worst_vllm = 0.0
        for b in range(3):
            rows = slice(int(qsl[b]), int(qsl[b + 1]))
            want = encoder_reference(q[rows], rows_k[b], rows_v[b], 0.125)
            worst = max(worst, float((out[rows].double() - want).abs().max()))
            worst_vllm = max(worst_vllm, float((expect[rows].double() - want).abs().max()))
        diff = float((out[:t].float() - expect.float()).abs().max())
        return worst, worst_vllm, diff

    # Step 1: requests 0 and 2 start (4 and 3 decoder prompt tokens over encoders of 50 and 21
    # rows), request 1 decodes. Step 2: all decode, no rows written.
    results = [step([4, 1, 3], [0, 2]), step([1, 1, 1], [])]
    # The cache holds exactly the encoder rows where vLLM's slot_mapping puts them.
    for b in range(3):
        pos = torch.arange(enc[b])
        blocks = torch.tensor(tables[b])[pos // bs]
        assert torch.equal(pools[blocks, :, 0, pos % bs], rows_k[b])
        assert torch.equal(pools[blocks, :, 1, pos % bs], rows_v[b])
    tol = 2e-5 if dtype == torch.float32 else 6e-2
    for i, (worst, worst_vllm, diff) in enumerate(results):
        print(f"max |error| vs float64: attnrt {worst:.3g}, vLLM {worst_vllm:.3g}; between them "
              f"{diff:.3g}")
        if causal_hook:
            # A decode's one row sees every key under a causal mask too: step 1 must show it.
            assert i == 1 or worst > 0.1, f"a causal mask came within {worst} of cross-attention"
            continue
        assert worst <= tol, worst
        assert diff <= worst + max(worst_vllm, tol), diff


@needs_vllm
def test_cross_attention_layer_checks_its_metadata():
    """A cross-attention layer given rows but a metadata without key_start_loc (another group's)
    is an error, not a write by query rows."""
    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    impl = AttnrtImpl(N, H, 0.125, NKV, None, None, "auto", None, attn_type="encoder_decoder")
    kv = torch.zeros(4, NKV, BS, 2 * H)
    md = AttnrtMetadata(num_actual_tokens=1, max_query_len=1, max_seq_len=5,
                        query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
                        seq_lens=torch.tensor([5], dtype=torch.int32),
                        block_table=torch.tensor([[1]], dtype=torch.int32),
                        slot_mapping=torch.arange(16, 21, dtype=torch.int64), causal=False)
    q = torch.randn(1, N, H)
    k = torch.randn(5, NKV, H)
    with pytest.raises(ValueError, match="key_start_loc"):
        impl.forward(None, q, k, k.clone(), kv, md, torch.empty(1, N, H))
    assert not kv.any(), "the cache was written"


@needs_vllm
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_impl_alibi_matches_vllms_kernel(dtype, causal):
    """ALiBi (alibi_slopes: Bloom, MPT, Baichuan-style layers): a decode and an 11-token chunk over
    cached rows, attnrt's layer against vLLM's own CPU kernel given the same slopes (each writing
    its own cache) and a float64 reference with slope_h * (j - i) added to the scores, causal and
    non-causal; slopes given to the wrong heads must fail the comparison."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata

    g = torch.Generator().manual_seed(37)
    print(f"seed 37, dtype {dtype}, causal {causal}")
    bs = 16
    isa = _get_attn_isa(dtype, bs, H, "auto")
    slopes = [2.0 ** (-8 * (h + 1) / N) * 4 for h in range(N)]
    slopes[3] = 0.0
    impl = AttnrtImpl(N, H, 0.125, NKV, slopes, None, "auto", None)
    ctx, q_lens, tables = [45, 20], [1, 11], [[4, 1, 6, 0], [2, 5, -1, -1]]
    seq_lens = [c + q for c, q in zip(ctx, q_lens)]
    num_blocks = 7
    rows_k = [(2 * torch.randn(s, NKV, H, generator=g)).to(dtype) for s in seq_lens]
    rows_v = [(2 * torch.randn(s, NKV, H, generator=g)).to(dtype) for s in seq_lens]
    ours = torch.zeros(num_blocks, NKV, bs, 2 * H, dtype=dtype)
    theirs = torch.zeros_like(ours)
    vk, vv = theirs.view(num_blocks, NKV, 2 * bs, H).chunk(2, dim=2)
    pools = ours.view(num_blocks, NKV, 2, bs, H)
    slot = [[tables[b][p // bs] * bs + p % bs for p in range(seq_lens[b])] for b in range(2)]
    for b in range(2):
        pos = torch.arange(ctx[b])
        blocks = torch.tensor(tables[b])[pos // bs]
        pools[blocks, :, 0, pos % bs] = rows_k[b][:ctx[b]]
        pools[blocks, :, 1, pos % bs] = rows_v[b][:ctx[b]]
        ops.cpu_attn_reshape_and_cache(rows_k[b][:ctx[b]], rows_v[b][:ctx[b]], vk, vv,
                                       torch.tensor(slot[b][:ctx[b]]), isa)
    t = sum(q_lens)
    q = (2 * torch.randn(t, N, H, generator=g)).to(dtype)
    k = torch.cat([rows_k[b][ctx[b]:] for b in range(2)])
    v = torch.cat([rows_v[b][ctx[b]:] for b in range(2)])
    new_slots = torch.tensor([s for b in range(2) for s in slot[b][ctx[b]:]], dtype=torch.int64)
    qsl = torch.tensor([0, q_lens[0], t], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    table = torch.tensor(tables, dtype=torch.int32)
    md = AttnrtMetadata(num_actual_tokens=t, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
                        query_start_loc=qsl, seq_lens=lens, block_table=table,
                        slot_mapping=new_slots, causal=causal)
    out = torch.full((t, N, H), 7.0, dtype=dtype)
    impl.forward(None, q, k, v, ours, md, out)

    ops.cpu_attn_reshape_and_cache(k, v, vk, vv, new_slots, isa)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=2, num_heads=N, num_kv_heads=NKV, head_dim=H, seq_lens=lens, dtype=dtype,
        query_start_loc=qsl, causal=causal, sliding_window_size=-1, isa=isa,
        enable_kv_split=False)
    expect = torch.empty_like(out)
    ops.cpu_attention_with_kv_cache(
        query=q, key_cache=vk, value_cache=vv, output=expect, query_start_loc=qsl, seq_lens=lens,
        scale=0.125, causal=causal, alibi_slopes=torch.tensor(slopes, dtype=torch.float32),
        sliding_window=-1, block_table=table, softcap=0.0, scheduler_metadata=metadata,
        s_aux=None)

    def alibi_reference(qi, keys, values, p, head_slopes):
        group = N // NKV
        last = p + 1 if causal else keys.shape[0]
        o = torch.empty(N, H, dtype=torch.float64)
        j = torch.arange(last, dtype=torch.float64)
        for h in range(N):
            s = keys[:last, h // group].double() @ qi[h].double() * 0.125
            s = s + head_slopes[h] * (j - p)
            o[h] = torch.softmax(s, 0) @ values[:last, h // group].double()
        return o

    worst = worst_vllm = worst_wrong = 0.0
    for b in range(2):
        rows = slice(int(qsl[b]), int(qsl[b + 1]))
        for i in range(q_lens[b]):
            p = ctx[b] + i
            want = alibi_reference(q[rows][i], rows_k[b], rows_v[b], p, slopes)
            worst = max(worst, (out[rows][i].double() - want).abs().max().item())
            worst_vllm = max(worst_vllm, (expect[rows][i].double() - want).abs().max().item())
            wrong = alibi_reference(q[rows][i], rows_k[b], rows_v[b], p, slopes[::-1])
            worst_wrong = max(worst_wrong, (out[rows][i].double() - wrong).abs().max().item())
    diff = (out.float() - expect.float()).abs().max().item()
    print(f"max |error| vs float64: attnrt {worst:.3g}, vLLM {worst_vllm:.3g}, slopes of other "
          f"heads {worst_wrong:.3g}; between them {diff:.3g}")
    tol = 2e-5 if dtype == torch.float32 else 6e-2
    assert worst <= tol, worst
    assert diff <= worst + max(worst_vllm, tol), diff
    assert worst_wrong > 10 * tol, "slopes given to the wrong heads went unnoticed"


@needs_vllm
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_impl_encoder_sliding_window_matches_vllms_kernel(dtype):
    """An ENCODER_ONLY layer with vLLM's sliding window W (ModernBERT-style local layers): every
    row sees the keys within W - 1 positions on either side, against vLLM's own CPU kernel
    (causal off, the same W, over a cache written by vLLM's writer) and a float64 reference; W one
    larger must fail the comparison."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from attnrt._vllm_backend import AttnrtImpl, AttnrtMetadata, AttnrtMetadataBuilder

    g = torch.Generator().manual_seed(41)
    print(f"seed 41, dtype {dtype}")
    w, bs = 6, 16
    isa = _get_attn_isa(dtype, bs, H, "auto")
    lens = [37, 1, 16, 5]
    t = sum(lens)
    qsl = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    table, pools = AttnrtMetadataBuilder._encoder_pools(_EncoderGroup(bs, dtype), qsl, seq_lens)
    md = AttnrtMetadata(num_actual_tokens=t, max_query_len=max(lens), max_seq_len=max(lens),
                        query_start_loc=qsl, seq_lens=seq_lens, block_table=table,
                        slot_mapping=torch.empty(0, dtype=torch.int64), causal=False,
                        encoder_pools=pools)
    impl = AttnrtImpl(N, H, 0.125, NKV, None, w, "auto", None, attn_type="encoder_only")
    q = (2 * torch.randn(t, N, H, generator=g)).to(dtype)
    k = (2 * torch.randn(t, NKV, H, generator=g)).to(dtype)
    v = torch.randn(t, NKV, H, generator=g).to(dtype)
    out = torch.full((t, N, H), 7.0, dtype=dtype)
    impl.forward(None, q, k, v, None, md, out)

    blocks = int(table.max()) + 1
    theirs = torch.zeros(blocks, NKV, 2 * bs, H, dtype=dtype)
    vk, vv = theirs.chunk(2, dim=2)
    slots = torch.tensor([int(table[b][p // bs]) * bs + p % bs for b in range(len(lens))
                          for p in range(lens[b])], dtype=torch.int64)
    ops.cpu_attn_reshape_and_cache(k, v, vk, vv, slots, isa)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(lens), num_heads=N, num_kv_heads=NKV, head_dim=H, seq_lens=seq_lens,
        dtype=dtype, query_start_loc=qsl, causal=False, sliding_window_size=w, isa=isa,
        enable_kv_split=False)
    expect = torch.empty_like(out)
    ops.cpu_attention_with_kv_cache(
        query=q, key_cache=vk, value_cache=vv, output=expect, query_start_loc=qsl,
        seq_lens=seq_lens, scale=0.125, causal=False, alibi_slopes=None, sliding_window=w,
        block_table=table, softcap=0.0, scheduler_metadata=metadata, s_aux=None)

    def windowed(qb, kb, vb, width):
        group = N // NKV
        o = torch.empty(qb.shape[0], N, H, dtype=torch.float64)
        i = torch.arange(qb.shape[0]).reshape(-1, 1)
        j = torch.arange(kb.shape[0]).reshape(1, -1)
        for h in range(N):
            s = (qb[:, h].double() @ kb[:, h // group].double().T) * 0.125
            s = s.masked_fill((i - j).abs() >= width, float("-inf"))
            o[:, h] = torch.softmax(s, -1) @ vb[:, h // group].double()
        return o

    worst = worst_vllm = worst_wrong = 0.0
    for b in range(len(lens)):
        rows = slice(int(qsl[b]), int(qsl[b + 1]))
        want = windowed(q[rows], k[rows], v[rows], w)
        worst = max(worst, float((out[rows].double() - want).abs().max()))
        worst_vllm = max(worst_vllm, float((expect[rows].double() - want).abs().max()))
        wrong = windowed(q[rows], k[rows], v[rows], w + 1)
        worst_wrong = max(worst_wrong, float((out[rows].double() - wrong).abs().max()))
    diff = float((out.float() - expect.float()).abs().max())
    print(f"max |error| vs float64: attnrt {worst:.3g}, vLLM {worst_vllm:.3g}, window W + 1 "
          f"{worst_wrong:.3g}; between them {diff:.3g}")
    tol = 2e-5 if dtype == torch.float32 else 6e-2
    assert worst <= tol, worst
    assert diff <= worst + max(worst_vllm, tol), diff
    assert worst_wrong > 10 * tol, "a window one key wider went unnoticed"
