#!/usr/bin/env bash
# Sets up, builds and runs every test.
#   scripts/test.sh            release build in build/, all tests
#   scripts/test.sh --sanitize AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir=build
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-asan
  export ATTNRT_SANITIZE=address,undefined
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
"$root/scripts/setup.sh" "$build_dir"
ctest --test-dir "$root/$build_dir" --output-on-failure -j "$(nproc)"
