#!/usr/bin/env bash
# Fuzzes GroupQueryAttention through the public C ABI with libFuzzer (tests/fuzz/gqa_fuzzer.cpp),
# then the block pool and paged GroupQueryAttention (tests/fuzz/paged_gqa_fuzzer.cpp), then paged
# GroupQueryAttention over packed variable-length batches (tests/fuzz/paged_gqa_varlen_fuzzer.cpp),
# then sparse MLA and its metadata op (tests/fuzz/sparse_mla_fuzzer.cpp), then plugin discovery and
# dispatch facing a plugin made from the input (tests/fuzz/plugin_fuzzer.cpp), then attnrt's
# Python entry points with atheris (tests/fuzz/python_entry_fuzzer.py, over build/ and build/venv).
# Usage: scripts/fuzz.sh [SECONDS]      (default 60, shared: a sixth, at least 1 s, each for the
#                                        paged, varlen, sparse MLA, plugin and Python fuzzers, the
#                                        rest for GQA)
#
# Builds libattnrt, the cpu_x86 plugin and the fuzzers with Clang, AddressSanitizer and
# UndefinedBehaviorSanitizer (the library and the plugin instrumented too) in build-fuzz/, then runs
# the fuzzers over copies of tests/fuzz/corpus, paged_corpus, varlen_corpus, sparse_mla_corpus and
# plugin_corpus (the repository's corpora are never modified). Prints the number of executions;
# exits non-zero on a crash, a leak, a timeout or an invariant violation, with the path of the saved
# input in the output.
#   GQA_FUZZER_AVOID=...       masks known findings while fuzzing (see tests/fuzz/gqa_fuzzer.cpp)
#   ATTNRT_FUZZ_ARTIFACTS=DIR  where crash inputs go (default build-fuzz/fuzz-artifacts)
# Regression inputs (tests/fuzz/regressions and every corpus, each run once):
#   ctest --test-dir build-fuzz/tests/fuzz --output-on-failure
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS]   (a positive number of seconds, default 60)" >&2
  exit 2
fi
build_dir="$root/build-fuzz"

