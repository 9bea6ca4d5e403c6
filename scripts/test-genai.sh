#!/usr/bin/env bash
# End-to-end check of libattnrt_onnxruntime.so under ONNX Runtime GenAI (docs/onnxruntime.md):
# a seeded random Llama checkpoint exported offline by GenAI's model builder (fp32, cpu), generated
# greedily with onnxruntime_genai with and without the library (tests/python/test_ort_genai.py:
# same tokens, float32 logits within 1e-4, every GroupQueryAttention run served by the library,
# and the library's test-only fault detected).
# Usage: scripts/test-genai.sh [BUILD_DIR]   (default build; needs the build's Python package and
# libattnrt_onnxruntime.so; the venv is BUILD_DIR/genai-venv, made by scripts/setup-genai.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

"$root/scripts/setup-genai.sh" "$build_dir"
# The library and onnxruntime_genai are required here: a missing one fails instead of skipping.
ATTNRT_REQUIRE_ONNXRUNTIME_OPS=1 ATTNRT_REQUIRE_GENAI=1 ATTNRT_BUILD_DIR="$build_dir" \
  "$build_dir/genai-venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
  "$root/tests/python/test_ort_genai.py"
