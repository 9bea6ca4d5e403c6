#!/usr/bin/env bash
# Creates a Python venv with ONNX Runtime GenAI (onnxruntime-genai 0.18.0) and what its model
# builder needs (onnxruntime, onnx, onnx-ir, transformers, safetensors, torch), used by the GenAI
# end-to-end check (tests/python/test_ort_genai.py, scripts/test-genai.sh) and
# bench/compare/genai_ort_custom_op.py. Uses pip's cache.
# onnxruntime-genai 0.18.0 does not ship ONNX Runtime: it loads libonnxruntime.so from the
# onnxruntime package, and its METADATA requires onnxruntime>=1.31.0 (C API 24; the custom-op
# library needs 21 or newer).
# Idempotent: does nothing when the venv already imports onnxruntime_genai 0.18.0 and its builder.
# Usage: scripts/setup-genai.sh [BUILD_DIR]   (default build; the venv is BUILD_DIR/genai-venv)
#   PYTHON=python3.12    creates the venv with another interpreter
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/shared-torch.sh
source "$root/scripts/shared-torch.sh"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
python="${PYTHON:-python3}"
venv="$build_dir/genai-venv"
genai_version=0.18.0
torch_version=2.13.0
pip_flags=(-q --disable-pip-version-check)
# The model builder's imports (onnxruntime_genai/models/builder.py and builders/), pinned.
requirements=(
  "onnxruntime-genai==$genai_version" onnxruntime==1.31.1 onnx==1.23.2 onnx-ir==1.1.0
  transformers==5.19.0 tokenizers==0.23.3 safetensors==0.8.0 tqdm==4.70.1 numpy==2.4.6
  pytest==9.2.0)

ready() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$genai_version" >/dev/null 2>&1 <<'PY'
import sys
import onnxruntime_genai as og
import torch, transformers, onnx_ir, safetensors  # noqa: F401  (the builder's imports)
sys.exit(0 if og.__version__ == sys.argv[1] else 1)
PY
}

if ready; then
  echo "setup-genai: $venv already has onnxruntime-genai $genai_version"
  exit 0
fi

start=$(date +%s)
echo "setup-genai: creating $venv"
rm -rf "$venv"
mkdir -p "$build_dir"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install "${pip_flags[@]}" --only-binary=:all: "${requirements[@]}"

# torch: from the test venv when it has this version (scripts/shared-torch.sh), else installed.
if share_test_venv_torch "$venv" "$build_dir" "$torch_version"; then
  echo "setup-genai: torch $torch_version from $build_dir/venv"
else
  echo "setup-genai: installing torch==$torch_version"
  "$venv/bin/python" -m pip install "${pip_flags[@]}" "torch==$torch_version"
fi

if ! ready; then
  echo "setup-genai: $venv does not import onnxruntime_genai $genai_version and its builder" >&2
  "$venv/bin/python" -c "import onnxruntime_genai, torch, transformers, onnx_ir" >&2 || true
  exit 1
fi
echo "setup-genai: onnxruntime-genai $genai_version in $venv ($(du -sh "$venv" | cut -f1), $(($(date +%s) - start)) s)"
