#!/usr/bin/env bash
# Sets up and builds attnrt, lists what it discovered, then runs the main job: a Llama-3-8B
# attention layer (prompt, then decode steps) through the runtime, checked against the scalar
# reference kernel. Extra arguments go to `plugin-inspect run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" build
"$root/build/bin/plugin-inspect" list
"$root/build/bin/plugin-inspect" run --model llama-3-8b --context 512 --steps 16 "$@"
