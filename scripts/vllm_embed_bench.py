#!/usr/bin/env python3
"""Embedding throughput of an encoder-only checkpoint (scripts/make-bert-checkpoint.py) through
vLLM's LLM.embed on CPU, vLLM's own attention against attnrt's, in ONE process.

For each --dtypes entry, two engines live side by side in this process (in-process engine and
worker, VLLM_ENABLE_V1_MULTIPROCESSING=0, eager): the first with vLLM's CPU_ATTN backend, the
second with attnrt's, registered in that slot the way the attnrt plugin does it with ATTNRT_VLLM=1
(attnrt.vllm.register(), then vLLM's attention selector cache cleared so the second model's layers
ask again). Each engine embeds the same batch once to warm up, then --rounds rounds alternate the
two (ABBA order, so drift on a shared machine hits both alike); each call is timed, and so is the
time spent inside the attention layers (each backend's AttentionImpl.forward, wrapped with a clock).
Printed per dtype: the median prompts/s and tokens/s of each backend, the ratio attnrt / vLLM, the
median attention time per call of each and its ratio, the fastest call and attention time of each
(steadier than medians on a shared machine) and their ratio, and the cosine similarity of the two
engines' embeddings (the correctness check proper is scripts/vllm_embed_run.py --compare).
--out writes the figures as JSON. The process must start with ATTNRT_VLLM unset or 0 (the plugin
would otherwise put attnrt in the first engine too); VLLM_CPU_KVCACHE_SPACE defaults to 1 GiB.

Usage: vllm_embed_bench.py MODEL_DIR [--dtypes bfloat16,float32] [--num-prompts 32]
         [--min-prompt-len 128] [--max-prompt-len 512] [--rounds 8] [--seed 0] [--out bench.json]
Run it with the venv of scripts/setup-vllm.sh with attnrt installed (scripts/test-vllm.sh).
"""

import argparse
import functools
import gc
import json
import os
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--min-prompt-len", type=int, default=128)
    p.add_argument("--max-prompt-len", type=int, default=512)
    p.add_argument("--rounds", type=int, default=8, help="timed calls per backend and dtype")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the figures here (JSON)")
    a = p.parse_args(argv)
    a.dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    for d in a.dtypes:
        if d not in ("float32", "bfloat16", "float16"):
            p.error(f"--dtypes: unknown dtype {d!r}")
    if not 1 <= a.min_prompt_len <= a.max_prompt_len:
        p.error("need 1 <= --min-prompt-len <= --max-prompt-len")
    if a.num_prompts < 1 or a.rounds < 1:
        p.error("--num-prompts and --rounds must be at least 1")
    return a


