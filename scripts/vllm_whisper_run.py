#!/usr/bin/env python3
"""Runs a local Whisper checkpoint (scripts/make-whisper-checkpoint.py) through vLLM's
LLM.generate on CPU and records the greedy tokens and their logprobs; compares two such records.

Run mode: seeded synthetic audio of different lengths (noise and a tone, 16 kHz), each with the
decoder prompt <|startoftranscript|><|en|><|transcribe|><|notimestamps|>, greedy (temperature 0,
ignore_eos), --max-tokens tokens; one LLM.generate call for all of them, so requests whose encoder
runs share steps with requests already decoding. Records the generated token ids, each one's
logprob, and the prompt logprobs. Engine and worker in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), eager, VLLM_CPU_KVCACHE_SPACE 1 GiB unless set. Which attention
serves the decoder's self- and cross-attention is the environment's choice: ATTNRT_VLLM=0 or unset,
vLLM's own CPU_ATTN backend; ATTNRT_VLLM=1, attnrt's; --cpu-attention-class MODULE.CLASS registers
a class in the CPU_ATTN slot instead (the negative control, tests/vllm/attnrt_vllm_cross_controls.py).
The log says which backend class each kind of layer ran ("layers: ...").

Compare mode: after a run, --compare REF.json compares this run with REF.json: the greedy tokens
(reported; equal unless --allow-token-differences) and the largest difference of the logprobs
at the positions where both chose the same tokens so far; exits 1 when it exceeds --tolerance.

Usage: vllm_whisper_run.py MODEL_DIR --out run.json [--dtype float32|bfloat16] [--max-tokens 12]
         [--seed 0] [--cpu-attention-class MODULE.CLASS] [--compare REF.json --tolerance 1e-3]
Run it with the venv of scripts/setup-vllm.sh.
"""
import argparse
import ctypes
import json
import os
import sys

PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
SAMPLE_RATE = 16000


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model")
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-attention-class", default=None, metavar="MODULE.CLASS")
    p.add_argument("--compare", default=None, metavar="REF.json")
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--allow-token-differences", action="store_true")
    return p.parse_args(argv)


def audios(seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(2.5 * SAMPLE_RATE)) / SAMPLE_RATE
    return [(0.1 * rng.standard_normal(SAMPLE_RATE)).astype(np.float32),
            (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32),
            (0.3 * rng.standard_normal(int(4.2 * SAMPLE_RATE))).astype(np.float32)]


def layer_kinds(model):
    """{attn_type: backend impl class} of the model's attention layers (LLM.apply_model)."""
    from vllm.model_executor.layers.attention import Attention

    kinds = {}
    for _, m in model.named_modules():
        if isinstance(m, Attention):
            # The impl class and its base (vLLM's cross-attention wraps the backend's impl).
            mro = type(m.impl).__mro__[:2]
            kinds.setdefault(str(m.attn_type), set()).add(
                " < ".join(f"{c.__module__}.{c.__qualname__}" for c in mro))
    return {k: sorted(v) for k, v in kinds.items()}


def run(a):
    ctypes.CDLL(None).syscall(158, 0x1023, 18)  # AMX tile data for vLLM's own kernels
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    if a.cpu_attention_class:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

        register_backend(AttentionBackendEnum.CPU_ATTN, a.cpu_attention_class)
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=448, enforce_eager=True,
              limit_mm_per_prompt={"audio": 1}, seed=a.seed, max_num_seqs=4)
    kinds = llm.apply_model(layer_kinds)[0]
    print("layers: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(kinds.items())))
    prompts = [{"prompt": PROMPT, "multi_modal_data": {"audio": (x, SAMPLE_RATE)}}
               for x in audios(a.seed)]
    params = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, logprobs=0,
                            prompt_logprobs=0, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    records = []
    for o in outs:
        c = o.outputs[0]
        ids = list(c.token_ids)
        prompt_lp = [None if d is None else d[t].logprob
                     for d, t in zip(o.prompt_logprobs, o.prompt_token_ids)]
        records.append({"prompt_token_ids": list(o.prompt_token_ids), "token_ids": ids,
                        "logprobs": [d[t].logprob for d, t in zip(c.logprobs, ids)],
                        "prompt_logprobs": prompt_lp})
        print(f"tokens {ids} ({len(set(ids))} distinct)")
    with open(a.out, "w") as f:
        json.dump({"dtype": a.dtype, "layers": kinds, "outputs": records}, f)
    return records


def compare(ours, ref, a):
    worst, differ = 0.0, 0
    for i, (x, y) in enumerate(zip(ours, ref)):
        for p, q in zip(x["prompt_logprobs"][1:], y["prompt_logprobs"][1:]):
            worst = max(worst, abs(p - q))
        same = 0
        while (same < len(x["token_ids"]) and same < len(y["token_ids"])
               and x["token_ids"][same] == y["token_ids"][same]):
            same += 1
        # Logprobs up to and including the first differing token (same context so far).
        for p, q in zip(x["logprobs"][:same + 1], y["logprobs"][:same + 1]):
            worst = max(worst, abs(p - q))
        if same < len(x["token_ids"]):
            differ += 1
            print(f"prompt {i}: tokens differ from position {same}: {x['token_ids']} vs "
                  f"{y['token_ids']}")
    ok = worst <= a.tolerance and (differ == 0 or a.allow_token_differences)
    print(f"compare {a.compare}: max |logprob difference| {worst:.3g} (tolerance "
          f"{a.tolerance:g}), prompts whose greedy tokens differ: {differ} of {len(ours)}: "
          f"{'OK' if ok else 'FAIL'}")
    return ok


def main(argv):
    a = parse_args(argv)
    records = run(a)
    if a.compare:
        with open(a.compare) as f:
            ref = json.load(f)["outputs"]
        return 0 if compare(records, ref, a) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
