#!/usr/bin/env python3
"""Reads test-backend-ops' output for FLASH_ATTN_EXT on attnrt's ggml backend (docs/llama-cpp.md).

Prints how many cases attnrt computed and passed and how many it declined, grouped by why (the K/V
types, head sizes), and fails (exit 1) when a case failed, when no case was computed, or when
attnrt declined a case it serves: K and V each of f32, f16, bf16 (any head size) or q8_0, q4_0
(head sizes multiples of 32), the same type or two, head sizes equal or not (ALiBi, softcap, sinks,
GQA ratios, strides and lengths included, sparse masks (n_kv_max) too).
Usage: ggml_suite_summary.py LOG
"""

import collections
import re
import sys

CASE = re.compile(r"^\s*FLASH_ATTN_EXT\((?P<params>.*)\): (?P<result>.*)$")
SERVED_TYPES = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32}  # head size multiple


def params_of(text):
    out = {}
    for m in re.finditer(r"(\w+)=(\[[^\]]*\]|[^,]*)", text):
        out[m.group(1)] = m.group(2)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    passed, failed, declined, should_serve = 0, [], collections.Counter(), []
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        for line in f:
            m = CASE.match(re.sub(r"\x1b\[[0-9;]*m", "", line))
            if not m:
                continue
            p, result = params_of(m.group("params")), m.group("result").strip()
            if result.startswith("OK"):
                passed += 1
            elif result.startswith("not supported"):
                kt, vt, hsk, hsv = p["type_K"], p["type_V"], int(p["hsk"]), int(p["hsv"])
                unserved = sorted({t for t in (kt, vt) if t not in SERVED_TYPES})
                if unserved:
                    declined[f"{'/'.join(unserved)} K or V (ggml block quantization)"] += 1
                elif hsk % SERVED_TYPES[kt] or hsv % SERVED_TYPES[vt]:
                    declined["K or V head size not a multiple of its blocks' 32"] += 1
                else:
                    should_serve.append(m.group("params"))
            else:
                failed.append(line.strip())
    total = passed + len(failed) + sum(declined.values()) + len(should_serve)
    print(f"ggml FLASH_ATTN_EXT: {total} cases; attnrt computed {passed + len(failed)}, "
          f"{passed} passed, {len(failed)} failed; declined {sum(declined.values()) + len(should_serve)}:")
    for why, n in declined.most_common():
        print(f"  {n:5d}  {why}")
    for case in should_serve[:20]:
        print(f"  declined a case attnrt serves: FLASH_ATTN_EXT({case})")
    for line in failed[:50]:
        print(f"  FAILED: {line}")
    if failed or should_serve or passed == 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
