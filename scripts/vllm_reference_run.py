#!/usr/bin/env python3
"""Runs a local checkpoint through vLLM on CPU and records what the model computed.

Seeded token-id prompts of mixed lengths (no tokenizer), float32, chunked prefill with a small
token budget so long prompts are prefilled in several chunks that attend to cached keys. For
each prompt: the log-probability of every prompt token (prompt_logprobs=0; position 0 has
none) and N greedy tokens with their log-probabilities. Unless --no-perturb, one more prompt
is the longest one with a single early token changed: tokens only interact through
attention, so how much the far positions move tells whether attention is close to uniform.

The results go to --out as JSON; --compare OTHER.json prints the largest differences to a
previous run (e.g. vLLM's own CPU attention against another attention backend). Timings and the
peak resident memory of the process tree (the engine and worker processes included) are printed.

Usage: vllm_reference_run.py MODEL_DIR [--out run.json] [--compare ref.json] [--seed 0]
         [--num-prompts 8] [--max-prompt-len 2048] [--gen-tokens 64] [--max-batched-tokens 512]
         [--tp 1] [--dtype float32] [--compile] [--in-process [--cpu-attention-class MODULE.CLASS]]
Run it with the venv of scripts/setup-vllm.sh. VLLM_CPU_KVCACHE_SPACE (GiB) defaults to 1.
"""

import argparse
import json
import math
import os
import sys
import threading
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model")
    p.add_argument("--out", default=None, help="write the results here (JSON)")
    p.add_argument("--compare", default=None, help="a previous --out file to compare with")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--min-prompt-len", type=int, default=16)
    p.add_argument("--max-prompt-len", type=int, default=2048)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--max-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=None, help="KV cache block size (vLLM's CPU default: 128)")
    p.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="model dtype")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help="vLLM's kv_cache_dtype (auto: the model dtype; fp8: float8 e4m3fn)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="engine and worker in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): starts faster; "
        "tensor parallelism needs worker processes",
    )
    p.add_argument(
        "--cpu-attention-class",
        default=None,
        metavar="MODULE.CLASS",
        help="with --in-process: register this class in place of vLLM's CPU_ATTN backend "
        "(worker processes get a backend only through a vllm.general_plugins entry point)",
    )
    p.add_argument("--no-perturb", dest="perturb", action="store_false")
    p.add_argument("--tolerance", type=float, default=None, help="with --compare: fail above this")
    p.add_argument("--greedy-alternative", default=None,
                   help="with --compare: another --out file of the reference (e.g. its run on "
                        "inputs one ulp apart); a prompt whose greedy tokens differ from "
                        "--compare's passes when they equal this one's (a tie within the "
                        "reference's own spread)")
    a = p.parse_args(argv)
    if not 1 <= a.min_prompt_len <= a.max_prompt_len:
        p.error(f"need 1 <= --min-prompt-len ({a.min_prompt_len}) <= --max-prompt-len ({a.max_prompt_len})")
    if a.cpu_attention_class and not a.in_process:
        p.error("--cpu-attention-class needs --in-process (other processes load backends through plugins)")
    if a.num_prompts < 1:
        p.error(f"--num-prompts must be at least 1, got {a.num_prompts}")
    return a


