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
    paths = [_save(fig, out, "chain_error_vs_checkpoints.png")]

    if "per_head" in g and "mean_log_decay" in g["per_head"]:
        p = g["per_head"]
        decay = -p["mean_log_decay"][()].ravel()
        ratio = p["saturation_ratio"][()].ravel()
        share = p["energy_share"][()].ravel()
        ok = np.isfinite(ratio) & (decay > 0)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.scatter(decay[ok], ratio[ok], s=4 + 2000 * share[ok], alpha=0.6,
                   label="one [layer, head]; area ~ its share of the state's energy at T")
        if "model_saturation_ratio" in p:
            model = p["model_saturation_ratio"][()].ravel()
            ax.scatter(decay[ok], model[ok], marker="x", s=10, color="gray", linewidths=0.8,
                       label="first-order contraction model of that head")
        ax.axhline(float(g["saturation_ratio"][()]), ls="--", color="C1",
                   label=f"whole state: {float(g['saturation_ratio'][()]):.3f}")
        ax.axhline(2.0, ls=":", color="gray", label="sqrt(128 / 32) = 2: no contraction")
        ax.axhline(1.0, ls=":", color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("mean decay per token, -g (natural log per token, over key channels for KDA; log scale)")
        ax.set_ylabel("saturation ratio relerr(n=128) / relerr(n=32)")
        ax.set_title(_title(f, f"chain saturation per head, drive {_attr(g, 'drive')}"))
        ax.legend(fontsize=8)
        paths.append(_save(fig, out, "chain_saturation_per_head.png"))
    return paths


def plot_kl(f, out):
    """KL(p_ref || p_variant) of the tiny LM after a state restore: along the continuation and per
    variant (experiments/kl.cpp)."""
    g = f["kl"]
    names = _strings(g["variants"])
    model = _attr(g, "model")
    floor = 1e-12  # fp32 is exactly 0: drawn at the floor of the log axis
    paths = []
    pos = g["kl_mean_position"][()]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(pos.shape[1])
    for i, n in enumerate(names):
        if n.startswith("fp32"):
            continue
        style = ":" if n == "bf16_state_pool" else "--" if "chained" in n else "-"
        ax.plot(x, np.maximum(pos[i], floor), style, label=n, lw=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("position in the continuation after the restore (bytes)")
    ax.set_ylabel("mean KL(p_ref || p_restored) (nats, log scale)")
    ax.set_title(f"KL along the continuation, {model} (chained: re-cached every "
                 f"{_attr(g, 'chain_interval_bytes')} bytes)")
    ax.legend(fontsize=7, ncol=2)
    paths.append(_save(fig, out, "kl_vs_position.png"))

    mean, p99, mx = g["mean_nats"][()], g["p99_nats"][()], g["max_nats"][()]
    top1 = g["top1_agreement"][()]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    xi = np.arange(len(names))
    ax.bar(xi - 0.2, np.maximum(mean, floor), 0.4, label="mean")
    ax.bar(xi + 0.2, np.maximum(p99, floor), 0.4, label="p99")
    ax.plot(xi, np.maximum(mx, floor), "k_", markersize=14, label="max")
    for i in xi:
        ax.annotate(f"top-1 {top1[i]:.4f}", (i, max(mx[i], floor)), fontsize=6, ha="center",
                    xytext=(0, 4), textcoords="offset points", rotation=90)
    ax.set_yscale("log")
    ax.set_ylim(floor / 3, max(float(np.max(mx)), floor) * 3e3)  # room for the top-1 labels
    ax.set_xticks(xi)
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
    ax.set_xlabel("variant (codec of the restored state)")
    ax.set_ylabel("KL(p_ref || p_restored) (nats, log scale)")
    ax.set_title(f"next-byte KL per codec, {model}")
    ax.legend(fontsize=8, loc="lower right")
    paths.append(_save(fig, out, "kl_per_codec.png"))

    pre = g["kl_mean_prefix"][()]
    plen = g["prefix_lengths"][()]
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, n in enumerate(names):
        if n.startswith("fp32") or "chained" in n:
            continue
        ax.plot(plen, np.maximum(pre[i], floor), "o-", label=n)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prefix length before the restore (bytes, log scale)")
    ax.set_ylabel("mean KL over the continuation (nats, log scale)")
    ax.set_title(f"KL vs prefix length, {model}")
    ax.legend(fontsize=7)
    paths.append(_save(fig, out, "kl_vs_prefix_length.png"))
    return paths


def plot_memory(f, out):
    """Pool sizes per shipped model (GiB) and the KV budget under both accountings
    (experiments/memory.cpp)."""
    g = f["memory"]
    names = _strings(g["models"])
    if not names:  # no shipped model fits the run's options (memory/models_not_computed)
        return []
    parts = [("active", "temporal_gib", "active: temporal"), ("active", "conv_gib", "active: conv"),
             ("checkpoint", "temporal_gib", "checkpoint: int8 temporal"),
             ("checkpoint", "scale_gib", "checkpoint: scales"), ("checkpoint", "conv_gib", "checkpoint: conv")]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
    x = np.arange(len(names))
    for pool, offset in (("active", -0.2), ("checkpoint", 0.2)):
        bottom = np.zeros(len(names))
        for p, key, label in parts:
            if p != pool:
                continue
            v = np.array([float(g[n][pool][key][()]) for n in names])
            ax.bar(x + offset, v, 0.38, bottom=bottom, label=label)
            bottom += v
    slots = [int(g[names[0]]["active"]["slots"][()]), int(g[names[0]]["checkpoint"]["slots"][()])]
    labels = [f"{n}\nTP {_attr(g[n], 'tp')}" for n in names]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlabel("model (left bar: active pool, right bar: int8 checkpoint pool)")
    ax.set_ylabel("pool memory per GPU (GiB, 2^30 bytes)")
    ax.set_title(f"state pools, A = {slots[0]}, C = {slots[1]}, temporal {_attr(g, 'temporal_dtype')}")
    ax.legend(fontsize=7)
    eng = np.array([float(g[n]["kv_tokens_engine"][()]) for n in names]) / 1e6
    cor = np.array([float(g[n]["kv_tokens_correct"][()]) for n in names]) / 1e6
    bx.bar(x - 0.2, eng, 0.38, label="engine accounting (checkpoint pool not subtracted)")
    bx.bar(x + 0.2, cor, 0.38, label="correct accounting")
    bx.set_xticks(x, labels, fontsize=7)
    bx.set_xlabel("model")
    bx.set_ylabel("KV-cache budget (million tokens per GPU)")
    bx.set_title(f"KV budget at {float(_attr(g, 'gpu_mem_gib')):.1f} GiB x {float(_attr(g, 'mem_fraction')):.2f}")
    bx.legend(fontsize=7)
    return [_save(fig, out, "memory_pools_and_kv_budget.png")]


def plot_capacity(f, out):
    """K-sweep: PROBE reuse_frac vs distinct prefixes K, bf16 single pool vs int8 checkpoint pool
    (experiments/capacity.cpp)."""
    g = f["capacity"]
    K = g["K"][()]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for mode, style in (("bf16", "o-"), ("int8", "s-")):
        if mode not in g:
            continue
        line, = ax.plot(K, g[mode]["reuse_frac"][()], style, label=f"{mode} (knee K = {int(g[mode]['knee_K'][()])})")
        ax.axvline(float(g[mode]["cacheable_states"][()]), color=line.get_color(), ls=":", lw=1,
                   label=f"{mode}: states the pool can cache ({int(g[mode]['cacheable_states'][()])})")
    ax.plot(K, g["cached_prefix_fraction"][()], "k--", lw=1, label="ceiling: Cg-aligned cached prefix fraction")
    ax.set_xlabel("distinct prefixes K (count)")
    ax.set_ylabel("reuse_frac = cached / prompt tokens (PROBE)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(_title(f, f"K-sweep, {_attr(g['int8'], 'strategy')}, A = {_attr(g['int8'], 'active_slots')}, "
                           f"C = {_attr(g['int8'], 'ckpt_slots')}, {_attr(g, 'parallel')} in flight"))
    ax.legend(fontsize=7)
    return [_save(fig, out, "capacity_reuse_vs_K.png")]


def plot_firecount(f, out):
    """Few-shot workload: cumulative dequantize loads per request, no_buffer vs extra_buffer
    (experiments/firecount.cpp)."""
    g = f["firecount"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    n = 0
    for s in ("no_buffer", "extra_buffer"):
        if s not in g:
            continue
        loads = np.cumsum(g[s]["dequant_load"][()])
        n = len(loads)
        ax.plot(np.arange(1, n + 1), loads, label=f"{s}: {int(loads[-1])} loads")
    ax.plot([1, n], [1, n], ":", color="gray", label="one load per request")
    ax.set_xlabel("request (send order; questions repeated " + str(_attr(g, "repeats")) + " times)")
    ax.set_ylabel("cumulative int8 dequantize loads (count)")
    ax.set_title(_title(f, f"few-shot: {_attr(g, 'prefix_tokens')}-token prefix + {_attr(g, 'question_tokens')}-token "
                           f"question"))
    ax.legend(fontsize=8)
    return [_save(fig, out, "firecount_dequant_loads.png")]


def plot_replay(f, out):
    """Trace replay: token hit rate per minute of trace time for every mode
    (experiments/replay.cpp)."""
    g = f["replay"]
    modes = _strings(g["modes"])
    curve = g["hit_rate_per_minute"][()]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    t = np.arange(curve.shape[1])
    for i, m in enumerate(modes):
        rate = float(g[m]["token_hit_rate"][()])
        ax.plot(t, curve[i], label=f"{m} ({rate:.3f} overall, {_attr(g[m], 'pool_contents')})")
    ax.axhline(float(g["trace_token_reuse"][()]), color="k", ls=":", lw=1,
               label=f"trace's own prefix reuse ({float(g['trace_token_reuse'][()]):.3f} of tokens)")
    ax.set_xlabel("trace time (minutes since the first request)")
    ax.set_ylabel("token hit rate of requests arriving that minute")
    ax.set_ylim(0, 1)
    ax.set_title(_title(f, f"replay of {os.path.basename(str(_attr(g, 'trace')))} ({_attr(g, 'requests')} requests)"))
    ax.legend(fontsize=7)
    drawn = [_save(fig, out, "replay_hit_rate_over_time.png")]
    if "budget_sweep" in g:
        drawn += plot_budget_sweep(f, g["budget_sweep"], out)
    return drawn


def plot_budget_sweep(f, s, out):
    """replay --budget-sweep: token hit rate against cache memory per policy and format, with the
    fractions where the KV pool and the state pool evict (bind) marked; and the map of which
    format and online policy win at each budget (docs/cache_policies.md)."""
    fr = s["memory_fraction"][()]
    pols = _strings(s["policies"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, mode in zip(axes, ("bf16", "int8")):
        hit = s[f"{mode}_token_hit_rate"][()]
        for i, p in enumerate(pols):
            ax.plot(fr, hit[i], marker="o", ms=4, ls="--" if p == "belady" else "-",
                    label=p + (" (offline bound)" if p == "belady" else ""))
        kv, st = s[f"{mode}_kv_binds"][()], s[f"{mode}_state_binds"][()]
        for x, k, t in zip(fr, kv, st):
            if k:
                ax.axvline(x, color="tab:red", alpha=0.15, lw=6)
            if t:
                ax.plot([x], [0.01], marker="^", color="tab:purple")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("cache memory / the budget's (log scale)")
        ax.set_title(f"{mode} ({'single pool' if mode == 'bf16' else 'int8 checkpoint pool'}); "
                     "red band: KV binds, triangle: state pool binds", fontsize=8)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("token hit rate (fraction of prompt tokens served from cache)")
    fig.suptitle(_title(f, "hit rate against the memory budget"), fontsize=9)
    drawn = [_save(fig, out, "replay_budget_sweep.png")]
    # The map: per budget, the best online (format, policy) and its hit rate.
    online = [i for i, p in enumerate(pols) if p != "belady"]
    if online:
        fig, ax = plt.subplots(figsize=(9, 2.6))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for j, x in enumerate(fr):
            best = max(((s[f"{m}_token_hit_rate"][()][i][j], m, pols[i]) for m in ("bf16", "int8")
                        for i in online))
            rate, mode, pol = best
            y = 1 if mode == "int8" else 0
            ax.scatter([j], [y], s=600, color=colors[pols.index(pol) % len(colors)])
            ax.annotate(f"{pol}\n{rate:.3f}", (j, y), ha="center", va="center", fontsize=6)
        ax.set_xticks(range(len(fr)))
        ax.set_xticklabels([f"{x:g}" for x in fr])
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["bf16 wins", "int8 wins"])
        ax.set_ylim(-0.7, 1.7)
        ax.set_xlabel("cache memory / the budget's")
        ax.set_title(_title(f, "which format and online policy win at which budget"), fontsize=8)
        drawn.append(_save(fig, out, "replay_policy_format_map.png"))
    return drawn


PLOTTERS = [
    ("codec", plot_codec),
    ("chain", plot_chain),
    ("memory", plot_memory),
    ("capacity", plot_capacity),
    ("firecount", plot_firecount),
    ("replay", plot_replay),
    ("kl", plot_kl),
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
