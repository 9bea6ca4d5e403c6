#!/usr/bin/env python3
"""llama.cpp's llama-bench with and without attnrt's ggml backend, side by side (docs/llama-cpp.md).

Runs llama-bench -fa 1 on a GGUF at each depth (-d) and KV cache type, once on llama.cpp's CPU
backend alone and once with GGML_BACKEND_PATH naming libattnrt_ggml.so, the two alternated for
--rounds rounds; prints per cell the median tokens/s of each and the ratio (attnrt / CPU). Each
llama-bench run repeats its tests -r times itself; the median is over every repetition of every
round.

Usage: ggml_llama_bench.py --bin LLAMA_BIN_DIR --backend build/lib/libattnrt_ggml.so --model M.gguf
         [--depths 0,4096,16384] [--kv f16,q8_0,f16:q4_0] [--prompt 512] [--gen 64] [--threads 2]
         [--rounds 2] [--reps 2]
The model: scripts/make-llama-gguf.py (e.g. --layers 4 --hidden 1024 --heads 8 --kv-heads 2
--head-size 128 --dtype f16). A --kv entry K:V gives K and V caches of two types (-ctk K -ctv V).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run(args, depth, kv, with_attnrt):
    env = dict(os.environ)
    env.pop("GGML_BACKEND_PATH", None)
    if with_attnrt:
        env["GGML_BACKEND_PATH"] = os.path.abspath(args.backend)
        env["ATTNRT_GGML_DEBUG"] = "1"
    cmd = [os.path.join(args.bin, "llama-bench"), "-m", args.model, "-fa", "1", "-t",
           str(args.threads), "-p", str(args.prompt), "-n", str(args.gen), "-d", str(depth),
           "-ctk", kv.split(":")[0], "-ctv", kv.split(":")[-1], "-r", str(args.reps), "-o", "json"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"llama-bench failed ({' '.join(cmd)}):\n{p.stderr[-3000:]}")
    computed = None
    for line in p.stderr.splitlines():
        # llama.cpp's asynchronous logger may print the start of a line before the backend's.
        if "attnrt-ggml:" in line and "nodes computed by attnrt" in line:
            computed = int(line.split("attnrt-ggml:")[1].split()[0])
    out = {}
    for r in json.loads(p.stdout):
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        out[test] = r["samples_ts"]
    return out, computed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--depths", default="0,4096,16384")
    ap.add_argument("--kv", default="f16,q8_0")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    kvs = args.kv.split(",")
    print(f"llama-bench -fa 1 -t {args.threads}, {os.path.basename(args.model)}, {args.rounds} "
          f"rounds x {args.reps} repetitions, CPU backend alone and then with attnrt alternating")
    print(f"{'KV':5s} {'depth':>6s} {'test':>6s} {'CPU t/s':>9s} {'attnrt t/s':>11s} "
          f"{'ratio':>6s}  attnrt nodes")
    for kv in kvs:
        for depth in depths:
            samples = {False: {}, True: {}}
            nodes = None
            for rnd in range(args.rounds):
                order = (False, True) if rnd % 2 == 0 else (True, False)
                for with_attnrt in order:
                    res, computed = run(args, depth, kv, with_attnrt)
                    if with_attnrt:
                        nodes = computed
                    for test, ts in res.items():
                        samples[with_attnrt].setdefault(test, []).extend(ts)
            for test in samples[False]:
                cpu = statistics.median(samples[False][test])
                att = statistics.median(samples[True][test])
                print(f"{kv:5s} {depth:6d} {test:>6s} {cpu:9.1f} {att:11.1f} {att / cpu:6.2f}  "
                      f"{nodes if nodes is not None else '-'}", flush=True)


if __name__ == "__main__":
    main()