class AttentionClock:
    """Wraps a backend's AttentionImpl.forward (the class's, so every layer) with a clock."""

    def __init__(self, cls):
        self.seconds, self.calls = 0.0, 0
        inner = cls.forward

        @functools.wraps(inner)
        def forward(impl, *args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(impl, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1

        cls.forward = forward

    def take(self):
        s, self.seconds, self.calls = self.seconds, 0.0, 0
        return s


def cosine_min_mean(x, y):
    import numpy as np

    c = []
    for e, f in zip(x, y):
        e, f = np.asarray(e, np.float64), np.asarray(f, np.float64)
        c.append(float(e @ f / (np.linalg.norm(e) * np.linalg.norm(f))))
    return min(c), sum(c) / len(c)


def main(argv):
    a = parse_args(argv)
    if os.environ.get("ATTNRT_VLLM", "").strip() not in ("", "0"):
        raise SystemExit("vllm_embed_bench: start with ATTNRT_VLLM unset or 0 (the first engine of "
                         "each dtype is vLLM's own attention; the script registers attnrt for the "
                         "second)")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from vllm_embed_run import make_prompts

    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    prompts = make_prompts(a.seed, a.num_prompts, a.min_prompt_len, a.max_prompt_len,
                           config["vocab_size"], single_token=False)
    tokens = sum(len(p) for p in prompts)
    t_start = time.perf_counter()
    import torch
    from vllm import LLM
    from vllm.inputs import TokensPrompt
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    import attnrt.vllm
    from attnrt._vllm_backend import AttnrtImpl

    vllm_path = AttentionBackendEnum.CPU_ATTN.get_path()
    clocks = {"vllm": AttentionClock(CPUAttentionBackendImpl), "attnrt": AttentionClock(AttnrtImpl)}
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    print(f"vllm_embed_bench: {a.model}: {len(prompts)} prompts of {a.min_prompt_len}.."
          f"{a.max_prompt_len} tokens, {tokens} tokens per call; {a.rounds} timed calls per backend")

    def use(name):
        if name == "attnrt":
            os.environ["ATTNRT_VLLM"] = "1"
            attnrt.vllm.register()
        else:
            os.environ["ATTNRT_VLLM"] = "0"
            register_backend(AttentionBackendEnum.CPU_ATTN, vllm_path)
        selector._cached_get_attn_backend.cache_clear()

    results = {}
    for dtype in a.dtypes:
        engines, t_init = {}, {}
        for name in ("vllm", "attnrt"):
            use(name)
            t0 = time.perf_counter()
            engines[name] = LLM(model=a.model, runner="pooling", dtype=dtype, enforce_eager=True,
                                seed=a.seed, max_num_seqs=max(len(prompts), 16),
                                max_num_batched_tokens=max(2048, tokens),
                                max_model_len=config["max_position_embeddings"])
            t_init[name] = time.perf_counter() - t0
        use("vllm")
        emb, calls, attn = {}, {"vllm": [], "attnrt": []}, {"vllm": [], "attnrt": []}
        for name in engines:  # warm-up, and the embeddings compared
            emb[name] = [list(map(float, o.outputs.embedding))
                         for o in engines[name].embed(inputs, use_tqdm=False)]
            clocks[name].take()
        order = ["vllm", "attnrt", "attnrt", "vllm"]
        for r in range(2 * a.rounds):
            name = order[r % 4]
            t0 = time.perf_counter()
            engines[name].embed(inputs, use_tqdm=False)
            calls[name].append(time.perf_counter() - t0)
            other = "attnrt" if name == "vllm" else "vllm"
            if clocks[name].calls == 0 or clocks[other].calls:
                raise SystemExit(f"vllm_embed_bench: the {name} engine's call ran "
                                 f"{clocks[name].calls} {name} and {clocks[other].calls} {other} "
                                 f"attention layers: the backends did not go where expected")
            attn[name].append(clocks[name].take())
        row = {"threads": torch.get_num_threads(), "init_s": t_init}
        for name in engines:
            med = statistics.median(calls[name])
            row[name] = {"call_s": calls[name], "attention_s": attn[name],
                         "median_call_s": med, "prompts_per_s": len(prompts) / med,
                         "tokens_per_s": tokens / med,
                         "median_attention_s": statistics.median(attn[name]),
                         "min_call_s": min(calls[name]), "min_attention_s": min(attn[name])}
        row["throughput_ratio_attnrt_over_vllm"] = (row["attnrt"]["tokens_per_s"]
                                                   / row["vllm"]["tokens_per_s"])
        row["attention_time_ratio_attnrt_over_vllm"] = (row["attnrt"]["median_attention_s"]
                                                       / row["vllm"]["median_attention_s"])
        row["min_call_ratio_attnrt_over_vllm"] = (row["attnrt"]["min_call_s"]
                                                 / row["vllm"]["min_call_s"])
        row["min_attention_ratio_attnrt_over_vllm"] = (row["attnrt"]["min_attention_s"]
                                                      / row["vllm"]["min_attention_s"])
        row["cosine_min"], row["cosine_mean"] = cosine_min_mean(emb["vllm"], emb["attnrt"])
        results[dtype] = row
        v, t = row["vllm"], row["attnrt"]
        print(f"{dtype}: vLLM {v['prompts_per_s']:.1f} prompts/s {v['tokens_per_s']:.0f} tokens/s "
              f"(attention {v['median_attention_s'] * 1e3:.0f} ms of {v['median_call_s'] * 1e3:.0f} "
              f"ms a call); attnrt {t['prompts_per_s']:.1f} prompts/s {t['tokens_per_s']:.0f} "
              f"tokens/s (attention {t['median_attention_s'] * 1e3:.0f} ms of "
              f"{t['median_call_s'] * 1e3:.0f} ms); throughput attnrt/vLLM "
              f"{row['throughput_ratio_attnrt_over_vllm']:.3f}, attention time attnrt/vLLM "
              f"{row['attention_time_ratio_attnrt_over_vllm']:.3f}; fastest call "
              f"{v['min_call_s'] * 1e3:.0f} / {t['min_call_s'] * 1e3:.0f} ms (attention "
              f"{v['min_attention_s'] * 1e3:.0f} / {t['min_attention_s'] * 1e3:.0f} ms: ratio "
              f"{row['min_attention_ratio_attnrt_over_vllm']:.3f}); embeddings' cosine min "
              f"{row['cosine_min']:.8f} mean {row['cosine_mean']:.8f}; "
              f"{row['threads']} torch thread(s)")
        # Both engines go before the next dtype's start: the last reference to an engine shuts
        # down the process's vLLM distributed groups, which the next engines would then lack.
        del engines
        gc.collect()
    print(f"vllm_embed_bench: {time.perf_counter() - t_start:.0f} s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": os.path.abspath(a.model), "settings": vars(a), "prompt_tokens": tokens,
                       "results": results}, f, indent=1)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
