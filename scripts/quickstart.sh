#!/usr/bin/env bash
# Quick start: builds only what the main job needs (the runtime, the CPU plugins and plugin-inspect;
# no tests, benchmarks, bindings or CUDA plugins) into build-quick/, prints one line per plugin it
# discovered, then runs the main job: a Llama-3-8B attention layer (prompt, then decode steps)
# through the runtime, checked against the scalar kernel of the same algorithm. Extra arguments go
# to `plugin-inspect run`. `scripts/test.sh` builds and tests everything, in build/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-quick"
"$root/scripts/setup.sh" --runtime "$build"

echo
echo "== plugins (details: $build/bin/plugin-inspect list)"
"$build/bin/plugin-inspect" list --json | python3 -c '
import json, sys
listing = json.load(sys.stdin)
for p in listing["plugins"]:
    kernels = p["kernels"]
    state = "available" if p["available"] else "unavailable: " + p["reason"]
    ops = ", ".join(sorted({k["op"] for k in kernels}))
    top = (kernels[0]["name"] + " ranks first") if kernels else "no kernels"
    print("%s %s: %s; %d kernels (%s), %s" % (p["name"], p["version"], state, len(kernels), ops, top))
for d in listing["diagnostics"]:
    print("skipped %s: %s" % (d["path"], d["message"]))
'
echo
echo "== main job"
"$build/bin/plugin-inspect" run --model llama-3-8b --context 512 --steps 16 "$@"
