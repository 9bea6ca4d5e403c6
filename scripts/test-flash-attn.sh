#!/usr/bin/env bash
# FlashAttention's own forward tests over attnrt: tests/test_flash_attn.py of the flash-attn
# 2.7.4.post1 sdist (PyPI; downloaded once into ~/.cache/attnrt/flash-attn, its sha256 checked against PyPI's
# index), made forward-only on CPU by tests/flash_attn/forward_only.py (no reference or tolerance
# changed), run against the shim tests/flash_attn/flash_attn (FlashAttention's Python interface
# over attnrt.paged_attention_varlen), in BUILD_DIR/venv.
# Usage: scripts/test-flash-attn.sh [-k EXPR] [PYTEST ARGS...]
#   default: the slice the README's test command runs (a few minutes; see SLICE below); -k EXPR
#   selects others, -k "" the whole parametrization (hundreds of thousands of cases: hours).
# Environment: BUILD_DIR (default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
py="$build_dir/venv/bin/python"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/attnrt/flash-attn"
version=2.7.4.post1
sdist="$cache/flash_attn-$version.tar.gz"
stage="$build_dir/flash-attn"

# The slice the README's test command runs (about 7 minutes on 2 cores): the output
# tests of the padded and varlen interfaces (GQA, float16, K/V not packed) at head sizes 128 and 59
# (no multiple of 8), causal or not, local windows or not, ALiBi or not, softcap or not, sequence
# lengths up to 512 (queries longer than keys among them), dropout 0, one of the two
# `deterministic` values (attnrt is deterministic either way); and the varlen causal tests at head
# size 128 (queries longer than keys, paged keys through block_table); and flash_attn_with_kvcache
# (GQA, one split) over 64 queries and 256 cached rows at head size 59 and single-token decodes over
# 128 at head size 128: rotary embedding in the call (half or all of the head, interleaved or not),
# cache_leftpad, paged caches, new K/V rows of q's length or fewer, causal or not, local windows,
# ALiBi.
slice="(test_flash_attn_output or test_flash_attn_varlen_output) and -gqa-dtype0-False"
slice="$slice and not -0.17- and not -True-gqa-"
slice="$slice and (-128-True- or -128-False- or -59-True- or -59-False-)"
slice="(($slice) or (test_flash_attn_varlen_causal and -128- and dtype0))"
for long in 768 799 800 1023 1024 1025 2048; do slice="$slice and not -$long-"; done
slice="($slice) or (test_flash_attn_kvcache and (64-256-59- or 1-128-128-) and -gqa-1-)"

mkdir -p "$cache"
if [ ! -f "$sdist" ]; then
  echo "test-flash-attn: downloading flash-attn $version's sdist from PyPI"
  "$py" - "$version" "$sdist" <<'PY'
import hashlib, re, sys, urllib.request
version, dest = sys.argv[1:3]
index = urllib.request.urlopen("https://pypi.org/simple/flash-attn/", timeout=60).read().decode()
name = f"flash_attn-{version}.tar.gz"
m = re.search(r'href="([^"]*/' + re.escape(name) + r')#sha256=([0-9a-f]+)"', index)
if not m:
    sys.exit(f"test-flash-attn: {name} is not in PyPI's index")
data = urllib.request.urlopen(m.group(1), timeout=600).read()
if hashlib.sha256(data).hexdigest() != m.group(2):
    sys.exit(f"test-flash-attn: {name}: sha256 differs from PyPI's index")
open(dest + ".part", "wb").write(data)
import os
os.replace(dest + ".part", dest)
PY
fi
"$py" -c "import einops" 2>/dev/null || "$py" -m pip install -q "einops==0.8.1"

rm -rf "$stage"
mkdir -p "$stage/sdist"
tar xzf "$sdist" -C "$stage/sdist" --strip-components=1 \
  "flash_attn-$version/tests/test_flash_attn.py" "flash_attn-$version/flash_attn/bert_padding.py" \
  "flash_attn-$version/flash_attn/layers/rotary.py"
cp -r "$root/tests/flash_attn/flash_attn" "$root/tests/flash_attn/conftest.py" "$stage/"
cp "$stage/sdist/flash_attn/bert_padding.py" "$stage/flash_attn/"
"$py" "$root/tests/flash_attn/forward_only.py" "$stage/sdist/tests/test_flash_attn.py" \
  "$stage/test_flash_attn.py"

args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(-k "$slice"); fi
cd "$stage"
FLASH_ATTN_SDIST="$stage/sdist" PYTHONPATH="$stage:$build_dir/python" \
  "$py" -m pytest -q -p no:cacheprovider -n "$(nproc)" test_flash_attn.py "${args[@]}"
