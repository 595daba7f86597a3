#!/usr/bin/env python3
"""Compares two summary JSON files (statecheck --summary, or a suite's summary.json) key by key.

Timing keys (wall times, GB/s, fractions of copy, latencies, throughputs and the bench group)
vary from run to run and are left out, and so are the objects beside the metrics ("meta",
"units", "renamed", "thresholds"); every other key must be identical, value for value (NaN
equals NaN). Keys of the previous release (codec keys without the "codec." prefix, "cuda.*") are
compared under their current names, so a summary written before the rename compares with one
written after it. Prints each differing or missing key with its relative difference, then a count.
Exit 0 when the deterministic keys agree, 1 otherwise, 2 on unreadable input.

usage: scripts/compare_summaries.py OLD.json NEW.json
"""
import json
import math
import sys

TIMING = ("bench.", "wall_s", "seconds", "capacity.cuda", "per_s", "gbps", "fraction_of_copy",
          "_ms", "rps")
NOT_METRICS = ("meta", "units", "renamed", "thresholds")
# First parts of the codec keys of the previous release (experiments/summary_keys.h).
CODECS = ("fp32", "bf16", "int8", "int8_bf16_scale", "int8_fp32_scale", "fp8_e4m3",
          "fp8_e4m3_raw", "fp8_e4m3_bf16_scale", "fp8_e4m3_fp32_scale")


def current_key(key):
    """The current name of a previous-release key (experiments/summary_keys.cpp)."""
    if key.startswith("cuda.chain."):
        return "chain.cuda." + key[len("cuda.chain."):]
    if key.startswith("cuda."):
        return "codec." + key
    if key.split(".", 1)[0] in CODECS and "." in key:
        return "codec." + key
    return key


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
    return {current_key(k): (v.get("value") if isinstance(v, dict) else v)
            for k, v in data.items() if k not in NOT_METRICS}


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
