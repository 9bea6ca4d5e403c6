#!/usr/bin/env bash
# Builds the pinned llama.cpp (the one the llama-cpp-python 0.3.36 sdist on PyPI vendors: ggml
# 0.25.3) and, against it, attnrt's ggml backend BUILD_DIR/lib/libattnrt_ggml.so
# (docs/llama-cpp.md).
# llama.cpp is built once into a cache shared by build folders and clones
# (ATTNRT_CACHE_DIR, default ${XDG_CACHE_HOME:-~/.cache}/attnrt): shared libraries (the backend
# must use the host's own libggml-base.so), the CPU backend, test-backend-ops, llama-completion,
# llama-perplexity and llama-bench.
# Prints the llama.cpp binary folder on its last line.
# Usage: scripts/setup-ggml.sh [BUILD_DIR]   (default build; configured by scripts/setup.sh first)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
targets=(ggml-cpu test-backend-ops llama-completion llama-perplexity llama-bench)
cache="${ATTNRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnrt}/llama.cpp-$version"
src="$cache/src"
out="$cache/build"
# Built as llama.cpp's releases are, with GGML_BACKEND_DL (every backend, the CPU one included, a
# library loaded at run time: then llama.cpp's tools load GGML_BACKEND_PATH), and one CPU backend
# for this machine's instruction sets (GGML_NATIVE cannot be combined with GGML_BACKEND_DL).
# The build's flags: a change rebuilds.
flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
    avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 amx_tile:AMX_TILE \
    amx_int8:AMX_INT8 amx_bf16:AMX_BF16; do
    case "$cpu_flags" in
      *" ${pair%%:*} "*) flags+=("-DGGML_${pair#*:}=ON") ;;
      *) flags+=("-DGGML_${pair#*:}=OFF") ;;
    esac
  done
fi
stamp="$out/attnrt-stamp"
want="$version ${flags[*]} ${targets[*]}"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  start=$(date +%s)
  mkdir -p "$cache"
  if [ ! -f "$src/ggml/src/ggml-backend-impl.h" ]; then
    work="$(mktemp -d /tmp/attnrt-setup-ggml.XXXXXX)"
    trap 'rm -rf "$work"' EXIT
    # pip only downloads here (its cache keeps the sdist); a venv gives a pip wherever python3
    # has none.
    python3 -m venv "$work/venv"
    echo "setup-ggml: downloading the llama-cpp-python $version sdist"
    "$work/venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
      --no-binary :all: -d "$work" "llama-cpp-python==$version"
    sdist="$work/llama_cpp_python-$version.tar.gz"
    echo "$sha256  $sdist" | sha256sum -c --quiet -
    tar -xzf "$sdist" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp"
    rm -rf "$src"
    mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$src"
  fi
  echo "setup-ggml: building llama.cpp ($version's) into $out"
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$src" -B "$out" "${flags[@]}" "${launcher[@]}" >"$cache/configure.log" 2>&1 || {
    cat "$cache/configure.log" >&2
    exit 1
  }
  cmake --build "$out" -j "$(nproc)" --target "${targets[@]}" >"$cache/build.log" 2>&1 || {
    tail -50 "$cache/build.log" >&2
    exit 1
  }
  echo "$want" >"$stamp"
  echo "setup-ggml: llama.cpp built in $(($(date +%s) - start)) s"
fi

# AUTO, not ON: a build folder configured here still configures after the cache is removed (the
# target is then missing, and the build below says so).
cmake -S "$root" -B "$build_dir" -DATTNRT_BUILD_GGML=AUTO -DATTNRT_GGML_SOURCE_DIR="$src" \
  -DATTNRT_GGML_LIBRARY="$out/bin/libggml-base.so" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target attnrt_ggml
echo "$out/bin"
