#!/usr/bin/env python3
"""Runs a local encoder-only embedding checkpoint (scripts/make-bert-checkpoint.py) through vLLM's
LLM.embed on CPU and records the embeddings; compares two such records.

Run mode: seeded token-id prompts of mixed lengths (TokensPrompt, so nothing is tokenized; the
checkpoint's tokenizer is loaded all the same: vLLM 0.32's pooling runner fails to start with
skip_tokenizer_init=True), by default 8 prompts of 7..1000 tokens (the extremes included) plus
one of a single token, embedded in one LLM.embed call (runner="pooling": the checkpoint's sentence-transformers pooling, then
normalization), --repeat times; the first call's embeddings go to --out (JSON) with the timing of
every call (prompts/s and tokens/s; the median of the calls after the first is the figure to
quote, the first includes warm-up) and the largest difference between calls (vLLM's CPU runner is
deterministic: it should be 0). Engine and worker run in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), eager (enforce_eager), VLLM_CPU_KVCACHE_SPACE 1 GiB unless set.
Which attention serves the encoder layers is the environment's choice: ATTNRT_VLLM=0 or unset,
vLLM's own CPU_ATTN backend; ATTNRT_VLLM=1, attnrt's (the attnrt package's vllm.general_plugins
entry point); --cpu-attention-class MODULE.CLASS registers a class in the CPU_ATTN slot instead
(the negative control, tests/vllm/attnrt_vllm_encoder_controls.py).

--hf-reference runs the same prompts through transformers' BertModel (eager attention, one prompt
at a time, float64 unless --dtype says otherwise) with the checkpoint's pooling and
normalization: a reference that shares no code with vLLM.

Compare mode: --compare A.json B.json prints the per-prompt cosine similarity of the two records'
embeddings (min, mean, the worst prompt; also the largest elementwise difference) and exits 1
when the smallest is below --min-cosine.
After a run, --compare REF.json compares this run's embeddings with REF.json.

Usage: vllm_embed_run.py MODEL_DIR --out run.json [--dtype float32|bfloat16] [--seed 0]
         [--num-prompts 8] [--min-prompt-len 7] [--max-prompt-len 1000] [--no-single-token]
         [--repeat 3] [--cpu-attention-class MODULE.CLASS] [--hf-reference]
         [--compare REF.json [--min-cosine 0.99999]]
       vllm_embed_run.py --compare A.json B.json [--min-cosine 0.99999]
Run it with the venv of scripts/setup-vllm.sh.
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", nargs="?", help="checkpoint folder (not with --compare A B)")
    p.add_argument("--out", default=None, help="write the results here (JSON)")
    p.add_argument("--compare", nargs="+", metavar="JSON", default=None,
                   help="A.json B.json: compare two records; after a run, REF.json: compare with it")
    p.add_argument("--min-cosine", type=float, default=None,
                   help="with --compare: exit 1 when a prompt's cosine similarity is below this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float64"], default=None,
                   help="model dtype (default float32; float64 only with --hf-reference, its "
                        "default)")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--min-prompt-len", type=int, default=7)
    p.add_argument("--max-prompt-len", type=int, default=1000)
    p.add_argument("--no-single-token", dest="single_token", action="store_false",
                   help="no extra prompt of one token")
    p.add_argument("--repeat", type=int, default=3, help="LLM.embed calls (timing)")
    p.add_argument("--max-batched-tokens", type=int, default=None,
                   help="max_num_batched_tokens, also max_model_len when below the checkpoint's "
                        "max_position_embeddings (default: enough for every prompt in one step, "
                        "at least 2048); smaller splits the batch over several steps")
    p.add_argument("--block-size", type=int, default=None, help="KV cache block size")
    p.add_argument("--cpu-attention-class", default=None, metavar="MODULE.CLASS",
                   help="register this class in place of vLLM's CPU_ATTN backend")
    p.add_argument("--hf-reference", action="store_true",
                   help="transformers' BertModel instead of vLLM")
    a = p.parse_args(argv)
    if a.compare is not None and len(a.compare) > 2:
        p.error("--compare takes A.json B.json, or REF.json after a run")
    a.compare_only = a.compare is not None and len(a.compare) == 2
    if a.compare_only:
        if a.model is not None:
            p.error("--compare A.json B.json compares two records; it takes no MODEL_DIR")
        return a
    if a.model is None:
        p.error("MODEL_DIR is needed (unless --compare A.json B.json)")
    if not 1 <= a.min_prompt_len <= a.max_prompt_len:
        p.error(f"need 1 <= --min-prompt-len ({a.min_prompt_len}) <= --max-prompt-len "
                f"({a.max_prompt_len})")
    if a.max_batched_tokens is not None and a.max_batched_tokens < a.max_prompt_len:
        p.error(f"--max-batched-tokens ({a.max_batched_tokens}) must hold the longest prompt "
                f"({a.max_prompt_len}): encoder attention is not chunked")
    if a.num_prompts < 1 or a.repeat < 1:
        p.error("--num-prompts and --repeat must be at least 1")
    if a.dtype == "float64" and not a.hf_reference:
        p.error("--dtype float64 is for --hf-reference only")
    if a.dtype is None:
        a.dtype = "float64" if a.hf_reference else "float32"
    if a.hf_reference and a.cpu_attention_class:
        p.error("--cpu-attention-class is for vLLM runs")
    return a


def make_prompts(seed, n, min_len, max_len, vocab, single_token):
    """n token-id prompts with lengths spread over [min_len, max_len] (the extremes included), plus
    one of a single token. Ids 0..4 are left out (make-bert-checkpoint.py's special tokens)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    lengths[0] = max_len
    if n > 1:
        lengths[1] = min_len
    prompts = [rng.integers(5, vocab, size=int(m)).tolist() for m in lengths]
    if single_token:
        prompts.append(rng.integers(5, vocab, size=1).tolist())
    return prompts


def pooling_of(model_dir):
    """The checkpoint's sentence-transformers pooling ("mean" or "cls") and whether a Normalize
    module follows (what vLLM's get_pooling_config reads; BERT's default without modules.json:
    CLS, normalized)."""
    try:
        with open(os.path.join(model_dir, "modules.json")) as f:
            modules = json.load(f)
    except FileNotFoundError:
        return "cls", True
    normalize = any(m["type"].endswith("Normalize") for m in modules)
    pool = next((m for m in modules if m["type"].endswith("Pooling")), None)
    if pool is None:
        return "cls", normalize
    with open(os.path.join(model_dir, pool["path"], "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean", normalize
    if cfg.get("pooling_mode_cls_token"):
        return "cls", normalize
    raise SystemExit(f"{model_dir}: pooling {cfg} is neither mean nor cls")


def hf_embed(a, prompts):
    """transformers' BertModel, eager attention (non-causal, no padding: one prompt at a time)."""
    import torch
    from transformers import BertModel

    dtype = getattr(torch, a.dtype)
    model = BertModel.from_pretrained(a.model, torch_dtype=dtype, attn_implementation="eager")
    model.eval()
    pooling, normalize = pooling_of(a.model)
    out = []
    with torch.no_grad():
        for ids in prompts:
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            e = h.mean(0) if pooling == "mean" else h[0]
            if normalize:
                e = torch.nn.functional.normalize(e, dim=0)
            out.append(e.double().tolist())
    return out


def run(a):
    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    vocab, max_pos = config["vocab_size"], config["max_position_embeddings"]
    if a.max_prompt_len > max_pos:
        raise SystemExit(f"--max-prompt-len {a.max_prompt_len} exceeds the checkpoint's "
                         f"max_position_embeddings {max_pos}")
    prompts = make_prompts(a.seed, a.num_prompts, a.min_prompt_len, a.max_prompt_len, vocab,
                           a.single_token)
    lengths = [len(p) for p in prompts]
    tokens = sum(lengths)
    t0 = time.perf_counter()
    if a.hf_reference:
        embeddings = hf_embed(a, prompts)
        calls, repeat_diff, t_import, t_init = [], 0.0, 0.0, 0.0
        backend = "transformers BertModel (eager)"
        t_total = time.perf_counter() - t0
        calls = [{"seconds": t_total, "prompts_per_s": len(prompts) / t_total,
                  "tokens_per_s": tokens / t_total}]
    else:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM
        from vllm.inputs import TokensPrompt

        if a.cpu_attention_class:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

            register_backend(AttentionBackendEnum.CPU_ATTN, a.cpu_attention_class)
        t_import = time.perf_counter() - t0
        batched = a.max_batched_tokens or max(2048, tokens)
        kwargs = dict(model=a.model, runner="pooling", dtype=a.dtype,
                      enforce_eager=True, seed=a.seed, max_num_seqs=max(len(prompts), 16),
                      max_num_batched_tokens=batched, max_model_len=min(max_pos, batched))
        if a.block_size:
            kwargs["block_size"] = a.block_size
        llm = LLM(**kwargs)
        t_init = time.perf_counter() - t0 - t_import
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        backend = AttentionBackendEnum.CPU_ATTN.get_path()
        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        calls, embeddings, repeat_diff = [], None, 0.0
        for _ in range(a.repeat):
            t1 = time.perf_counter()
            outs = llm.embed(inputs, use_tqdm=False)
            dt = time.perf_counter() - t1
            calls.append({"seconds": dt, "prompts_per_s": len(prompts) / dt,
                          "tokens_per_s": tokens / dt})
            emb = [list(map(float, o.outputs.embedding)) for o in outs]
            if embeddings is None:
                embeddings = emb
            else:
                repeat_diff = max(repeat_diff, max(abs(x - y) for e, f in zip(embeddings, emb)
                                                   for x, y in zip(e, f)))
    timed = calls[1:] or calls
    attnrt_module = getattr(sys.modules.get("attnrt"), "__file__", None)
    report = {
        "model": os.path.abspath(a.model),
        "settings": {k: v for k, v in vars(a).items()
                     if k not in ("out", "compare", "compare_only", "min_cosine")},
        "attention": backend,
        "env": {k: os.environ.get(k) for k in ("ATTNRT_VLLM", "ATTNRT_VLLM_P_PRECISION")},
        "attnrt_module": attnrt_module,
        "prompt_lens": lengths,
        "prompt_tokens": tokens,
        "timing_s": {"import": t_import, "init": t_init},
        "calls": calls,
        "median": {"prompts_per_s": statistics.median(c["prompts_per_s"] for c in timed),
                   "tokens_per_s": statistics.median(c["tokens_per_s"] for c in timed)},
        "repeat_max_abs_diff": repeat_diff,
        "embeddings": embeddings,
    }
    print(f"attention: {backend} (ATTNRT_VLLM={os.environ.get('ATTNRT_VLLM')}"
          + (f"; attnrt from {os.path.dirname(attnrt_module)}" if attnrt_module else "") + ")")
    print(f"prompts: {len(prompts)}, lengths {lengths}, {tokens} tokens; embedding size "
          f"{len(embeddings[0])}")
    print(f"time: import {t_import:.1f} s, engine init {t_init:.1f} s; embed calls "
          + ", ".join(f"{c['seconds']:.2f} s" for c in calls))
    print(f"throughput (median of calls after the first): {report['median']['prompts_per_s']:.2f} "
          f"prompts/s, {report['median']['tokens_per_s']:.0f} tokens/s")
    print(f"largest difference between calls: {repeat_diff:.3g}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f)
        print(f"wrote {a.out}")
    return report


def cosines(x, y):
    import numpy as np

    if x["prompt_lens"] != y["prompt_lens"]:
        raise SystemExit(f"compare: prompt lengths differ: {x['prompt_lens']} vs {y['prompt_lens']}")
    if x["settings"]["seed"] != y["settings"]["seed"]:
        raise SystemExit(f"compare: prompt seeds differ: {x['settings']['seed']} vs "
                         f"{y['settings']['seed']}")
    out, diff = [], 0.0
    for e, f in zip(x["embeddings"], y["embeddings"]):
        e, f = np.asarray(e, np.float64), np.asarray(f, np.float64)
        out.append(float(e @ f / (np.linalg.norm(e) * np.linalg.norm(f))))
        diff = max(diff, float(np.abs(e - f).max()))
    return out, diff


def compare(x, y, name_x, name_y, min_cosine):
    c, diff = cosines(x, y)
    worst = min(range(len(c)), key=c.__getitem__)
    lens = x["prompt_lens"]
    print(f"compare {name_x} with {name_y}: cosine min {min(c):.8f} (prompt {worst}, "
          f"{lens[worst]} tokens), mean {sum(c) / len(c):.8f}; max |difference| {diff:.3g}; "
          f"1 - cosine per prompt (tokens:value): "
          + ", ".join(f"{lens[i]}:{1 - v:.2e}" for i, v in enumerate(c)))
    if min_cosine is not None and min(c) < min_cosine:
        print(f"compare: FAIL: cosine {min(c):.8f} below {min_cosine}")
        return 1
    return 0


def main(argv):
    a = parse_args(argv)
    if a.compare_only:
        x, y = (json.load(open(path)) for path in a.compare)
        return compare(x, y, *map(os.path.basename, a.compare), a.min_cosine)
    report = run(a)
    if a.compare:
        with open(a.compare[0]) as f:
            ref = json.load(f)
        return compare(report, ref, os.path.basename(a.out) if a.out else "this run",
                       os.path.basename(a.compare[0]), a.min_cosine)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
