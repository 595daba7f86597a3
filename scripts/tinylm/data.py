"""The corpus and its splits: the King James Version text of Debian's bible-kjv-text package
(data/tinylm/README.md), shipped gzipped in data/tinylm/kjv.txt.gz. Split by verses: blocks of
100 verses; block i is held out (test) if i % 20 == 19, validation if i % 20 == 9, training
otherwise. Imports without torch (windows imports it when called).
"""
import gzip
import hashlib
import os

import numpy as np

SPLIT_BLOCK_VERSES = 100
SPLIT_PERIOD = 20
TEST_BLOCK = 19
VAL_BLOCK = 9
CORPUS = {
    "package": "bible-kjv-text",
    "version": "4.38",
    "debian_release": "bookworm",
    "license": "public domain (King James Version text, translation of 1611; copyright expired, "
    "per the package's debian/copyright); the package's software is GPL-2+",
    "extraction": "bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' | gzip -9n",
}


def load_corpus(path):
    with open(path, "rb") as f:
        raw = f.read()
    text = gzip.decompress(raw) if path.endswith(".gz") else raw
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    parts = {"train": [], "val": [], "test": []}
    for i in range(0, len(lines), SPLIT_BLOCK_VERSES):
        block = i // SPLIT_BLOCK_VERSES
        which = "test" if block % SPLIT_PERIOD == TEST_BLOCK else "val" if block % SPLIT_PERIOD == VAL_BLOCK else "train"
        parts[which].append(b"\n".join(lines[i : i + SPLIT_BLOCK_VERSES]) + b"\n")
    splits = {k: b"".join(v) for k, v in parts.items()}
    info = {
        **CORPUS,
        "file": os.path.basename(path),
        "file_sha256": hashlib.sha256(raw).hexdigest(),
        "text_sha256": hashlib.sha256(text).hexdigest(),
        "bytes": len(text),
        "verses": len(lines),
        "split": {
            "rule": f"blocks of {SPLIT_BLOCK_VERSES} verses (lines); block i is test (held out) if "
            f"i % {SPLIT_PERIOD} == {TEST_BLOCK}, validation if i % {SPLIT_PERIOD} == {VAL_BLOCK}, "
            "training otherwise",
            "train_bytes": len(splits["train"]),
            "val_bytes": len(splits["val"]),
            "test_bytes": len(splits["test"]),
        },
    }
    return splits, info


def windows(data, length, count=None):
    """Non-overlapping windows of `length` + 1 bytes (input and shifted target) as int64."""
    import torch

    n = (len(data) - 1) // length
    if count is not None:
        n = min(n, count)
    a = np.frombuffer(data, dtype=np.uint8)
    return torch.from_numpy(np.stack([a[i * length : i * length + length + 1] for i in range(n)]).astype(np.int64))


def eval_text_of(test_bytes, size):
    cut = test_bytes[:size]
    nl = cut.rfind(b"\n")
    return cut[: nl + 1] if nl > 0 else cut
