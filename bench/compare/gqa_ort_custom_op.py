#!/usr/bin/env python3
"""GroupQueryAttention node time in onnxruntime: its own CPU kernel against attnrt's custom-op
library (libattnrt_onnxruntime.so, docs/onnxruntime.md), in one process.

The shapes, inputs, one-node models and the IO binding are those of gqa_vs_onnxruntime.py (beside
this script): decode binds present_key/value to past_key/value's OrtValue (a shared buffer),
prefill binds preallocated outputs. Two sessions of the same model differ only in the library
being registered (attnrt.onnxruntime.register, its runtime with --threads threads); both have
intra_op_num_threads = --threads, inter_op_num_threads = 1, sequential execution. Before timing,
one run of each is compared (max abs diff of `output` <= 1e-4), and the library's run counter must
have risen, so the library's kernel is the one timed. Then blocks of `inner` runs interleave the two
sessions after an untimed pause and one untimed run; the time per run is the median over the blocks.
Speedup = built-in / library (> 1: the library is faster). Times are session.run_with_iobinding
wall-clock, the same ONNX Runtime overhead on both sides.

Default: the --quick subset of the 30 shapes (7 shapes); --all for the 30.

    python3 bench/compare/gqa_ort_custom_op.py --build build --threads 2
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gqa_vs_onnxruntime as base  # noqa: E402


class OrtWithLibrary:
    """The onnxruntime module, with SessionOptions() registering attnrt's library."""

    def __init__(self, ort, attnrt_onnxruntime, threads: int):
        self._ort, self._lib, self._threads = ort, attnrt_onnxruntime, threads

    def __getattr__(self, name):
        return getattr(self._ort, name)

    def SessionOptions(self):  # noqa: N802 (onnxruntime's name)
        options = self._ort.SessionOptions()
        self._lib.register(options, num_threads=self._threads)
        return options


def measure(shape, args, ort, library_ort, runs, rng) -> dict:
    attrs, inputs = base.make_problem(shape, rng)
    spinning = not args.ort_no_spinning
    builtin = base.OrtRunner(ort, attrs, inputs, shape, args.threads, spinning)
    before = runs()
    library = base.OrtRunner(library_ort, attrs, inputs, shape, args.threads, spinning)
    del inputs
    timings = []
    for runner in (builtin, library):
        runner.output.fill(np.nan)
        start = time.perf_counter()
        runner.run()
        timings.append(time.perf_counter() - start)
    served = runs() > before
    diff = float(np.max(np.abs(builtin.output.astype(np.float64) -
                               library.output.astype(np.float64))))
    tolerance = base.TOLERANCE_FLOAT16 if shape.cache == "f16" else base.TOLERANCE
    ok = bool(served and np.isfinite(diff) and diff <= tolerance)
    row = {"shape": shape.label, "builtin_mode": builtin.mode, "library_mode": library.mode,
           "max_abs_diff": diff, "library_ran": served, "ok": ok}
    print(f"  check {shape.label}: max abs diff {diff:.3g}, library ran: {served} "
          f"({'ok' if ok else 'FAILED'}); {library.mode}", flush=True)
    if not ok:
        return row
    inner = max(1, min(100, round(0.02 / max(min(timings), 1e-6))))
    reps = max(3, min(args.reps, int(args.budget / (inner * sum(timings)) + 1)))
    for runner in (builtin, library):
        base.time_block(runner.run, inner)
    samples = {"builtin": [], "library": []}
    for _ in range(reps):
        for name, runner in (("builtin", builtin), ("library", library)):
            time.sleep(args.pause_ms / 1e3)
            runner.run()
            samples[name].append(base.time_block(runner.run, inner))
    row.update(builtin_us=statistics.median(samples["builtin"]),
               library_us=statistics.median(samples["library"]), reps=reps, inner=inner,
               samples_us={k: [round(x, 2) for x in v] for k, v in samples.items()})
    row["speedup"] = row["builtin_us"] / row["library_us"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--all", action="store_true", help="the 30 shapes (default: 7 of them)")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--budget", type=float, default=6.0,
                        help="seconds of timed runs per shape that cap the repetitions")
    parser.add_argument("--pause-ms", type=float, default=50.0)
    parser.add_argument("--ort-no-spinning", action="store_true")
    parser.add_argument("--filter", help="only shapes whose label contains this text")
    parser.add_argument("--build", help="attnrt build folder (with python/attnrt and lib/)")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    attnrt = base.import_attnrt(args.build)
    import attnrt.onnxruntime as attnrt_onnxruntime
    import onnxruntime as ort

    library_ort = OrtWithLibrary(ort, attnrt_onnxruntime, args.threads)
    print(f"onnxruntime {ort.__version__} | attnrt {attnrt.version()} | threads {args.threads} | "
          f"{attnrt_onnxruntime.library_path()}", flush=True)
    rng = np.random.default_rng(args.seed)
    selected = [s for s in base.shapes_float(quick=not args.all)
                if not args.filter or args.filter in s.label]
    rows = [measure(s, args, ort, library_ort, attnrt_onnxruntime.runs, rng) for s in selected]
    width = max(len(r["shape"]) for r in rows)
    print(f"\n{'shape':<{width}} | built-in µs | attnrt library µs | speedup")
    print(f"{'-' * width}-|-------------|-------------------|--------")
    for r in rows:
        if r["ok"]:
            print(f"{r['shape']:<{width}} | {r['builtin_us']:11.1f} | {r['library_us']:17.1f} | "
                  f"{r['speedup']:6.2f}x")
        else:
            print(f"{r['shape']:<{width}} | FAILED (max abs diff {r['max_abs_diff']:.3g}, "
                  f"library ran: {r['library_ran']})")
    speedups = [r["speedup"] for r in rows if r["ok"]]
    geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else math.nan
    print(f"geomean speedup (built-in / library): {geomean:.3f}; "
          f"load average {base.load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "threads": args.threads,
                       "geomean_speedup": geomean, "results": rows}, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
