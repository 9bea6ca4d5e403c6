"""The end-to-end part of vllm_vs_attnrt.py (--e2e MODEL_DIR): its command-line flags, the
workloads a/b/c, the sitecustomize hook that reports (and with --no-amx replaces) vLLM's CPU
attention ISA, the runs of scripts/vllm_reference_run.py alternated between vLLM and attnrt, and
their table. vllm_vs_attnrt.py parses the flags shared with its kernel tables, sets up --no-amx
and checks --p-precision, then calls e2e() here; its docstring describes the workloads and runs.
"""
from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys

WORKLOADS = {  # --e2e: name -> (description, scripts/vllm_reference_run.py options)
    "a": ("mixed: 8 prompts of 64..4000 tokens, 64 new",
          ["--num-prompts", "8", "--min-prompt-len", "64", "--max-prompt-len", "4000",
           "--gen-tokens", "64"]),
    "b": ("8 prompts of 4096 tokens, 128 new",
          ["--num-prompts", "8", "--min-prompt-len", "4096", "--max-prompt-len", "4096",
           "--gen-tokens", "128"]),
    "c": ("16 prompts of 1024 tokens, 256 new",
          ["--num-prompts", "16", "--min-prompt-len", "1024", "--max-prompt-len", "1024",
           "--gen-tokens", "256"]),
}
WORKLOAD_ALIASES = {"mixed": "a", "long": "b"}  # the names of the first two workloads before

# Put first on PYTHONPATH of the end-to-end runs (written to --e2e-dir): reports vLLM's CPU
# attention ISA choices on stderr and, with ATTNRT_BENCH_NO_AMX=1, returns "vec" where vLLM would
# pick "amx" (vLLM 0.32 has no setting for it); it wraps _get_attn_isa when vLLM's cpu_attn module
# is first imported, which every caller (the metadata builder, the platform) looks up there.
ISA_HOOK = r'''
import importlib.abc, importlib.machinery, importlib.util, os, sys
_TARGET = "vllm.v1.attention.backends.cpu_attn"
_NO_AMX = os.environ.get("ATTNRT_BENCH_NO_AMX") == "1"

def _patch(module):
    original, seen = module._get_attn_isa, set()

    def _get_attn_isa(dtype, block_size, head_size=None, kv_cache_dtype=None):
        isa = original(dtype, block_size, head_size, kv_cache_dtype)
        chosen = "vec" if _NO_AMX and isa == "amx" else isa
        key = (str(dtype), block_size, head_size, isa)
        if key not in seen:
            seen.add(key)
            forced = f" (forced from {isa})" if chosen != isa else ""
            print(f"vllm-isa: {str(dtype).replace('torch.', '')} block {block_size} head "
                  f"{head_size}: {chosen}{forced}", file=sys.stderr, flush=True)
        return chosen

    module._get_attn_isa = _get_attn_isa

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Finder())

# Then the sitecustomize this one shadows, if there is one.
_here = os.path.dirname(os.path.abspath(__file__))
_other = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _other is not None and _other.loader is not None:
    _other.loader.exec_module(importlib.util.module_from_spec(_other))
'''


def e2e_workloads(spec):
    names = []
    for w in (spec or "a,b,c").split(","):
        w = WORKLOAD_ALIASES.get(w.strip(), w.strip())
        if w not in WORKLOADS:
            raise SystemExit(f"--e2e-only: expected workloads among a, b, c (or mixed, long), "
                             f"got '{w}'")
        names.append(w)
    return names


