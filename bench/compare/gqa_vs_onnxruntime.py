#!/usr/bin/env python3
"""GroupQueryAttention: attnrt (Python binding) against onnxruntime's CPU EP, in one process.

Every shape runs through both on the same inputs. Before any timing, one call of each is compared
(max abs diff of `output`, must be <= 1e-4). Then repetitions interleave the two (onnxruntime block,
attnrt block, onnxruntime block, ...); each block times `inner` consecutive calls after an untimed
pause (--pause-ms, 50 ms: onnxruntime's idle intra-op workers spin for ~35 ms after a run, and on a
small machine they would take a core from attnrt's block) and one untimed call (which wakes the
library's threads); the reported time per call is the median over the blocks. Speedup = onnxruntime / attnrt
(> 1: attnrt is faster). Times are wall-clock through each library's Python API, so they include
the Python call overhead of both (a few µs to tens of µs; it matters only for the smallest shapes).

onnxruntime: one-node com.microsoft.GroupQueryAttention model, InferenceSession with
intra_op_num_threads = --threads, inter_op_num_threads = 1, sequential execution, run through IO
binding with every input and output bound to preallocated OrtValues. Decode binds past_key and
present_key (and the values) to the *same* OrtValue, which is how ORT detects a shared past/present
buffer; the script checks that ORT really wrote into that buffer and otherwise falls back to feeding
a past of P rows and letting ORT allocate a present of P+1 rows. The mode used is printed per shape.
attnrt: attnrt.Runtime(num_threads=--threads), GqaOp.plan once, Plan.run per call; decode runs on a
shared past/present buffer (the natural decode loop).

Shapes (num_heads/kv_num_heads/head_size): Llama-3-8B 32/8/128 decode with a past of 1k, 4k, 16k,
32k rows and float32, int8 and int4 (PER_CHANNEL) caches; Llama-3-8B first prompt of 512 and 2048
tokens (float32); Qwen2.5-7B 28/4/128 decode with 4k past (float32); each at batch 1 and 8.
--float16 adds Llama-3-8B decode with a 4k and a 16k past with the whole op in float16 (query,
K/V, cache and output; onnxruntime's naive path, attnrt's flash kernels), batch 1 and 8, checked to
2e-3 (about two float16 ulps at the outputs' scale) instead of 1e-4.
Caches are warm for shapes whose KV fits in the last-level cache (both libraries alike).

    PYTHONPATH=build-bench/python python3 bench/compare/gqa_vs_onnxruntime.py --quick
    python3 bench/compare/gqa_vs_onnxruntime.py --build build-bench --threads 2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4
TOLERANCE_FLOAT16 = 2e-3
MODELS = {"llama3-8b": (32, 8, 128), "qwen2.5-7b": (28, 4, 128)}
ELEM_BYTES = {"f32": 4.0, "f16": 2.0, "int8": 1.0, "int4": 0.5}


def import_attnrt(build: str | None):
    """attnrt from PYTHONPATH, else from <build>/python (--build, ATTNRT_BUILD_DIR, build-bench,
    build)."""
    try:
        import attnrt  # noqa: F401
        return sys.modules["attnrt"]
    except ImportError:
        pass
    candidates = [build, os.environ.get("ATTNRT_BUILD_DIR"), REPO / "build-bench", REPO / "build"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "python" / "attnrt").is_dir():
            sys.path.insert(0, str(Path(candidate) / "python"))
            import attnrt
            return attnrt
    sys.exit("attnrt Python module not found: build with the bindings and pass --build DIR "
             "(the build folder holding python/attnrt) or set PYTHONPATH")


@dataclass
class Shape:
    model: str
    phase: str  # "decode" or "prefill"
    batch: int
    length: int  # decode: past rows P; prefill: S = T
    cache: str = "f32"  # f32, f16 (the whole op in float16), int8, int4

    @property
    def heads(self) -> tuple[int, int, int]:
        return MODELS[self.model]

    @property
    def label(self) -> str:
        n = f"{self.length // 1024}k" if self.length % 1024 == 0 else str(self.length)
        what = f"decode past {n} {self.cache}" if self.phase == "decode" else f"prefill S={n}"
        return f"{self.model} {what} B{self.batch}"


@dataclass
class Result:
    shape: str
    model: str
    phase: str
    batch: int
    length: int
    cache: str
    ort_mode: str
    attnrt_kernel: str
    max_abs_diff: float
    ok: bool
    ort_us: float = math.nan
    attnrt_us: float = math.nan
    speedup: float = math.nan
    reps: int = 0
    inner: int = 0
    kv_gbps_attnrt: float = math.nan
    kv_gbps_ort: float = math.nan
    ort_samples_us: list = field(default_factory=list)
    attnrt_samples_us: list = field(default_factory=list)


def shapes(quick: bool, float16: bool = False) -> list[Shape]:
    extra = [Shape("llama3-8b", "decode", b, past, "f16") for b in (1, 8) for past in (4096, 16384)]
    return shapes_float(quick) + (extra if float16 else [])


def shapes_float(quick: bool) -> list[Shape]:
    if quick:
        return [Shape("llama3-8b", "decode", 1, 4096, "f32"),
                Shape("llama3-8b", "decode", 1, 4096, "int8"),
                Shape("llama3-8b", "decode", 1, 4096, "int4"),
                Shape("llama3-8b", "decode", 1, 16384, "f32"),
                Shape("llama3-8b", "decode", 8, 4096, "f32"),
                Shape("llama3-8b", "prefill", 1, 512),
                Shape("qwen2.5-7b", "decode", 1, 4096, "f32")]
    out = []
    for batch in (1, 8):
        for cache in ("f32", "int8", "int4"):
            for past in (1024, 4096, 16384, 32768):
                out.append(Shape("llama3-8b", "decode", batch, past, cache))
        for s in (512, 2048):
            out.append(Shape("llama3-8b", "prefill", batch, s))
        out.append(Shape("qwen2.5-7b", "decode", batch, 4096, "f32"))
    return out


def build_model(attrs: dict, input_types: dict[str, int]):
    """A one-node com.microsoft.GroupQueryAttention model (as tests/python/gqa_model.py builds)."""
    from onnx import TensorProto, helper
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
             "total_sequence_length", "cos_cache", "sin_cache", "position_ids", "attention_bias",
             "head_sink", "k_scale", "v_scale"]
    last = max(names.index(n) for n in input_types)
    inputs = [n if n in input_types else "" for n in names[: last + 1]]
    cache_type = input_types.get("past_key", input_types["query"])
    outputs = ["output", "present_key", "present_value"]
    out_types = [input_types["query"], cache_type, cache_type]
    node = helper.make_node("GroupQueryAttention", inputs, outputs, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], "gqa",
        [helper.make_tensor_value_info(n, t, None) for n, t in input_types.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(outputs, out_types)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10  # onnx stamps a newer IR than onnxruntime 1.30 accepts
    return model


def make_problem(shape: Shape, rng: np.random.Generator):
    """(attrs, inputs) in ONNX Runtime's names; decode caches have P + 1 rows (shared buffer)."""
    n, nkv, h = shape.heads
    b = shape.batch
    s = 1 if shape.phase == "decode" else shape.length
    total = shape.length + 1 if shape.phase == "decode" else shape.length
    attrs = {"num_heads": n, "kv_num_heads": nkv}
    dtype = np.float16 if shape.cache == "f16" else np.float32
    inputs = {"query": rng.standard_normal((b, s, n * h), dtype=np.float32).astype(dtype),
              "key": rng.standard_normal((b, s, nkv * h), dtype=np.float32).astype(dtype),
              "value": rng.standard_normal((b, s, nkv * h), dtype=np.float32).astype(dtype)}
    if shape.phase == "decode":
        if shape.cache in ("f32", "f16"):
            for name in ("past_key", "past_value"):
                inputs[name] = rng.standard_normal((b, nkv, total, h), dtype=np.float32).astype(dtype)
        else:
            bits = 8 if shape.cache == "int8" else 4
            qmax = 127.0 if bits == 8 else 7.0
            attrs.update(k_quant_type="PER_CHANNEL", v_quant_type="PER_CHANNEL",
                         kv_cache_bit_width=bits)
            # Per-channel scales so that dequantized values span about [-3, 3].
            inputs["k_scale"] = (3.0 * rng.uniform(0.5, 1.5, nkv * h) / qmax).astype(np.float32)
            inputs["v_scale"] = (3.0 * rng.uniform(0.5, 1.5, nkv * h) / qmax).astype(np.float32)
            cols = h if bits == 8 else h // 2
            dtype = np.int8 if bits == 8 else np.uint8
            for name in ("past_key", "past_value"):  # any byte is a valid int8 / int4 pair
                inputs[name] = rng.integers(0, 256, (b, nkv, total, cols), dtype=np.uint8).view(dtype)
    inputs["seqlens_k"] = np.full((b,), total - 1, np.int32)
    inputs["total_sequence_length"] = np.array([total], np.int32)
    return attrs, inputs