# ---- packages (Debian 12): the compiler, its libFuzzer/sanitizer runtimes, attnrt's build deps ----
packages=(
  clang libclang-rt-14-dev
  build-essential cmake ninja-build pkg-config ccache
  libboost-dev libboost-program-options-dev
  libcpuinfo-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# ---- configure and build ----------------------------------------------------------------------------
# libattnrt and the plugins link with -Wl,--no-undefined, so they need Clang's shared sanitizer
# runtime (-shared-libsan; GCC uses a shared libasan by default); the rpath lets every binary find it.
# fuzzer-no-link adds libFuzzer's coverage instrumentation to the library and the plugin, so that the
# fuzzer is guided by the code it tests, not only by its own.
asan_runtime="$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)"
if [ ! -f "$asan_runtime" ]; then
  echo "fuzz: Clang's ASan runtime was not found (libclang-rt-14-dev)" >&2
  exit 1
fi
link_flags="-shared-libsan -Wl,-rpath,$(dirname "$asan_runtime")"
# Line tables only, as OSS-Fuzz builds: reports keep file:line, and the instrumented kernel files
# compile in less than half the time of full debug information. Through ccache
# (scripts/ccache-launcher.sh).
source "$root/scripts/ccache-launcher.sh"
cmake -S "$root" -B "$build_dir" -G Ninja "${ccache_args[@]}" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
  -DATTNRT_SANITIZE=address,undefined,fuzzer-no-link \
  -DATTNRT_BUILD_FUZZERS=ON -DATTNRT_BUILD_TESTS=OFF -DATTNRT_BUILD_BENCH=OFF \
  -DATTNRT_BUILD_BINDINGS=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="$link_flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$link_flags" \
  -DCMAKE_MODULE_LINKER_FLAGS="$link_flags" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target gqa_fuzzer paged_gqa_fuzzer \
  paged_gqa_varlen_fuzzer sparse_mla_fuzzer plugin_fuzzer attnrt_cpu_x86 attnrt_sparse_mla

# ---- fuzz -------------------------------------------------------------------------------------------
artifacts="${ATTNRT_FUZZ_ARTIFACTS:-$build_dir/fuzz-artifacts}"
mkdir -p "$artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# fuzz NAME CORPUS SECONDS: runs build-fuzz/tests/fuzz/NAME over a copy of tests/fuzz/CORPUS.
fuzz() {
  local fuzzer="$build_dir/tests/fuzz/$1" corpus="$2" time="$3"
  local work log rc executions crash
  work="$(mktemp -d "${TMPDIR:-/tmp}/attnrt-fuzz.XXXXXX")"
  mkdir -p "$work/corpus"
  cp -R "$root/tests/fuzz/$corpus/." "$work/corpus/"
  log="$work/fuzz.log"
  echo "fuzz: running $fuzzer for ${time}s over a copy of tests/fuzz/$corpus in $work/corpus"
  set +e
  "$fuzzer" -max_total_time="$time" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work/corpus" >"$log" 2>&1
  rc=$?
  set -e
  # Everything but libFuzzer's per-input progress lines: setup, reports, final stats.
  grep -v -E '^#[0-9]+[[:space:]]' "$log" || true
  executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  echo "fuzz: $1: ${executions:-unknown} executions in ${time}s (full log: $log)"
  if [ "$rc" -ne 0 ]; then
    crash="$(sed -n 's/.*Test unit written to //p' "$log" | tail -n 1)"
    echo "fuzz: $1 FAILED (exit $rc)${crash:+; input saved to $crash}" >&2
    if [ -n "$crash" ]; then
      local verbose=GQA_FUZZER_VERBOSE
      [ "$1" != plugin_fuzzer ] || verbose=PLUGIN_FUZZER_VERBOSE
      echo "fuzz: reproduce:  $verbose=1 $fuzzer $crash" >&2
      echo "fuzz: minimize:   $fuzzer -minimize_crash=1 -max_total_time=60 $crash" >&2
    fi
    exit "$rc"
  fi
  rm -rf "$work"
}

# The total stays SECONDS (for SECONDS >= 5): 60 is 20 + 10 + 10 + 10 + 10.
sixth=$((seconds / 6 > 0 ? seconds / 6 : 1))
gqa_seconds=$((seconds - 5 * sixth > 0 ? seconds - 5 * sixth : 1))
fuzz gqa_fuzzer corpus "$gqa_seconds"
fuzz paged_gqa_fuzzer paged_corpus "$sixth"
fuzz paged_gqa_varlen_fuzzer varlen_corpus "$sixth"
fuzz sparse_mla_fuzzer sparse_mla_corpus "$sixth"
fuzz plugin_fuzzer plugin_corpus "$sixth"

# ---- the Python entry points (atheris, tests/fuzz/python_entry_fuzzer.py) ----------------------------
# Over the release build's package (build/python) in the test venv (build/venv, scripts/test.sh),
# with atheris from tests/python/requirements.txt: its corpus once (the regressions), then a sixth.
python_build="$root/build"
if [ ! -x "$python_build/venv/bin/python" ] || [ ! -f "$python_build/python/attnrt/__init__.py" ]; then
  echo "fuzz: python_entry_fuzzer needs build/venv and build/python (scripts/test.sh makes both)" >&2
  exit 1
fi
"$python_build/venv/bin/python" -m pip install -q --disable-pip-version-check \
  "$(grep -E '^atheris==' "$root/tests/python/requirements.txt")"
work="$(mktemp -d "${TMPDIR:-/tmp}/attnrt-fuzz.XXXXXX")"
cp -R "$root/tests/fuzz/python_corpus/." "$work/"
echo "fuzz: running tests/fuzz/python_entry_fuzzer.py over its corpus, then for ${sixth}s"
for pass in "-runs=0" "-max_total_time=$sixth"; do
  set +e
  PYTHONPATH="$python_build/python" "$python_build/venv/bin/python" \
    "$root/tests/fuzz/python_entry_fuzzer.py" "$pass" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$artifacts/python-" "$work" >"$work.log" 2>&1
  rc=$?
  set -e
  grep -v -E '^#[0-9]+[[:space:]]' "$work.log" | grep -v -E '^(INFO|WARNING):' || true
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: python_entry_fuzzer FAILED (exit $rc, $pass; log $work.log, inputs in $artifacts)" >&2
    echo "fuzz: reproduce:  PYTHON_FUZZER_VERBOSE=1 PYTHONPATH=build/python build/venv/bin/python" \
      "tests/fuzz/python_entry_fuzzer.py <input>" >&2
    exit "$rc"
  fi
done
rm -rf "$work" "$work.log"
echo "fuzz: no crash"
