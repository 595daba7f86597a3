#!/usr/bin/python3
"""Writes the small state files of tests/data/states/ with tools other than statecheck's own
writers (numpy + the safetensors byte layout written by hand here, and h5py), so the tests read
files produced independently of core/io.

Model: tests/data/states/model_tiny_gdn.json (2 linear layers, 2 value heads, d_v = d_k = 16).
Values: state[l, n, h, i, j] = (((l * 7 + n * 11 + h * 3 + i * 5 + j) % 17) - 8) / 64, exact in
bf16 and fp32 (tests recompute the formula).

    /usr/bin/python3 scripts/make_state_fixtures.py tests/data/states
"""
import json
import os
import struct
import sys

import h5py
import numpy as np

L, HV, DV, DK = 2, 2, 16, 16


def values(n_states):
    l, n, h, i, j = np.meshgrid(np.arange(L), np.arange(n_states), np.arange(HV), np.arange(DV), np.arange(DK),
                                indexing="ij")
    return ((((l * 7 + n * 11 + h * 3 + i * 5 + j) % 17) - 8) / 64.0).astype(np.float32)


def write_safetensors(path, name, array, dtype):
    if dtype == "BF16":
        raw = (array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()  # exact values
    else:
        raw = array.astype(np.float32).tobytes()
    header = {name: {"dtype": dtype, "shape": list(array.shape), "data_offsets": [0, len(raw)]},
              "__metadata__": {"writer": "scripts/make_state_fixtures.py (numpy)"}}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(raw)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/states"
    os.makedirs(out, exist_ok=True)
    one = values(1)[:, 0]  # [L, HV, DV, DK]
    two = values(2)  # [L, N, HV, DV, DK]
    write_safetensors(os.path.join(out, "tiny_f32.safetensors"), "state", one, "F32")
    write_safetensors(os.path.join(out, "tiny_n2_bf16.safetensors"), "ssm_state", two, "BF16")
    with h5py.File(os.path.join(out, "tiny_f64.h5"), "w") as f:
        f.create_dataset("state", data=one.astype(np.float64))
    # Mislabelled: the header says F32 but the bytes are those of BF16 (half the length).
    write_safetensors(os.path.join(out, "tiny_mislabelled.safetensors"), "state", one, "BF16")
    p = os.path.join(out, "tiny_mislabelled.safetensors")
    data = open(p, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = data[8:8 + n].replace(b'"BF16"', b'"F32" ')
    open(p, "wb").write(data[:8] + header + data[8 + n:])
    # Truncated: the F32 file cut 100 bytes short.
    full = open(os.path.join(out, "tiny_f32.safetensors"), "rb").read()
    open(os.path.join(out, "tiny_truncated.safetensors"), "wb").write(full[:-100])


if __name__ == "__main__":
    main()
