"""Test cases: the option-cycling matrix (a pairwise covering design) and real-model presets, and
the ONNX Runtime-named inputs of each case (its semantics, quantized caches and CPU test suites)."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np

# Option cycling of ONNX Runtime's CPU suites (test_gqa_cpu.py) on small shapes.
FACTORS = {
    "phase": ["prompt", "decode", "subsequent", "shared_kv"],
    "B": [1, 3],
    "S": [1, 7, 33],
    "heads": [(4, 2), (6, 3), (8, 8)],
    "H": [16, 64],
    "local": [False, True],
    "rotary": ["none", "half", "interleaved"],  # H % 16 == 0 for both head sizes
    "packed": [False, True],
    "softcap": [0.0, 50.0],
    "softmax": ["plain", "smooth", "sink"],  # head_sink never together with smooth_softmax
    "pos_bias": [(False, False), (True, True), (False, True), (True, False)],
    "qk_output": [0, 1, 2],
    "cache": ["float", "int8/PER_TENSOR", "int8/PER_CHANNEL", "int4/PER_TENSOR",
              "int4/PER_CHANNEL"],
    "dtype": ["float32", "float16"],
}

# The same cycling on the float32 / float-cache path alone, so that it is covered pairwise on its
# own even while the other query and cache types are pending kernel support.
FACTORS_FLOAT32 = {**FACTORS, "cache": ["float"], "dtype": ["float32"]}


def allowed(row: dict) -> bool:
    """Constraints between two factors (enough for any partial row)."""
    phase, S = row.get("phase"), row.get("S")
    if phase in ("decode", "shared_kv") and S not in (None, 1):
        return False
    if phase == "subsequent" and (S == 1 or row.get("B") == 3):  # chunked prefill: B=1, S>1
        return False
    if phase == "shared_kv" and row.get("packed"):  # packed QKV always brings L == S new rows
        return False
    return True


def covering_design(factors=FACTORS, seed=0, tries=40) -> list[dict]:
    """Deterministic greedy (AETG-style) set of rows covering every allowed pair of values."""
    names, rnd = list(factors), random.Random(seed)
    uncovered = {((a, va), (b, vb))
                 for a, b in itertools.combinations(names, 2)
                 for va in factors[a] for vb in factors[b] if allowed({a: va, b: vb})}

    def gain(row, name, value):
        return sum(((n, row[n]), (name, value)) in uncovered or ((name, value), (n, row[n]))
                   in uncovered for n in row)

    rows = []
    while uncovered:
        best, best_gain = None, -1
        for _ in range(tries):
            (a, va), (b, vb) = rnd.choice(sorted(uncovered, key=str))
            row = {a: va, b: vb}
            for name in rnd.sample(names, len(names)):
                if name in row:
                    continue
                options = [v for v in factors[name] if allowed({**row, name: v})]
                rnd.shuffle(options)
                row[name] = max(options, key=lambda v: gain(row, name, v))
            pairs = {p for p in itertools.combinations(((n, row[n]) for n in names), 2)}
            if len(pairs & uncovered) > best_gain:
                best, best_gain = row, len(pairs & uncovered)
        uncovered -= set(itertools.combinations(((n, best[n]) for n in names), 2))
        rows.append(best)
    return rows


def case_id(prefix: str, i: int, r: dict) -> str:
    n, nkv = r["heads"]
    parts = [f"{prefix}{i:02d}", r["phase"], f"B{r['B']}S{r['S']}", f"{n}x{nkv}x{r['H']}",
             "local" if r["local"] else "", "" if r["rotary"] == "none" else f"rot-{r['rotary']}",
             "packed" if r["packed"] else "", "cap50" if r["softcap"] else "",
             "" if r["softmax"] == "plain" else r["softmax"],
             "pos" if r["pos_bias"][0] else "", "bias" if r["pos_bias"][1] else "",
             f"qk{r['qk_output']}" if r["qk_output"] else "", r["cache"].replace("/PER_", "-"),
             r["dtype"]]
    return "-".join(p for p in parts if p)


# Real model attention layers (float32): heads, kv heads, head size, RoPE theta, options.
MODELS = {
    "llama-3-8b": dict(N=32, Nkv=8, H=128, theta=500000.0),
    "qwen2.5-7b": dict(N=28, Nkv=4, H=128, theta=1000000.0),
    "mistral-7b": dict(N=32, Nkv=8, H=128, theta=10000.0, window=4096),
    "gemma-2-9b": dict(N=16, Nkv=8, H=256, theta=10000.0, softcap=50.0, window=4096),
    "phi-3-mini": dict(N=32, Nkv=32, H=96, theta=10000.0),
    "gpt-oss-20b": dict(N=64, Nkv=8, H=64, theta=150000.0, head_sink=True, window=128),
}


@dataclass
class Case:
    """One GQA call: attributes, feeds, and what the comparison needs."""
    attrs: dict
    feeds: dict
    valid: np.ndarray  # T_b per batch
    dtype: np.dtype
    quant_bits: int = 0
    path_dependent_rows: bool = False  # padded rows whose values depend on ORT's path (window)


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def quant_scales(x: np.ndarray, mode: str, qmax: int, Nkv: int, H: int) -> np.ndarray:
    """amax/127 (int8) or amax/7 (int4), per tensor or per channel of the Nkv·H channels."""
    x = np.abs(x.astype(np.float32)).reshape(-1, Nkv * H)
    amax = x.max(axis=0) if mode == "PER_CHANNEL" else np.array([x.max()], np.float32)
    return np.maximum(amax, 1e-3).astype(np.float32) / np.float32(qmax)


def rope_caches(rng, M, H, dtype, theta=None):
    """cos/sin caches (M, H/2): random angles (as ORT's suites), or a model's RoPE frequencies."""
    if theta is None:
        angles = rng.uniform(0, 2 * np.pi, (M, H // 2))
    else:
        angles = np.outer(np.arange(M), theta ** (-np.arange(0, H, 2) / H))
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def build_cycling_case(r: dict, rng) -> Case:
    dtype = np.dtype(r["dtype"])
    phase, B, S, H = r["phase"], r["B"], r["S"], r["H"]
    N, Nkv = r["heads"]
    bits, qmode = (0, "NONE") if r["cache"] == "float" else (int(r["cache"][3]), r["cache"][5:])
    Hc = H // 2 if bits == 4 else H
    L = 0 if phase == "shared_kv" else S

    # Lengths per phase (ORT's phases); P is the past buffer length, P_b the rows used per batch.
    if phase == "prompt":  # first prompt, right padding for B > 1
        P, T = 0, S
        valid = np.array([S] + list(rng.integers(1, S + 1, B - 1)))
    elif phase == "decode":  # ragged past rows [1, P]; rows past P_b are never read
        P = int(rng.integers(8, 48))
        T, valid = P + 1, rng.integers(1, P + 1, B) + 1
    elif phase == "subsequent":  # chunked prefill, B = 1
        P = int(rng.integers(8, 48))
        T, valid = P + S, np.array([int(rng.integers(1, P + 1)) + S])
    else:  # shared KV (L = 0): the past already holds every key
        P = int(rng.integers(8, 48))
        valid = rng.integers(1, P + 1, B)
        T = int(valid.max())

    attrs = {"num_heads": N, "kv_num_heads": Nkv}
    q_scale = 2.0 if r["softcap"] else 1.0  # scores up to ~10, so that the softcap matters
    q = randn(rng, (B, S, N * H), dtype, q_scale)
    k, v = randn(rng, (B, L, Nkv * H), dtype), randn(rng, (B, L, Nkv * H), dtype)
    feeds = {"query": np.concatenate([q, k, v], axis=2) if r["packed"] else q}
    if not r["packed"]:
        feeds.update(key=k, value=v)

    if bits:
        qmax = 127 if bits == 8 else 7
        attrs.update(k_quant_type=qmode, v_quant_type=qmode, kv_cache_bit_width=bits)
        sample_k = k if L else randn(rng, (B, 4, Nkv * H), np.float32)
        sample_v = v if L else randn(rng, (B, 4, Nkv * H), np.float32)
        feeds["k_scale"] = quant_scales(sample_k, qmode, qmax, Nkv, H)
        feeds["v_scale"] = quant_scales(sample_v, qmode, qmax, Nkv, H)
        cache_dtype = np.int8 if bits == 8 else np.uint8
        lo, hi = (-128, 128) if bits == 8 else (0, 256)
        for name in ("past_key", "past_value"):  # any bytes are a valid cache; zero-length ok
            feeds[name] = rng.integers(lo, hi, (B, Nkv, P, Hc)).astype(cache_dtype)
    elif phase != "prompt":
        feeds["past_key"] = randn(rng, (B, Nkv, P, H), dtype)
        feeds["past_value"] = randn(rng, (B, Nkv, P, H), dtype)

    feeds["seqlens_k"] = (valid - 1).astype(np.int32)
    feeds["total_sequence_length"] = np.array([T], np.int32)

    M = T + 16  # rotary cache rows
    if r["rotary"] != "none":
        attrs["do_rotary"] = 1
        attrs["rotary_interleaved"] = int(r["rotary"] == "interleaved")
        feeds["cos_cache"], feeds["sin_cache"] = rope_caches(rng, M, H, dtype)
    use_pos, use_bias = r["pos_bias"]
    if use_pos:  # first prompt: only position_ids.flat[0] counts, pos0 in [0, M-S] (ORT's RoPE)
        if phase == "prompt":
            feeds["position_ids"] = np.tile(np.arange(S) + rng.integers(0, M - S + 1), (B, 1))
        else:
            feeds["position_ids"] = rng.integers(0, M, (B, S))
        feeds["position_ids"] = feeds["position_ids"].astype(np.int64)
    if use_bias:  # every broadcast form of (B|1, N|1, S, T)
        shape = (B if rng.integers(2) else 1, N if rng.integers(2) else 1, S, T)
        feeds["attention_bias"] = randn(rng, shape, dtype)
    if r["softmax"] == "smooth":
        attrs["smooth_softmax"] = 1
    elif r["softmax"] == "sink":
        feeds["head_sink"] = randn(rng, (N,), dtype)
    if r["softcap"]:
        attrs["softcap"] = r["softcap"]
    if r["qk_output"]:
        attrs["qk_output"] = r["qk_output"]

    if r["local"]:
        attrs["local_window_size"] = int(rng.integers(1, T + 1))
    return Case(attrs, feeds, valid, dtype, bits, _path_dependent(attrs, valid, S, phase))


def _path_dependent(attrs: dict, valid, S: int, phase: str) -> bool:
    """Padded query rows (s >= T_b) of a first prompt with a window W < S: ORT's flash path and
    its naive path give them different values (docs/gqa-semantics.md; both agree when W >= S)."""
    W = attrs.get("local_window_size", -1)
    return phase == "prompt" and 0 <= W < S and bool((valid < S).any())


def ort_uses_flash(case: Case) -> bool:
    """Whether ONNX Runtime's CPU EP takes its flash path for `case`: float32 queries or
    quantized caches, T > 1, no softcap, smooth softmax, head_sink or output_qk."""
    a = case.attrs
    return ((case.dtype == np.float32 or case.quant_bits > 0)
            and int(case.feeds["total_sequence_length"][0]) > 1 and a.get("softcap", 0) <= 0
            and a.get("smooth_softmax", 0) != 1 and "head_sink" not in case.feeds
            and not a.get("qk_output", 0))


def build_model_prompt(model: str, B: int, rng, S: int = 512) -> Case:
    m = MODELS[model]
    N, Nkv, H = m["N"], m["Nkv"], m["H"]
    valid = np.array([S] + list(rng.integers(1, S + 1, B - 1)))  # ragged, right-padded
    feeds = {"query": randn(rng, (B, S, N * H), np.float32),
             "key": randn(rng, (B, S, Nkv * H), np.float32),
             "value": randn(rng, (B, S, Nkv * H), np.float32),
             "seqlens_k": (valid - 1).astype(np.int32),
             "total_sequence_length": np.array([S], np.int32)}
    attrs = _model_attrs(m, rng, feeds, S + 16)
    return Case(attrs, feeds, valid, np.dtype(np.float32),
                path_dependent_rows=_path_dependent(attrs, valid, S, "prompt"))


def model_decode_feeds(model: str, past_valid: np.ndarray, past_k, past_v, rng) -> Case:
    """One decode step: past rows [0, P_b) of (B, Nkv, P, H) caches, one new token per batch."""
    m = MODELS[model]
    B, P = len(past_valid), past_k.shape[2]
    feeds = {"query": randn(rng, (B, 1, m["N"] * m["H"]), np.float32),
             "key": randn(rng, (B, 1, m["Nkv"] * m["H"]), np.float32),
             "value": randn(rng, (B, 1, m["Nkv"] * m["H"]), np.float32),
             "past_key": past_k, "past_value": past_v,
             "seqlens_k": past_valid.astype(np.int32),
             "total_sequence_length": np.array([P + 1], np.int32)}
    attrs = _model_attrs(m, rng, feeds, 4096 + 64)
    return Case(attrs, feeds, past_valid + 1, np.dtype(np.float32))


def _model_attrs(m: dict, rng, feeds: dict, M: int) -> dict:
    attrs = {"num_heads": m["N"], "kv_num_heads": m["Nkv"], "do_rotary": 1}
    feeds["cos_cache"], feeds["sin_cache"] = rope_caches(rng, M, m["H"], np.float32, m["theta"])
    if "window" in m:
        attrs["local_window_size"] = m["window"]
    if "softcap" in m:
        attrs["softcap"] = m["softcap"]
    if m.get("head_sink"):
        feeds["head_sink"] = randn(rng, (m["N"],), np.float32)
    return attrs