def e2e_check(args, runner_dir, names):
    """The checkpoint serves every run (max_position_embeddings), and the installed attnrt's vLLM
    backend reads ATTNRT_VLLM_P_PRECISION when a mode other than exact is asked."""
    sys.path.insert(0, runner_dir)
    import vllm_reference_run

    with open(os.path.join(args.e2e, "config.json")) as f:
        config = json.load(f)
    for w in names:
        a = vllm_reference_run.parse_args([args.e2e] + WORKLOADS[w][1] + shlex.split(args.e2e_args))
        need = max(a.max_prompt_len + a.gen_tokens, a.max_batched_tokens)
        have = config.get("max_position_embeddings", 0)
        if have < need:
            raise SystemExit(f"--e2e {args.e2e}: workload {w} needs max_position_embeddings >= "
                             f"{need}, the checkpoint has {have} (make-llama-checkpoint.py "
                             "--max-pos 8192)")
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    print(f"checkpoint {args.e2e}: {config.get('num_hidden_layers')} layers, "
          f"{config.get('num_attention_heads')} heads, {config.get('num_key_value_heads')} KV "
          f"heads, head size {head}, {config.get('torch_dtype')}; runs in {args.e2e_dtype}",
          flush=True)
    if args.modes != ["exact"]:
        import importlib.util

        spec = importlib.util.find_spec("attnrt._vllm_backend")
        src = open(spec.origin).read() if spec and spec.origin else ""
        if "ATTNRT_VLLM_P_PRECISION" not in src:
            raise SystemExit(f"--p-precision {','.join(args.modes)}: the installed attnrt's vLLM "
                             f"backend ({spec.origin if spec else 'not found'}) does not read "
                             "ATTNRT_VLLM_P_PRECISION; install an attnrt that has it, or use "
                             "--p-precision exact")


