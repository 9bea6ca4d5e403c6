#!/usr/bin/env python3
"""Runs a DeepSeek-V4 checkpoint (e.g. scripts/make-deepseek-v4-checkpoint.py's) through vLLM 0.32
on CPU, in this process, and records what the model computed and where the time went.

Token-id prompts of the lengths given by --prompt-lens (seeded, no tokenizer), bfloat16, N
greedy tokens each; prompt logprobs and greedy tokens go to --out in the JSON format of
scripts/vllm_reference_run.py (whose --compare reading this reuses). vLLM runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) with attnrt._vllm_deepseek_v4_support.apply() called first
(the package's vllm.general_plugins entry point calls it too when attnrt is installed in the
venv), so the worker's kernels can be timed: each call of the DeepSeek-V4 CPU kernels named in
TIMED_OPS (attnrt's replacement of the attention call included) is wrapped with a timer and the totals are printed and stored under "op_time_s".

--chunked-prefill sets ATTNRT_VLLM_DSV4_CHUNKED_PREFILL=1: on CPUs without AMX tiles vLLM 0.32
turns chunked prefill and prefix caching off for DeepSeek-V4; this keeps what is asked for
(--max-batched-tokens, --prefix-caching).

Usage: vllm_deepseek_v4_run.py MODEL_DIR [--prompt-lens 3000] [--gen-tokens 16] [--out run.json]
         [--compare other.json] [--chunked-prefill --max-batched-tokens 1024 [--prefix-caching]]
Run it with the venv of scripts/setup-vllm.sh (PYTHONPATH=build/python for an uninstalled attnrt).
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_reference_run as ref  # noqa: E402

# (module, attribute) of the kernels to time: the C4A indexer (query quantization, logits,
# top-512), the attention kernel, the compressors and the KV inserts.
TIMED_OPS = [
    ("vllm._custom_ops", "fused_indexer_q_rope_quant_cpu"),
    ("vllm._custom_ops", "fp8_paged_mqa_logits_cpu"),
    ("vllm._custom_ops", "topk_transform_512_cpu"),
    ("torch.ops._C", "flash_mla_with_kvcache_cpu"),
    # attnrt's replacement of that call (ATTNRT_VLLM=1; the route looks it up at every call).
    ("attnrt._vllm_deepseek_v4", "flash_mla_with_kvcache"),
    ("vllm._custom_ops", "fused_qnorm_rope_kv_insert_cpu"),
    ("vllm.models.deepseek_v4.cpu.cpu_compressor", "save_partial_states_cpu"),
    ("vllm.models.deepseek_v4.cpu.cpu_compressor", "compress_norm_rope_store_cpu"),
    ("vllm.models.deepseek_v4.cpu.cpu_compressor", "compress_norm_rope_store_indexer_cpu"),
]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model")
    p.add_argument("--out", default=None, help="write the results here (JSON)")
    p.add_argument("--compare", default=None, help="a previous --out file to compare with")
    p.add_argument("--tolerance", type=float, default=None, help="with --compare: fail above this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-lens", default="3000", help="comma-separated prompt lengths")
    p.add_argument("--gen-tokens", type=int, default=16)
    p.add_argument("--max-batched-tokens", type=int, default=1024,
                   help="token budget per step (without --chunked-prefill: at least max_model_len)")
    p.add_argument("--chunked-prefill", action="store_true",
                   help="keep chunked prefill on CPUs without AMX (ATTNRT_VLLM_DSV4_CHUNKED_PREFILL=1)")
    p.add_argument("--prefix-caching", action="store_true", help="enable_prefix_caching")
    p.add_argument("--repeat", action="store_true",
                   help="generate the same prompts again (no prompt logprobs, so the prefix cache "
                        "is read) and compare the greedy tokens and their logprobs")
    p.add_argument("--no-timers", dest="timers", action="store_false")
    a = p.parse_args(argv)
    try:
        a.lens = [int(x) for x in a.prompt_lens.split(",")]
    except ValueError:
        p.error(f"--prompt-lens: expected comma-separated integers, got {a.prompt_lens!r}")
    if not a.lens or min(a.lens) < 1:
        p.error(f"--prompt-lens: each length must be at least 1, got {a.prompt_lens!r}")
    return a


def load_support():
    try:
        from attnrt import _vllm_deepseek_v4_support as support
    except ImportError:  # attnrt's library not built: the module itself needs only torch
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python",
                            "attnrt", "_vllm_deepseek_v4_support.py")
        spec = importlib.util.spec_from_file_location("attnrt_vllm_deepseek_v4_support", path)
        support = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(support)
    return support


class OpTimers:
    """Wraps module-level kernel entry points with wall-clock timers (this process only)."""

    def __init__(self):
        self.seconds, self.calls = defaultdict(float), defaultdict(int)

    def install(self):
        import importlib

        import torch

        for module_name, name in TIMED_OPS:
            owner = torch.ops._C if module_name == "torch.ops._C" else importlib.import_module(module_name)
            fn = getattr(owner, name, None)
            if fn is None:
                continue
            setattr(owner, name, self._wrap(name, fn))

        from vllm.models.deepseek_v4.cpu.model import DeepseekV4ForCausalLM

        DeepseekV4ForCausalLM.forward = self._wrap("model forward (all layers)",
                                                   DeepseekV4ForCausalLM.forward)

    def _wrap(self, name, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                key = name
                if name.startswith("flash_mla_with_kvcache"):
                    key = f"{name} [{layer_kind(args)}]"
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1

        return timed

    def reset(self):
        self.seconds.clear()
        self.calls.clear()

    def report(self):
        return {n: {"seconds": self.seconds[n], "calls": self.calls[n]} for n in self.seconds}


def layer_kind(args):
    """flash_mla_with_kvcache_cpu(output, q, window_cache, window_slots, window_block_size,
    compressed_cache, compressed_slots, ...): no compressed slots on SWA layers, index_topk
    (512) of them on C4A layers, ceil(max_model_len / 128) on C128A layers."""
    width = args[6].shape[-1] if len(args) > 6 else -1
    return "SWA" if width == 0 else ("C4A" if width == 512 else "C128A")


def make_prompts(seed, lens, vocab):
    import numpy as np

    rng = np.random.default_rng(seed)
    # Ids 0..2 are pad/bos/eos in the checkpoint's config: prompts use the others.
    return [rng.integers(3, vocab, size=n).tolist() for n in lens]


def run(a):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if a.chunked_prefill:
        os.environ["ATTNRT_VLLM_DSV4_CHUNKED_PREFILL"] = "1"
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    prompts = make_prompts(a.seed, a.lens, vocab)

    mem = ref.PeakRss()
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    fixes = load_support().apply()  # after importing vLLM: apply() acts in vLLM processes only

    timers = OpTimers()
    if a.timers:
        timers.install()
    t_import = time.perf_counter() - t0
    max_model_len = max(a.lens) + a.gen_tokens
    llm = LLM(
        model=a.model,
        dtype="bfloat16",
        skip_tokenizer_init=True,
        enable_chunked_prefill=a.chunked_prefill,
        # Without chunked prefill a whole prompt is one step.
        max_num_batched_tokens=(a.max_batched_tokens if a.chunked_prefill
                                else max(a.max_batched_tokens, max_model_len)),
        max_model_len=max_model_len,
        max_num_seqs=len(prompts),
        enforce_eager=True,
        seed=a.seed,
        enable_prefix_caching=a.prefix_caching,
    )
    t_init = time.perf_counter() - t0 - t_import
    sched = llm.llm_engine.vllm_config.scheduler_config
    cache = llm.llm_engine.vllm_config.cache_config
    effective = {"chunked_prefill": sched.enable_chunked_prefill,
                 "prefix_caching": cache.enable_prefix_caching,
                 "max_num_batched_tokens": sched.max_num_batched_tokens,
                 "block_size": cache.block_size}
    rss_after_init = mem.sample()
    timers.reset()

    params = SamplingParams(temperature=0.0, max_tokens=a.gen_tokens, ignore_eos=True, logprobs=1,
                            prompt_logprobs=0, detokenize=False)
    t1 = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                           use_tqdm=False)
    t_gen = time.perf_counter() - t1
    op_times = timers.report()

    results = []
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        plp = [ref.logprob_of(e, t) for e, t in zip(out.prompt_logprobs, prompt)]
        comp = out.outputs[0]
        gen_ids = list(comp.token_ids)
        glp = [ref.logprob_of(e, t) for e, t in zip(comp.logprobs, gen_ids)]
        results.append({"name": f"p{i}", "prompt_len": len(prompt), "prompt_logprobs": plp,
                        "gen_ids": gen_ids, "gen_logprobs": glp})
    repeat = None
    if a.repeat:
        again = SamplingParams(temperature=0.0, max_tokens=a.gen_tokens, ignore_eos=True,
                               logprobs=1, detokenize=False)
        t2 = time.perf_counter()
        outputs2 = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], again,
                                use_tqdm=False)
        t_again = time.perf_counter() - t2
        worst, same = 0.0, True
        for x, out in zip(results, outputs2):
            comp = out.outputs[0]
            same = same and list(comp.token_ids) == x["gen_ids"]
            for v, e, t in zip(x["gen_logprobs"], comp.logprobs, comp.token_ids):
                worst = max(worst, abs(v - ref.logprob_of(e, t)))
        repeat = {"generate_s": t_again, "cached_tokens": [o.num_cached_tokens for o in outputs2],
                  "same_tokens": same, "max_gen_logprob_diff": worst}
        print(f"repeat: {t_again:.1f} s, prefix cache hits {repeat['cached_tokens']} tokens, "
              f"greedy tokens equal: {same}, max |greedy logprob difference| {worst:.3g}")
    peak = mem.stop()
    report = {
        "model": os.path.abspath(a.model),
        "repeat": repeat,
        "settings": {k: v for k, v in vars(a).items() if k not in ("out", "compare", "tolerance")},
        "effective": effective,
        "fixes": fixes,
        "vocab": vocab,
        "timing_s": {"import": t_import, "init": t_init, "generate": t_gen},
        "op_time_s": op_times,
        "memory": {"rss_after_init_gib": rss_after_init / 2**30, "peak_rss_gib": peak / 2**30},
        "prompt_tokens": sum(len(p) for p in prompts),
        "results": results,
    }
    print(f"vLLM settings in effect: {effective}; fixes applied here: {len(fixes)}")
    ref.print_report(report)
    print_op_times(report)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f)
        print(f"wrote {a.out}")
    return report


def print_op_times(r):
    ops, total = r["op_time_s"], r["timing_s"]["generate"]
    if not ops:
        return
    indexer = sum(ops.get(n, {}).get("seconds", 0.0) for n in
                  ("fused_indexer_q_rope_quant_cpu", "fp8_paged_mqa_logits_cpu", "topk_transform_512_cpu"))
    attn = sum(v["seconds"] for n, v in ops.items() if n.startswith("flash_mla_with_kvcache"))
    for name, v in sorted(ops.items(), key=lambda kv: -kv[1]["seconds"]):
        print(f"  {name}: {v['seconds']:.3f} s in {v['calls']} calls ({100 * v['seconds'] / total:.1f}% of generate)")
    print(f"C4A indexer kernels {indexer:.3f} s ({100 * indexer / total:.1f}%), sparse attention "
          f"(flash_mla_with_kvcache_cpu or attnrt's flash_mla_with_kvcache) {attn:.3f} s "
          f"({100 * attn / total:.1f}%) of {total:.2f} s generate")


def main(argv):
    a = parse_args(argv)
    report = run(a)
    if a.compare:
        return ref.compare(report, a.compare, a.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
