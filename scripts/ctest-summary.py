#!/usr/bin/env python3
"""Shortens ctest's output for scripts/test.sh: reads it on stdin, keeps all of it in a log file, and
prints failures in full (their status line and output) but passes and skips only as counts. At the
end it prints one line of counts, then each skip reason once with the number of tests that gave it
(a pinned kernel that declines a case, or whose ISA this CPU lacks, is a GoogleTest skip). The skip
reasons come from the JUnit file ctest writes (--output-junit).

    ctest ... --output-on-failure --output-junit FILE | scripts/ctest-summary.py --junit FILE --log LOG
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import xml.etree.ElementTree as ET

# "  3/74 Test  #267: <name, may contain spaces> ....***Skipped   0.03 sec", "...   Passed   0.01 sec",
# "...***Failed  Error regular expression found in output. Regex=[...]  0.02 sec", ...
STATUS = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: ")
QUIET = re.compile(r"(\sPassed|\*\*\*Skipped)\s+[\d.]+ sec\s*$")
START = re.compile(r"^\s*Start\s+\d+: ")
DID_NOT_RUN = "The following tests did not run:"
LISTED = re.compile(r"^\s+\d+ - .* \((Skipped|Disabled|Not Run)\)$")
# GoogleTest: "file:line: Skipped" then the message, up to "[  SKIPPED ]".
GTEST_SKIP = re.compile(r"^.*: Skipped\n(.*?)\n\[  SKIPPED \]", re.S | re.M)


# A reason longer than this is cut (a decline names the whole problem and every kernel's reason; the
# full text stays in the log).
MAX_REASON = 240


def skip_reason(output: str) -> str:
    """The skip message's first line (GoogleTest appends its trace and the test's seed), cut to
    MAX_REASON characters."""
    match = GTEST_SKIP.search(output)
    lines = [line.strip() for line in match.group(1).splitlines()] if match else []
    lines = [line for line in lines if line]
    if not lines or lines[0].startswith("Google Test trace"):
        return "no reason given"
    reason = lines[0]
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()

    in_failure = False
    in_not_run = False
    with open(args.log, "w", encoding="utf-8") as log:
        for line in sys.stdin:
            log.write(line)
            text = line.rstrip("\n")
            if STATUS.match(text) or START.match(text):
                in_failure = bool(STATUS.match(text)) and not QUIET.search(text)
                if in_failure:
                    print(text, flush=True)
                continue
            if text.startswith(DID_NOT_RUN):
                in_not_run = True
                continue
            if in_not_run and LISTED.match(text):
                continue
            in_not_run = False
            if in_failure or (text.strip() and not LISTED.match(text)):
                print(text, flush=True)

    counts: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    try:
        suite = ET.parse(args.junit).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"ctest-summary: no JUnit results ({error}); full output in {args.log}")
        return 0
    for case in suite.iter("testcase"):
        state = case.get("status", "run")
        if case.find("failure") is not None or state == "fail":
            counts["failed"] += 1
        elif case.find("skipped") is not None or state in ("skipped", "disabled", "notrun"):
            counts["skipped"] += 1
            reasons[skip_reason(case.findtext("system-out") or "")] += 1
        else:
            counts["passed"] += 1
    total = sum(counts.values())
    print(f"ctest: {counts['passed']} passed, {counts['skipped']} skipped, {counts['failed']} failed "
          f"of {total}; full output in {args.log}")
    if reasons:
        print("skipped, by reason:")
        for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
            print(f"  {count:5d}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
