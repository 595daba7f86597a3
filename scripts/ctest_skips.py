#!/usr/bin/python3
"""Says which ctest tests were skipped and why, from ctest's log of the last run.

    scripts/ctest_skips.py BUILD_DIR | LastTest.log

ctest counts a GoogleTest case that calls GTEST_SKIP as skipped ("***Skipped") but shows its
message only in the log (BUILD_DIR/Testing/Temporary/LastTest.log). This prints one line per
distinct reason, with how many tests it skipped and the first few of their names, e.g.

    ctest: 59 of 241 tests skipped
      59  GPU test skipped: no CUDA device (cudaGetDeviceCount: no CUDA-capable device is detected)
          e.g. Codecs/CheckpointCodec.StoreThenLoad/int8_bf16_scale_fp32_active_small, ...

and "ctest: none of N tests skipped" otherwise. Exit status 0, or 2 when the log cannot be read.
"""
import os
import re
import sys

BLOCK = re.compile(r"^\d+/\d+ Testing: (.+)$", re.M)


def skips(text):
    """(test count, {reason: [test names]}) from the text of a LastTest.log."""
    starts = [(m.start(), m.group(1).strip()) for m in BLOCK.finditer(text)]
    reasons = {}
    for i, (at, name) in enumerate(starts):
        block = text[at:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        if "Skip regular expression found" not in block:
            continue
        # GoogleTest prints "<file>:<line>: Skipped", the message, then "[  SKIPPED ] <name> (".
        m = re.search(r": Skipped\n(.*?)\n\[  SKIPPED \]", block, re.S)
        reason = " ".join(m.group(1).split()) if m and m.group(1).strip() else "(no message)"
        reasons.setdefault(reason, []).append(name)
    return len(starts), reasons


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[0] + "\nusage: scripts/ctest_skips.py BUILD_DIR | LastTest.log")
    path = sys.argv[1]
    if os.path.isdir(path):
        path = os.path.join(path, "Testing", "Temporary", "LastTest.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"ctest_skips.py: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    total, reasons = skips(text)
    skipped = sum(len(v) for v in reasons.values())
    if not skipped:
        print(f"ctest: none of {total} tests skipped")
        return
    print(f"ctest: {skipped} of {total} tests skipped")
    for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        more = f", ... ({len(names) - 3} more)" if len(names) > 3 else ""
        print(f"  {len(names):3d}  {reason}\n       e.g. {', '.join(names[:3])}{more}")


if __name__ == "__main__":
    main()
