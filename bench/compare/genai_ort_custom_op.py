#!/usr/bin/env python3
"""End-to-end ONNX Runtime GenAI tokens/s with and without libattnrt_onnxruntime.so (attnrt's
GroupQueryAttention, docs/onnxruntime.md), in one process.

A seeded random Llama checkpoint (scripts/make-llama-checkpoint.py: by default 4 layers, hidden
512, 8 query and 2 KV heads of size 64, vocabulary 4096) is exported by GenAI's model builder
(fp32, cpu) into --work, with a copy of the library in the model folder (GenAI loads it only from
there). Two og.Model objects of that folder differ only in "custom_ops_library"; both have
intra_op_num_threads = --threads, and the library's attnrt runtime has --threads threads
(ATTNRT_NUM_THREADS). Before timing, 8 greedy tokens of each must agree and the library's run
counter must have risen. Each workload (prompt P token ids + N new greedy tokens) then runs --reps
times per model, interleaved (built-in, library, built-in, ...). One rep: a new generator,
append_tokens(prompt) (prefill), then generate_next_token until N tokens. Reported per workload:
the median of total time, of prefill time and of decode time; tokens/s = N / total time; speedup =
library tokens/s / built-in tokens/s.

Run in the GenAI venv (scripts/setup-genai.sh BUILD_DIR):

    build/genai-venv/bin/python bench/compare/genai_ort_custom_op.py --build build --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
LIBRARY_NAME = "libattnrt_onnxruntime.so"
WORKLOADS = [(512, 128), (4096, 128)]


def export(work: Path, checkpoint_args: list[str], library: str) -> Path:
    hf, out = work / "hf", work / "onnx"
    if not (out / "genai_config.json").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make-llama-checkpoint.py"), str(hf),
                        "--tokenizer", *checkpoint_args], check=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
                        "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(work / "cache")],
                       env=env, check=True, stdout=subprocess.DEVNULL)
    shutil.copy2(library, out / LIBRARY_NAME)
    return out


def load(og, model_dir: Path, threads: int, with_library: bool):
    options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    if with_library:
        options["custom_ops_library"] = LIBRARY_NAME
    config = og.Config(str(model_dir))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}},
                               "search": {"max_length": 8192}}))
    return og.Model(config)


def run(og, model, prompt: np.ndarray, new_tokens: int) -> tuple[list[int], float, float]:
    """Greedy generation; returns (tokens, prefill seconds, decode seconds)."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(prompt)
    prefilled = time.perf_counter()
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, prefilled - start, time.perf_counter() - prefilled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(REPO / "build"),
                        help="attnrt build folder (python/attnrt and lib/)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--work", help="folder for the checkpoint and model (default: a temporary "
                        "one); an exported model already there is reused")
    parser.add_argument("--checkpoint-args", default="--layers 4 --hidden 512 --heads 8 "
                        "--kv-heads 2 --head-dim 64 --intermediate 1408 --vocab 4096 "
                        "--max-pos 8192 --qk-std 0.08 --lm-head-std 0.2",
                        help="make-llama-checkpoint.py options")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    os.environ["ATTNRT_NUM_THREADS"] = str(args.threads)  # before the library is loaded
    sys.path.insert(0, str(Path(args.build) / "python"))
    import attnrt.onnxruntime as attnrt_ort  # loads libattnrt.so, which the copy links to
    import onnxruntime_genai as og

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="attnrt-genai-bench."))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = export(work, args.checkpoint_args.split(), attnrt_ort.library_path())
    os.environ["ATTNRT_ONNXRUNTIME_LIBRARY"] = str(model_dir / LIBRARY_NAME)  # the copy's counter
    models = {"builtin": load(og, model_dir, args.threads, False),
              "library": load(og, model_dir, args.threads, True)}
    vocab = json.loads((model_dir / "genai_config.json").read_text())["model"]["vocab_size"]

    check = np.random.default_rng(1).integers(3, vocab, 64).astype(np.int32)
    before = attnrt_ort.runs()
    ours = run(og, models["library"], check, 8)[0]
    if attnrt_ort.runs() == before:
        sys.exit("the library's GroupQueryAttention did not run")
    theirs = run(og, models["builtin"], check, 8)[0]
    if ours != theirs:
        sys.exit(f"tokens differ: library {ours}, built-in {theirs}")

    rows = []
    print(f"threads {args.threads}, reps {args.reps}, model {args.checkpoint_args}")
    print("prompt + new | built-in tok/s | library tok/s | speedup | built-in prefill s | "
          "library prefill s | built-in decode tok/s | library decode tok/s")
    print("--- | --- | --- | --- | --- | --- | --- | ---")
    for prompt_length, new_tokens in WORKLOADS:
        prompt = np.random.default_rng(prompt_length).integers(3, vocab, prompt_length)
        prompt = prompt.astype(np.int32)
        samples = {name: {"total": [], "prefill": [], "decode": []} for name in models}
        for name in models:  # one untimed run each
            run(og, models[name], prompt, 4)
        for _ in range(args.reps):
            for name, model in models.items():
                _, prefill, decode = run(og, model, prompt, new_tokens)
                samples[name]["total"].append(prefill + decode)
                samples[name]["prefill"].append(prefill)
                samples[name]["decode"].append(decode)
        med = {name: {k: statistics.median(v) for k, v in s.items()} for name, s in samples.items()}
        row = {"prompt": prompt_length, "new_tokens": new_tokens, "reps": args.reps,
               "threads": args.threads, **{f"{name}_{k}_s": v for name, m in med.items()
                                           for k, v in m.items()}}
        b, l = med["builtin"], med["library"]
        row["speedup"] = b["total"] / l["total"]
        rows.append(row)
        # The first new token comes from the prefill; decode covers the other new_tokens - 1.
        print(f"{prompt_length} + {new_tokens} | {new_tokens / b['total']:.1f} | "
              f"{new_tokens / l['total']:.1f} | {row['speedup']:.2f}x | {b['prefill']:.3f} | "
              f"{l['prefill']:.3f} | {(new_tokens - 1) / b['decode']:.1f} | "
              f"{(new_tokens - 1) / l['decode']:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
