#!/usr/bin/env python3
"""Checks that no include in core/, kernels/ or experiments/ points from a lower layer to a higher
one. The layers, lowest first, are listed in docs/architecture.md; each folder may include its own
files and those of lower layers only. Exit 1, listing every offending include, otherwise 0."""
import pathlib
import re
import sys

LAYERS = [
    "core/util", "core/dtype", "core/state", "core/io", "core/model", "core/working_state",
    "core/recurrence",
    "core/codec", "core/backend", "core/metrics", "core/tinylm", "core/drive", "core/pools",
    "core/cache", "core/workloads", "core/memory", "kernels", "experiments",
]


def layer_of(path):
    for rank in range(len(LAYERS) - 1, -1, -1):
        if path == LAYERS[rank] or path.startswith(LAYERS[rank] + "/"):
            return rank
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    bad = []
    for top in ("core", "kernels", "experiments"):
        for f in sorted((root / top).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".cu", ".cuh"):
                continue
            rel = f.relative_to(root).as_posix()
            src = layer_of(rel)
            if src is None:
                bad.append(f"{rel}: folder in no layer (add it to LAYERS and docs/architecture.md)")
                continue
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                m = include.match(line)
                if not m:
                    continue
                dst = layer_of(m.group(1))
                if dst is not None and dst > src:
                    bad.append(f"{rel}:{n}: includes {m.group(1)} ({LAYERS[dst]} is above {LAYERS[src]})")
    for b in bad:
        print(b)
    print(f"layers: {len(bad)} include(s) against the layer order")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
