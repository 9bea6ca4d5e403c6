#!/usr/bin/env python3
"""bench_sparse_mla's JSON output as a markdown table: kernel, case, ms, tokens/s, GFLOP/s,
%fma_peak (docs/sparse-mla.md, Performance).

    build/bin/bench_sparse_mla --benchmark_out=sparse_mla.json --benchmark_out_format=json
    python3 bench/sparse_mla/table.py sparse_mla.json [--by-case] [--filter REGEX]

With --benchmark_repetitions the median aggregate is used (or the median of the repetitions when
only those were written); a benchmark that failed (a kernel that declines a case) gets a row with
its message. Below the table: the thread count, the measured FMA peaks and the load average the
benchmark recorded in its context.
"""
import argparse
import json
import re
import statistics
import sys

PREFIX = "sparse_mla.sparse_mla."  # common to the kernel names; left out of the table
UNIT_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def split_name(name):
    """'csa_decode/q1/h64/B4/sparse_mla.sparse_mla.flash.avx2/real_time' -> (case, kernel)."""
    parts = [p for p in name.split("/") if p != "real_time"]
    return "/".join(parts[:-1]), parts[-1]


def collect(paths, pattern):
    """{(case, kernel): [run, ...]} in the order first seen, and the last file's context."""
    rows, context = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = data.get("context", {})
        for b in data.get("benchmarks", []):
            name = b.get("run_name", b["name"])
            if pattern and not re.search(pattern, name):
                continue
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            rows.setdefault(split_name(name), []).append(b)
    return rows, context


def summary(runs):
    """(ms, tokens/s, GFLOP/s, %fma_peak or None) or the error message of a failed run."""
    failed = [r for r in runs if r.get("error_occurred") or r.get("skipped")]
    if failed:
        return failed[0].get("error_message", "failed")
    medians = [r for r in runs if r.get("run_type") == "aggregate"]
    runs = medians or runs

    def med(key, scale=1.0):
        values = [r[key] * scale for r in runs if key in r]
        return statistics.median(values) if values else None

    ms = statistics.median(r["real_time"] * UNIT_TO_MS[r.get("time_unit", "ns")] for r in runs)
    return ms, med("tokens/s"), med("GFLOP/s"), med("%fma_peak")


def fmt(value, digits):
    return "—" if value is None else f"{value:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="bench_sparse_mla --benchmark_out files (JSON)")
    ap.add_argument("--by-case", action="store_true",
                    help="group the rows by case (kernels side by side) instead of by kernel")
    ap.add_argument("--filter", default="", help="keep benchmarks whose name matches REGEX")
    ap.add_argument("--full-names", action="store_true",
                    help=f"keep the '{PREFIX}' prefix of the kernel names")
    ap.add_argument("--no-context", action="store_true", help="the table alone")
    args = ap.parse_args()

    rows, context = collect(args.json, args.filter)
    if not rows:
        sys.exit("no sparse MLA benchmark in the input (wrong file, or --filter matches nothing)")
    keys = list(rows)
    if not args.by_case:
        kernels = list(dict.fromkeys(k for _, k in keys))
        keys.sort(key=lambda ck: kernels.index(ck[1]))  # stable: cases stay in run order

    print("| kernel | case | ms | tokens/s | GFLOP/s | %fma_peak |")
    print("|---|---|---|---|---|---|")
    for case, kernel in keys:
        name = kernel if args.full_names else kernel.removeprefix(PREFIX)
        s = summary(rows[(case, kernel)])
        if isinstance(s, str):  # the error of a failed run, on one line, pipes escaped
            message = " ".join(s.split()).replace("|", "\\|")
            message = message if len(message) <= 100 else message[:97] + "..."
            print(f"| {name} | {case} | — | — | — | failed: {message} |")
            continue
        ms, tokens, gflops, peak = s
        ms_digits = 3 if ms < 10 else 2 if ms < 100 else 1
        print(f"| {name} | {case} | {fmt(ms, ms_digits)} | {fmt(tokens, 0)} | {fmt(gflops, 1)} "
              f"| {fmt(peak, 1)} |")
    if args.no_context:
        return
    notes = []
    if "attnrt_threads" in context:
        notes.append("threads " + context["attnrt_threads"].split()[0])
    peaks = []
    for key, label in (("fma_peak_avx2", "AVX2"), ("fma_peak_avx512", "AVX-512")):
        m = re.match(r"([0-9.]+ GFLOP/s)", context.get(key, ""))
        if m:
            peaks.append(f"{label} {m.group(1)}")
    if peaks:
        notes.append("FP32 FMA peaks measured at startup: " + ", ".join(peaks))
    if "load_avg" in context:
        notes.append("load average at start " + ", ".join(f"{x:.2f}" for x in context["load_avg"]))
    if notes:
        print()
        print("; ".join(notes) + ".")

if __name__ == "__main__":
    main()