class OrtRunner:
    """onnxruntime through IO binding; decode on a shared past/present OrtValue when ORT accepts it."""

    def __init__(self, ort, attrs: dict, inputs: dict, shape: Shape, threads: int,
                 spinning: bool):
        from onnx import TensorProto
        types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
                 np.dtype(np.int8): TensorProto.INT8,
                 np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int32): TensorProto.INT32}
        model = build_model(attrs, {k: types[v.dtype] for k, v in inputs.items()})
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(model.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
        self.ort = ort
        self.inputs = {k: np.ascontiguousarray(v.copy()) for k, v in inputs.items()}
        self.output = np.full(inputs["query"].shape, np.nan, inputs["query"].dtype)
        self.values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in self.inputs.items()}
        self.decode = shape.phase == "decode"
        self.heads = shape.heads
        self.mode = ""
        self.binding = None
        if self.decode:
            try:
                self._bind(shared=True)
                self.run()
                present = self.binding.get_outputs()[1]
                if present.data_ptr() != self.values["past_key"].data_ptr():
                    raise RuntimeError("present_key is not the past_key buffer")
                self.mode = "IO binding, shared past/present buffer"
                # Restore the inputs the verification call should see (the row it appended is the
                # same one every later call appends again).
                self.output.fill(np.nan)
            except Exception as error:  # noqa: BLE001 - fall back, and say so
                self.mode = f"past of P rows, ORT-allocated present of P+1 ({error})"
                self._bind(shared=False)
        else:
            self.mode = "IO binding, preallocated outputs"
            self._bind(shared=False)

    def _bind(self, shared: bool):
        ort = self.ort
        binding = self.session.io_binding()
        outputs = {"output": ort.OrtValue.ortvalue_from_numpy(self.output)}
        for name in list(self.inputs):
            value = self.values[name]
            if name in ("past_key", "past_value") and self.decode and not shared:
                # A past of P rows (the last row of the shared buffer is the new one).
                past = np.ascontiguousarray(self.inputs[name][:, :, :-1])
                value = ort.OrtValue.ortvalue_from_numpy(past)
                self.values[name + "_unshared"] = value
            binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output("output", outputs["output"])
        if self.decode and shared:
            binding.bind_ortvalue_output("present_key", self.values["past_key"])
            binding.bind_ortvalue_output("present_value", self.values["past_value"])
        elif self.decode:
            binding.bind_output("present_key", "cpu")
            binding.bind_output("present_value", "cpu")
        else:  # first prompt: present of S rows, preallocated
            b, s = self.inputs["query"].shape[:2]
            _, nkv, h = self.heads
            present = {n: np.empty((b, nkv, s, h), self.inputs["query"].dtype)
                       for n in ("present_key", "present_value")}
            self.presents = present
            for name, array in present.items():
                binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(array))
        self._outputs = outputs
        self.binding = binding

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding)