def e2e_run(args, runner, hook_dir, w, backend, rnd, plan_log):
    """One run in its own process; returns (generate s, tokens/s, kernels or ISAs it reported;
    plan_log: the pattern of attnrt's log line for a plan made, its kernel the second group)."""
    env = dict(os.environ)
    env["ATTNRT_VLLM"] = "0" if backend == "vllm" else "1"
    env["PYTHONPATH"] = os.pathsep.join([hook_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    if args.no_amx:
        env["ATTNRT_BENCH_NO_AMX"] = "1"  # ATTNRT_DISABLE is in os.environ already
    if backend != "vllm":
        env["ATTNRT_VLLM_P_PRECISION"] = backend
        env["ATTNRT_DEBUG"] = "1"  # one log line per plan made: the kernels it ran
    base = os.path.join(args.e2e_dir, f"e2e_{w}_{backend}_{rnd}")
    cmd = ([sys.executable, runner, args.e2e, "--in-process", "--no-perturb", "--dtype",
            args.e2e_dtype, "--max-batched-tokens", str(args.e2e_max_batched_tokens),
            "--out", base + ".json"] + WORKLOADS[w][1] + shlex.split(args.e2e_args))
    print("+", " ".join(cmd), flush=True)
    if os.path.exists(base + ".json"):  # no result of an earlier run read as this one's
        os.remove(base + ".json")
    with open(base + ".log", "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log).returncode
    with open(base + ".log") as f:
        text = f.read()
    if rc != 0:
        sys.stderr.write(text[-4000:])
        raise SystemExit(f"{' '.join(cmd)} failed ({rc}); its stderr is in {base}.log")
    with open(base + ".json") as f:
        r = json.load(f)
    gen = sum(len(x["gen_ids"]) for x in r["results"])
    t = r["timing_s"]["generate"]
    used = {}
    for ln in text.splitlines():
        m = plan_log.search(ln)
        if m:
            used[m.group(2)] = used.get(m.group(2), 0) + 1
        elif ln.startswith("vllm-isa: "):
            used[ln[len("vllm-isa: "):]] = None
    return t, (r["prompt_tokens"] + gen) / t, r["prompt_tokens"], gen, used


def e2e(args, header, plan_log):
    """The end-to-end table (header: the line on AMX and the precision modes printed before the
    runs; plan_log: as for e2e_run)."""
    here = os.path.dirname(os.path.abspath(__file__))
    runner_dir = os.path.normpath(os.path.join(here, "..", "..", "scripts"))
    runner = os.path.join(runner_dir, "vllm_reference_run.py")
    names = e2e_workloads(args.e2e_only)
    e2e_check(args, runner_dir, names)
    hook_dir = os.path.join(args.e2e_dir, "vllm_vs_attnrt_hook")
    os.makedirs(hook_dir, exist_ok=True)
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
        f.write(ISA_HOOK)
    modes, plain = args.modes, args.modes == ["exact"]
    label = (lambda m: "attnrt") if plain else (lambda m: f"attnrt {m}")
    heads = ["vLLM s", "vLLM tok/s"] + [h for m in modes for h in (
        f"{label(m)} s", f"{label(m)} tok/s", "ratio" if plain else f"ratio ({m})")]
    lines = ["| workload | round | " + " | ".join(heads) + " |",
             "|---|---|" + "---|" * len(heads)]
    print(header, flush=True)
    medians, reports = [], []
    for w in names:
        ratios = {m: [] for m in modes}
        seen = {}
        for rnd in range(1, args.rounds + 1):
            t_v, tps_v, prompt, gen, used = e2e_run(args, runner, hook_dir, w, "vllm", rnd,
                                                    plan_log)
            seen.setdefault("vLLM", {}).update(used)
            cells = [f"{t_v:.2f}", f"{tps_v:.0f}"]
            for m in modes:
                t_a, tps_a, prompt_a, gen_a, used = e2e_run(args, runner, hook_dir, w, m, rnd,
                                                            plan_log)
                if (prompt_a, gen_a) != (prompt, gen):
                    raise SystemExit(f"workload {w}: vLLM ran {prompt} prompt and {gen} new tokens, "
                                     f"attnrt {m} {prompt_a} and {gen_a}")
                seen.setdefault(label(m), {}).update(used)
                ratios[m].append(t_v / t_a)
                cells += [f"{t_a:.2f}", f"{tps_a:.0f}", f"{t_v / t_a:.2f}"]
            lines.append(f"| {w}: {WORKLOADS[w][0]} ({prompt} prompt, {gen} new tokens) | {rnd} | "
                         + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
        medians.append(f"{w}: median ratio " + ", ".join(
            ("" if plain else f"{m} ") + f"{statistics.median(ratios[m]):.2f}" for m in modes) +
            f" over {args.rounds} round(s)")
        reports.append(f"{w}: " + "; ".join(f"{who} " + ", ".join(
            k if n is None else f"{k} ({n} plans)" for k, n in used.items())
            for who, used in seen.items()))
    return "\n".join(lines + [""] + medians + ["", "reported by the runs:"] + reports)


def add_arguments(p, dtypes, prefill_chunk):
    """The flags of the end-to-end runs (dtypes: the names --e2e-dtype takes; prefill_chunk: the
    default of --e2e-max-batched-tokens, the chunk of vllm_vs_attnrt.py --prefill)."""
    p.add_argument("--e2e", default=None, metavar="MODEL_DIR", help="end-to-end tokens/s instead")
    p.add_argument("--e2e-dir", default="/tmp", help="where the end-to-end runs write JSON and logs")
    p.add_argument("--e2e-only", default=None, metavar="a,b,c",
                   help="these workloads only (mixed = a, long = b)")
    p.add_argument("--rounds", type=int, default=2, help="end-to-end rounds (default: 2)")
    p.add_argument("--e2e-dtype", choices=dtypes, default="bfloat16")
    p.add_argument("--e2e-max-batched-tokens", type=int, default=prefill_chunk,
                   help=f"tokens per engine step, the prefill chunk (default: {prefill_chunk})")
    p.add_argument("--e2e-args", default="", metavar="OPTIONS",
                   help="more scripts/vllm_reference_run.py options for every run, after the "
                        "workload's (which they override), e.g. \"--num-prompts 2 --gen-tokens 8\"")


def check_arguments(p, args):
    """p.error for an end-to-end flag out of range."""
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
