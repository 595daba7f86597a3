#!/usr/bin/python3
"""Draws every figure the given statecheck result files support, as PNG.

    scripts/plot.py RESULT.h5 [RESULT.h5 ...] --out DIR

Reads HDF5 with h5py and draws with matplotlib (Debian's /usr/bin/python3 with
python3-matplotlib and python3-h5py; see scripts/setup.sh). Each experiment group in a file
(codec, chain, memory, capacity, firecount, replay, kl, bench) has one plotting function below;
groups a file does not hold are skipped. Axes carry labels and units.
"""
import argparse
import os
import sys

try:
    import h5py
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:  # a clear message instead of a traceback
    sys.exit(f"plot.py: {e}; install python3-matplotlib python3-h5py (scripts/setup.sh)")


def _strings(ds):
    return [s.decode() if isinstance(s, bytes) else str(s) for s in ds[()]]


def _attr(obj, name, default=""):
    """An attribute as str/number (HDF5 fixed-length strings come back as bytes)."""
    v = obj.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def _title(f, what):
    model = _attr(f, "model")
    tp = _attr(f, "tp")
    return f"{what}\n{model} TP {tp}" if model else what


def _save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_codec(f, out):
    g = f["codec"]
    names = _strings(g["codecs"])
    paths = []
    state = [float(g[n]["state_relerr"][()]) for n in names]
    decode = [float(g[n]["decode_relerr"][()]) for n in names]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(names))
    floor = 1e-9  # fp32 is exactly 0: drawn at the floor of the log axis
    ax.bar(x - 0.2, [max(v, floor) for v in state], 0.4, label="state relerr ||S_hat - S||_F / ||S||_F")
    ax.bar(x + 0.2, [max(v, floor) for v in decode], 0.4, label="decode relerr ||O_hat - O||_F / ||O||_F")
    ax.set_yscale("log")
    ax.set_xticks(x, names)
    ax.set_xlabel("codec")
    ax.set_ylabel("relative error (dimensionless, log scale)")
    ax.set_title(_title(f, f"codec error, drive {_attr(g, 'drive')}"))
    ax.legend(fontsize=8)
    paths.append(_save(fig, out, "codec_error_per_codec.png"))

    if "int8" in g:
        m = g["int8"]["state_relerr_layer_head"][()]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        im = ax.imshow(m, aspect="auto", cmap="viridis")
        ax.set_xlabel("value head (per TP shard)")
        ax.set_ylabel("linear-attention layer index")
        ax.set_title(_title(f, "int8 state relative error per layer and head"))
        fig.colorbar(im, ax=ax, label="relative error (dimensionless)")
        paths.append(_save(fig, out, "codec_int8_error_layer_head.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
        if n == "fp32":
            continue
        step = g[n]["decode_relerr_step"][()]
        ax.plot(np.arange(1, len(step) + 1), step, label=n)
    ax.set_yscale("log")
    ax.set_xlabel("decode step after the restore (tokens)")
    ax.set_ylabel("decode relative error at that step")
    ax.set_title(_title(f, "decode error along time after restoring a checkpoint"))
    ax.legend(fontsize=8)
    paths.append(_save(fig, out, "codec_decode_error_vs_step.png"))
    return paths


def plot_chain(f, out):
    g = f["chain"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(g["n"][()], g["relerr"][()], "o-", label=f"drive {_attr(g, 'drive')}")
    if "ablation_no_contraction" in g:
        a = g["ablation_no_contraction"]
        ax.plot(a["n"][()], a["relerr"][()], "s--", label="ablation: g = 0, beta x 1e-3 (no contraction)")
        n = a["n"][()].astype(float)
        ax.plot(n, a["relerr"][0] * np.sqrt((n + 1) / 2), ":", color="gray", label="sqrt((n + 1) / 2) growth")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("chained checkpoints n over T tokens (log scale)")
    ax.set_ylabel("state relative error at T")
    ax.set_title(_title(f, f"chained {_attr(g, 'codec')} checkpoints, T = {_attr(g, 'tokens')}"))
    ax.legend(fontsize=8)
    return [_save(fig, out, "chain_error_vs_checkpoints.png")]


PLOTTERS = [
    ("codec", plot_codec),
    ("chain", plot_chain),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="statecheck result files (.h5)")
    p.add_argument("--out", required=True, help="directory for the PNG files")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    drawn = []
    for path in args.files:
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            sys.exit(f"plot.py: {path}: cannot open as HDF5 ({e})")
        with f:
            for group, fn in PLOTTERS:
                if group in f:
                    drawn += fn(f, args.out)
    for d in drawn:
        print(f"  plot: {d}")
    if not drawn:
        print("plot.py: no known experiment group in the given files; nothing drawn")


if __name__ == "__main__":
    main()