class AttnrtRunner:
    def __init__(self, attnrt, runtime, attrs: dict, inputs: dict, shape: Shape):
        self.inputs = {k: np.ascontiguousarray(v.copy()) for k, v in inputs.items()}
        self.output = np.full(inputs["query"].shape, np.nan, inputs["query"].dtype)
        self.op = attnrt.GqaOp(runtime, **attrs)
        if shape.phase == "decode":  # shared buffer: present is past
            present_k, present_v = self.inputs["past_key"], self.inputs["past_value"]
        else:
            shapes_ = self.op.output_shapes(self.inputs)
            present_k = np.empty(*shapes_["present_key"])
            present_v = np.empty(*shapes_["present_value"])
        self.outputs = {"output": self.output, "present_key": present_k,
                        "present_value": present_v}
        self.plan = self.op.plan(self.inputs, self.outputs)
        self.kernel = self.plan.kernel

    def run(self) -> None:
        self.plan.run(self.inputs, self.outputs)


def load_average() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def time_block(fn, inner: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(inner):
        fn()
    return (time.perf_counter_ns() - start) / 1e3 / inner


def measure(shape: Shape, args, ort, attnrt, runtime, rng) -> Result:
    attrs, inputs = make_problem(shape, rng)
    ort_runner = OrtRunner(ort, attrs, inputs, shape, args.threads, not args.ort_no_spinning)
    at_runner = AttnrtRunner(attnrt, runtime, attrs, inputs, shape)
    del inputs

    # Verify before timing: one call each on identical inputs.
    t0 = time.perf_counter()
    ort_runner.run()
    t_ort = time.perf_counter() - t0
    t0 = time.perf_counter()
    at_runner.run()
    t_at = time.perf_counter() - t0
    diff = float(np.max(np.abs(ort_runner.output.astype(np.float64) -
                               at_runner.output.astype(np.float64))))
    tolerance = TOLERANCE_FLOAT16 if shape.cache == "f16" else TOLERANCE
    ok = bool(np.isfinite(diff) and diff <= tolerance)
    result = Result(shape.label, shape.model, shape.phase, shape.batch, shape.length, shape.cache,
                    ort_runner.mode, at_runner.kernel, diff, ok)
    print(f"  check {shape.label}: max abs diff {diff:.3g} ({'ok' if ok else 'FAILED'}); "
          f"attnrt kernel {at_runner.kernel}; onnxruntime: {ort_runner.mode}", flush=True)
    if not ok:
        return result

    # Calls per block: about 20 ms per block; repetitions capped by a time budget per shape.
    estimate = max(min(t_ort, t_at), 1e-6)
    inner = max(1, min(100, round(0.02 / estimate)))
    reps = max(3, min(args.reps, int(args.budget / (inner * (t_ort + t_at)) + 1)))
    for runner in (ort_runner, at_runner):  # warm-up, untimed
        time_block(runner.run, inner)
    ort_samples, at_samples = [], []
    for _ in range(reps):
        for runner, samples in ((ort_runner, ort_samples), (at_runner, at_samples)):
            time.sleep(args.pause_ms / 1e3)
            runner.run()  # untimed: wakes this library's threads after the pause
            samples.append(time_block(runner.run, inner))
    result.reps, result.inner = reps, inner
    result.ort_us = statistics.median(ort_samples)
    result.attnrt_us = statistics.median(at_samples)
    result.speedup = result.ort_us / result.attnrt_us
    result.ort_samples_us = [round(x, 2) for x in ort_samples]
    result.attnrt_samples_us = [round(x, 2) for x in at_samples]
    if shape.phase == "decode":
        n, nkv, h = shape.heads
        kv_bytes = 2 * shape.batch * nkv * (shape.length + 1) * h * ELEM_BYTES[shape.cache]
        result.kv_gbps_attnrt = kv_bytes / result.attnrt_us / 1e3
        result.kv_gbps_ort = kv_bytes / result.ort_us / 1e3
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads of both libraries (default: os.cpu_count())")
    parser.add_argument("--reps", type=int, default=15,
                        help="interleaved repetitions per shape (fewer for slow shapes, >= 3)")
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds of timed calls per shape that cap the repetitions")
    parser.add_argument("--quick", action="store_true", help="a reduced set (< 2 minutes)")
    parser.add_argument("--float16", action="store_true",
                        help="add Llama-3-8B float16 decode shapes (the whole op in float16)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--build", help="attnrt build folder (with python/attnrt)")
    parser.add_argument("--filter", help="only shapes whose label contains this text")
    parser.add_argument("--pause-ms", type=float, default=50.0,
                        help="untimed pause before each block: onnxruntime's idle workers spin ~35 ms "
                             "after a run and would take a core from attnrt's block")
    parser.add_argument("--ort-no-spinning", action="store_true",
                        help="session.intra_op.allow_spinning=0 for onnxruntime")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.reps = min(args.reps, 7)
        args.budget = min(args.budget, 4.0)

    attnrt = import_attnrt(args.build)
    import onnxruntime as ort

    runtime = attnrt.Runtime(num_threads=args.threads)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"onnxruntime {ort.__version__} | attnrt {attnrt.version()} | threads {args.threads} "
          f"(attnrt pool {runtime.num_threads}; onnxruntime intra_op {args.threads}, inter_op 1, "
          f"sequential{', no spinning' if args.ort_no_spinning else ''}) | {cpu}, "
          f"{os.cpu_count()} logical CPUs", flush=True)
    print(f"median over interleaved blocks; speedup = onnxruntime / attnrt; "
          f"max abs diff <= {TOLERANCE:g} checked first", flush=True)

    print(f"load average at start: {load_average()}", flush=True)
    rng = np.random.default_rng(args.seed)
    selected = [s for s in shapes(args.quick, args.float16)
                if not args.filter or args.filter in s.label]
    results = []
    started = time.perf_counter()
    for shape in selected:
        results.append(measure(shape, args, ort, attnrt, runtime, rng))
        r = results[-1]
        if r.ok:
            print(f"    {r.shape}: onnxruntime {r.ort_us:.1f} µs, attnrt {r.attnrt_us:.1f} µs, "
                  f"{r.speedup:.2f}x ({r.reps} reps x {r.inner} calls)", flush=True)

    width = max(len(r.shape) for r in results) if results else 10
    print()
    modes = sorted({r.ort_mode for r in results if r.phase == "decode"})
    for mode in modes:
        print(f"onnxruntime decode: {mode}")
    print(f"{'shape':<{width}} | onnxruntime µs | attnrt µs | speedup")
    print(f"{'-' * width}-|----------------|-----------|--------")
    for r in results:
        if r.ok:
            print(f"{r.shape:<{width}} | {r.ort_us:14.1f} | {r.attnrt_us:9.1f} | {r.speedup:6.2f}x")
        else:
            print(f"{r.shape:<{width}} | {'-':>14} | {'-':>9} | FAILED (max abs diff "
                  f"{r.max_abs_diff:.3g})")
    speedups = [r.speedup for r in results if r.ok]
    geomean = math.exp(sum(math.log(x) for x in speedups) / len(speedups)) if speedups else math.nan
    elapsed = time.perf_counter() - started
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "attnrt": attnrt.version(),
                       "threads": args.threads, "cpu": cpu, "logical_cpus": os.cpu_count(),
                       "quick": args.quick, "seconds": elapsed, "tolerance": TOLERANCE,
                       "geomean_speedup": geomean, "results": [asdict(r) for r in results]},
                      f, indent=1)
    print(f"load average at end: {load_average()} (other work on the machine makes all times "
          f"noisy; compare the ratios)")
    print(f"geomean speedup vs onnxruntime: {geomean:.3f}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