def make_prompts(seed, n, min_len, max_len, vocab):
    """n token-id prompts; lengths spread over [min_len, max_len], the extremes included."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    lengths[0] = max_len
    if n > 1:
        lengths[1] = min_len
    # Ids 0..2 are pad/bos/eos in the checkpoint's config: prompts use the others.
    return [rng.integers(3, vocab, size=int(m)).tolist() for m in lengths]


class PeakRss:
    """Samples the resident memory of this process and its descendants."""

    def __init__(self, interval=0.2):
        import psutil

        self.proc, self.peak, self.interval = psutil.Process(), 0, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self):
        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except Exception:
                pass
        self.peak = max(self.peak, total)
        return total

    def _run(self):
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def logprob_of(entry, token):
    """entry: dict token_id -> Logprob (vLLM) for one position."""
    if entry is None:
        return None
    return float(entry[token].logprob)


def summarize(values):
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "max": float(v.max())}


def run(a):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if a.in_process:
        if a.tp > 1:
            raise SystemExit(f"--in-process runs one worker; --tp {a.tp} needs worker processes")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    prompts = make_prompts(a.seed, a.num_prompts, a.min_prompt_len, a.max_prompt_len, vocab)
    names = [f"p{i}" for i in range(len(prompts))]
    if a.perturb:
        longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
        changed = list(prompts[longest])
        pos = min(4, len(changed) - 1)
        changed[pos] = 3 + (changed[pos] - 3 + vocab // 2) % (vocab - 3)
        prompts.append(changed)
        names.append(f"p{longest}-perturbed@{pos}")

    mem = PeakRss()
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    if a.cpu_attention_class:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

        register_backend(AttentionBackendEnum.CPU_ATTN, a.cpu_attention_class)
    t_import = time.perf_counter() - t0
    llm_kwargs = dict(
        model=a.model,
        dtype=a.dtype,
        skip_tokenizer_init=True,
        enable_chunked_prefill=True,
        max_num_batched_tokens=a.max_batched_tokens,
        max_model_len=max(a.max_prompt_len + a.gen_tokens, a.max_batched_tokens),
        max_num_seqs=len(prompts),
        tensor_parallel_size=a.tp,
        enforce_eager=not a.compile,
        seed=a.seed,
        enable_prefix_caching=False,
    )
    if a.block_size:
        llm_kwargs["block_size"] = a.block_size
    if a.kv_cache_dtype != "auto":
        llm_kwargs["kv_cache_dtype"] = a.kv_cache_dtype
    llm = LLM(**llm_kwargs)
    t_init = time.perf_counter() - t0 - t_import
    rss_after_init = mem.sample()

    params = SamplingParams(
        temperature=0.0,
        max_tokens=a.gen_tokens,
        ignore_eos=True,
        logprobs=1,
        prompt_logprobs=0,
        detokenize=False,
    )
    t1 = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    t_gen = time.perf_counter() - t1
    peak = mem.stop()

    results = []
    for name, prompt, out in zip(names, prompts, outputs):
        plp = [logprob_of(e, t) for e, t in zip(out.prompt_logprobs, prompt)]
        comp = out.outputs[0]
        gen_ids = list(comp.token_ids)
        glp = [logprob_of(e, t) for e, t in zip(comp.logprobs, gen_ids)]
        results.append(
            {"name": name, "prompt_len": len(prompt), "prompt_logprobs": plp, "gen_ids": gen_ids, "gen_logprobs": glp}
        )

    total_prompt = sum(len(p) for p in prompts)
    report = {
        "model": os.path.abspath(a.model),
        "settings": {k: v for k, v in vars(a).items()
                     if k not in ("out", "compare", "tolerance", "greedy_alternative")},
        "vocab": vocab,
        "timing_s": {"import": t_import, "init": t_init, "generate": t_gen},
        "memory": {"rss_after_init_gib": rss_after_init / 2**30, "peak_rss_gib": peak / 2**30},
        "prompt_tokens": total_prompt,
        "results": results,
    }
    print_report(report)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f)
        print(f"wrote {a.out}")
    return report


def print_report(r):
    t, m = r["timing_s"], r["memory"]
    n = len(r["results"])
    gen = sum(len(x["gen_ids"]) for x in r["results"])
    print(f"prompts: {n}, lengths {[x['prompt_len'] for x in r['results']]}, {r['prompt_tokens']} prompt tokens")
    print(
        f"time: import {t['import']:.1f} s, engine init {t['init']:.1f} s, generate {t['generate']:.1f} s "
        f"for {r['prompt_tokens']} prompt and {gen} generated tokens"
    )
    print(f"memory: {m['rss_after_init_gib']:.2f} GiB after init, peak {m['peak_rss_gib']:.2f} GiB (process tree RSS)")
    plp = [v for x in r["results"] for v in x["prompt_logprobs"] if v is not None]
    glp = [v for x in r["results"] for v in x["gen_logprobs"]]
    uniform = -math.log(r["vocab"])
    s = summarize(plp)
    print(
        f"prompt logprobs: mean {s['mean']:.3f} std {s['std']:.3f} min {s['min']:.3f} max {s['max']:.3f} "
        f"(uniform over the vocabulary: {uniform:.3f})"
    )
    g = summarize(glp)
    print(f"greedy token logprobs: mean {g['mean']:.3f} min {g['min']:.3f} max {g['max']:.3f}")
    pert = [x for x in r["results"] if "-perturbed@" in x["name"]]
    if pert:
        x = pert[0]
        base = next(y for y in r["results"] if y["name"] == x["name"].split("-perturbed@")[0])
        pos = int(x["name"].split("@")[1])
        d = [abs(p - q) for p, q in zip(base["prompt_logprobs"][pos + 1 :], x["prompt_logprobs"][pos + 1 :])]
        far = d[len(d) // 2 :]
        print(
            f"one token changed at position {pos} of {base['name']} moves later prompt logprobs by: "
            f"max {max(d):.4f}, mean {sum(d) / len(d):.5f}; in the second half: max {max(far):.4f}, "
            f"mean {sum(far) / len(far):.5f}; greedy tokens equal: {base['gen_ids'] == x['gen_ids']}"
        )


def compare(report, other_path, tolerance, alternative_path=None):
    with open(other_path) as f:
        other = json.load(f)
    alternative = None
    if alternative_path is not None:
        with open(alternative_path) as f:
            alternative = {r["name"]: r["gen_ids"] for r in json.load(f)["results"]}
    worst, mismatched, tied = 0.0, [], []
    for x, y in zip(report["results"], other["results"]):
        if x["prompt_len"] != y["prompt_len"]:
            raise SystemExit(f"compare: {x['name']} has {x['prompt_len']} prompt tokens here, {y['prompt_len']} there")
        for p, q in zip(x["prompt_logprobs"], y["prompt_logprobs"]):
            if p is not None and q is not None:
                worst = max(worst, abs(p - q))
        if x["gen_ids"] != y["gen_ids"]:
            first = next(i for i, (u, v) in enumerate(zip(x["gen_ids"], y["gen_ids"])) if u != v)
            if alternative is not None and alternative.get(x["name"]) == x["gen_ids"]:
                tied.append(f"{x['name']} (from token {first})")
            else:
                mismatched.append(f"{x['name']} (from token {first})")
    print(f"compare with {other_path}: max |prompt logprob difference| {worst:.3g}; "
          f"greedy tokens differ in {mismatched if mismatched else 'no prompt'}"
          + (f"; equal to {alternative_path}'s in {tied}" if tied else ""))
    if tolerance is not None and (worst > tolerance or mismatched):
        return 1
    return 0


def main(argv):
    a = parse_args(argv)
    report = run(a)
    if a.compare:
        return compare(report, a.compare, a.tolerance, a.greedy_alternative)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
