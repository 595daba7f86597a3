#!/usr/bin/env python3
"""Compares two summary JSON files (statecheck --summary, or a suite's summary.json) key by key.

Timing keys (wall times, GB/s, fractions of copy, latencies, throughputs and the bench group)
vary from run to run and are left out; every other key must be identical, value for value (NaN
equals NaN). Prints each differing or missing key with its relative difference, then a count.
Exit 0 when the deterministic keys agree, 1 otherwise, 2 on unreadable input.

usage: scripts/compare_summaries.py OLD.json NEW.json
"""
import json
import math
import sys

TIMING = ("bench.", "wall_s", "seconds", "capacity.cuda", "per_s", "gbps", "fraction_of_copy",
          "_ms", "rps")


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"compare_summaries: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    if not isinstance(data, dict):
        print(f"compare_summaries: {path}: not a JSON object of keys", file=sys.stderr)
        sys.exit(2)
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in data.items()}


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    old, new = load(sys.argv[1]), load(sys.argv[2])
    identical = different = 0
    for key in sorted(set(old) | set(new)):
        if any(t in key for t in TIMING):
            continue
        if key not in old or key not in new:
            print(f"only in {'old' if key in old else 'new'}: {key}")
            different += 1
        elif same(old[key], new[key]):
            identical += 1
        else:
            a, b = old[key], new[key]
            rel = abs(a - b) / max(abs(a), 1e-300) if isinstance(a, (int, float)) else float("nan")
            print(f"differs: {key}: {a!r} -> {b!r} (relative {rel:.3g})")
            different += 1
    print(f"deterministic keys: {identical} identical, {different} different")
    return 0 if different == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
