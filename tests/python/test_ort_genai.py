"""A model exported by ONNX Runtime GenAI's model builder, generated with onnxruntime_genai with and
without libattnrt_onnxruntime.so (docs/onnxruntime.md, "ONNX Runtime GenAI").

A seeded random Llama checkpoint (scripts/make-llama-checkpoint.py, with its word-level tokenizer:
the builder reads one) is exported offline by `python -m onnxruntime_genai.models.builder -p fp32
-e cpu`: packed QKV GroupQueryAttention nodes with rotary embedding, on GenAI's shared past/present
buffer. Greedy generation of 64 tokens after prompts of 16 and 2000 tokens must give the same tokens
and float32 logits within 1e-4, and the library must have served every GroupQueryAttention node of
every forward pass. With the library's test-only fault switch the comparison must fail.

Needs onnxruntime_genai (scripts/setup-genai.sh BUILD_DIR makes a venv with it and the builder's
needs; scripts/test-genai.sh runs this file there): skipped when it is not importable, unless
ATTNRT_REQUIRE_GENAI=1.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("ATTNRT_REQUIRE_GENAI") == "1":  # set by scripts/test-genai.sh
    import onnxruntime_genai as og
else:
    og = pytest.importorskip(
        "onnxruntime_genai",
        reason="onnxruntime_genai is not importable: scripts/setup-genai.sh BUILD_DIR makes a venv "
        "with it, and scripts/test-genai.sh BUILD_DIR runs this test there")

import attnrt_runner  # noqa: E402,F401  (puts the build's attnrt package on sys.path)
import attnrt.onnxruntime as attnrt_ort  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
try:
    BUILT_LIBRARY = attnrt_ort.library_path()
except FileNotFoundError as e:
    if os.environ.get("ATTNRT_REQUIRE_ONNXRUNTIME_OPS") == "1":
        raise
    pytest.skip(str(e), allow_module_level=True)

# Llama architecture, small: 2 layers, hidden 256, 4 query heads and 2 KV heads of size 64.
CHECKPOINT_ARGS = ["--layers", "2", "--hidden", "256", "--heads", "4", "--kv-heads", "2",
                   "--head-dim", "64", "--intermediate", "512", "--vocab", "1024",
                   "--max-pos", "8192", "--qk-std", "0.08", "--lm-head-std", "0.2", "--tokenizer"]
VOCAB = 1024
LIBRARY_NAME = attnrt_ort.LIBRARY_NAME


def export_model(work: Path) -> Path:
    """Writes the checkpoint and exports it with GenAI's model builder (offline); returns the model
    folder, holding a copy of the library (GenAI loads custom_ops_library only from inside the
    model folder or the working directory, symlinks resolved)."""
    hf, out = work / "hf", work / "onnx"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make-llama-checkpoint.py"), str(hf),
                    *CHECKPOINT_ARGS], check=True, capture_output=True, text=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
         "-p", "fp32", "-e", "cpu", "-c", str(work / "cache")],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    shutil.copy2(BUILT_LIBRARY, out / LIBRARY_NAME)
    return out


def gqa_nodes(model_dir: Path) -> int:
    import onnx

    model = onnx.load(str(model_dir / "model.onnx"), load_external_data=False)
    return sum(1 for n in model.graph.node
               if n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft")


def load_model(model_dir: Path, with_library: bool):
    config = og.Config(str(model_dir))
    if with_library:
        # Relative to the model folder; the same as "custom_ops_library" written into
        # genai_config.json's model.decoder.session_options.
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "custom_ops_library": LIBRARY_NAME}}}}))
    return og.Model(config)


def generate(model, prompt: np.ndarray, new_tokens: int) -> tuple[list[int], np.ndarray]:
    """Greedy generation from token ids; returns (tokens, the float32 logits each came from)."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt.astype(np.int32))
    tokens, logits = [], []
    while not generator.is_done():
        # The logits of the last token appended (running the model on it first when needed),
        # which generate_next_token then picks from.
        logits.append(np.array(generator.get_logits(), np.float32).reshape(-1, VOCAB)[-1])
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        assert int(logits[-1].argmax()) == tokens[-1], "logits read are not the token's"
    assert len(tokens) == new_tokens, (len(tokens), new_tokens)
    return tokens, np.stack(logits)


def compare_generation(model_dir: Path, prompt_length: int, new_tokens: int,
                       seed: int = 0) -> tuple[float, bool, int, int]:
    """(max |logits difference|, same tokens, library runs, runs expected: every GQA node of
    every forward pass, the prompt's and one per token after the first)."""
    prompt = np.random.default_rng(seed).integers(3, VOCAB, prompt_length)
    ref_tokens, ref_logits = generate(load_model(model_dir, False), prompt, new_tokens)
    library_model = load_model(model_dir, True)
    before = attnrt_ort.runs()
    tokens, logits = generate(library_model, prompt, new_tokens)
    runs = attnrt_ort.runs() - before
    return (float(np.abs(logits - ref_logits).max()), tokens == ref_tokens, runs,
            gqa_nodes(model_dir) * new_tokens)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, monkeypatch_module) -> Path:
    out = export_model(tmp_path_factory.mktemp("genai"))
    # attnrt.onnxruntime.runs() reads the counter of the copy GenAI loads.
    monkeypatch_module.setenv("ATTNRT_ONNXRUNTIME_LIBRARY", str(out / LIBRARY_NAME))
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_export_has_group_query_attention(model_dir):
    assert gqa_nodes(model_dir) == 2
    config = json.loads((model_dir / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True


@pytest.mark.parametrize("prompt_length", [16, 2000])
def test_greedy_generation_matches_builtin(model_dir, prompt_length):
    error, same_tokens, runs, expected = compare_generation(model_dir, prompt_length, 64)
    assert runs == expected, f"library served {runs} GroupQueryAttention runs, expected {expected}"
    assert same_tokens, f"prompt {prompt_length}: tokens differ (max logit error {error:.3g})"
    assert error <= 1e-4, f"prompt {prompt_length}: max logit error {error:.3g} > 1e-4"


def test_negative_control_fault_is_detected(model_dir):
    """With ATTNRT_ONNXRUNTIME_TEST_FAULT=output (read once per process: one output element
    changed per run) the same comparison must fail."""
    code = ("import sys; from pathlib import Path; sys.path[:0] = %r; import test_ort_genai as t; "
            "error, same, runs, expected = t.compare_generation(Path(%r), 16, 8); "
            "print('RESULT', error, same, runs, expected)" % ([str(Path(__file__).parent)],
                                                            str(model_dir)))
    env = {**os.environ, "ATTNRT_ONNXRUNTIME_TEST_FAULT": "output",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    _, error, _, runs, expected = line.split()
    assert int(runs) == int(expected) > 0, line  # the library ran, with the fault
    assert float(error) > 1e-4, line
