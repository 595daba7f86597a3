#!/usr/bin/python3
"""Draws every figure the given statecheck result files support, as PNG.

    scripts/plot.py RESULT.h5 [RESULT.h5 ...] [SUMMARY.json] --out DIR

Reads HDF5 with h5py and draws with matplotlib (Debian's /usr/bin/python3 with
python3-matplotlib and python3-h5py; see scripts/setup.sh). Each experiment group in a file
(codec, chain, memory, capacity, firecount, replay, kl, inloop, bench) has one plotting function below;
groups a file does not hold are skipped. Axes carry labels and units. Values that are exactly 0
on a log axis are marked "exact 0" at the foot of the axis, never drawn as a bar at a floor.
Limits of data/thresholds.json are drawn where they apply to a plotted value.

The one-page summary (summary.png: bytes per cached state, state and decode error, KL and
capacity gained, per codec) reads a summary JSON: the one given, else summary.json beside the
first result file. Summary keys are read with or without their experiment prefix
("codec.int8.state_relerr" or "int8.state_relerr").
"""
import argparse
import json
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



# Policies that read the future (core/cache/eviction_policy.h policy_is_offline): drawn dashed,
# never the best online policy; belady is the bound.
OFFLINE = ("belady", "future-count")

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


HERE = os.path.dirname(os.path.abspath(__file__))


def _thresholds():
    """data/thresholds.json's limits {key: {"op", "limit", "reason"}}, or {} when unreadable."""
    try:
        with open(os.path.join(HERE, "..", "data", "thresholds.json"), encoding="utf-8") as f:
            return json.load(f).get("limits", {})
    except (OSError, ValueError):
        return {}


def _limit(key, experiment=None):
    """(op, limit) of the threshold on `key` (with or without the experiment prefix), or None."""
    limits = _thresholds()
    for k in ([f"{experiment}.{key}"] if experiment else []) + [key]:
        if k in limits:
            return limits[k]["op"], float(limits[k]["limit"])
    return None


def _log_values(ax, x, values, width, label, color, zero_text="exact 0"):
    """Bars of `values` on a log axis; an exact zero gets no bar but a marker and `zero_text` at
    the foot of the axis (set the y limits first: _log_limits)."""
    values = np.asarray(values, dtype=float)
    pos = values > 0
    ax.bar(np.asarray(x)[pos], values[pos], width, label=label, color=color)
    lo = ax.get_ylim()[0]
    for xi, v in zip(np.asarray(x)[~pos], values[~pos]):
        ax.plot([xi], [lo], marker="o", ms=7, mfc="white", mec=color, mew=1.5, clip_on=False, zorder=5)
        ax.annotate(zero_text, (xi, lo), xytext=(0, 9), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, rotation=90, color=color)


def _log_limits(ax, *arrays, below=10.0, above=3.0):
    """Log y limits spanning the positive values of `arrays`, with room below for zero markers."""
    v = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in arrays])
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        v = np.array([1.0])
    ax.set_yscale("log")
    ax.set_ylim(v.min() / below, v.max() * above)


def _draw_limit(ax, x, key, experiment=None, width=0.8, color="k"):
    """A short horizontal line at the threshold on `key` over x, with its operator."""
    lim = _limit(key, experiment)
    if lim is None or lim[1] <= 0 and ax.get_yscale() == "log":
        return False
    op, value = lim
    ax.plot([x - width / 2, x + width / 2], [value, value], color=color, lw=1.6, ls="-", zorder=6)
    ax.annotate(f"limit {op} {value:.3g}", (x + width / 2, value), xytext=(2, 0),
                textcoords="offset points", fontsize=6, va="center", color=color)
    return True


def _smooth(y, window):
    """Centred moving average over `window` points (edges averaged over the points present)."""
    y = np.asarray(y, dtype=float)
    k = np.ones(window)
    return np.convolve(y, k, "same") / np.convolve(np.ones_like(y), k, "same")


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
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(len(names))
    _log_limits(ax, state, decode, above=30)
    _log_values(ax, x - 0.2, state, 0.4, "state relerr ||S_hat - S||_F / ||S||_F", "C0")
    _log_values(ax, x + 0.2, decode, 0.4, "decode relerr ||O_hat - O||_F / ||O||_F", "C1")
    drawn = False
    for i, n in enumerate(names):
        drawn |= _draw_limit(ax, i - 0.2, f"{n}.state_relerr", "codec", 0.4)
        drawn |= _draw_limit(ax, i + 0.2, f"{n}.decode_relerr", "codec", 0.4)
    if drawn:
        ax.plot([], [], "k-", lw=1.6, label="limit (data/thresholds.json)")
    ax.set_xticks(x, names)
    ax.set_xlabel("codec")
    ax.set_ylabel("relative error (dimensionless, log scale)")
    ax.set_title(_title(f, f"codec error, drive {_attr(g, 'drive')} (exact 0: the round trip is the identity)"))
    ax.legend(fontsize=8, loc="upper left")
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
        n = a["n"][()].astype(float)
        # The reference is drawn first as a wide band, so that the ablation lying on it stays
        # visible on top of it instead of hiding it.
        ax.plot(n, a["relerr"][0] * np.sqrt((n + 1) / 2), "-", color="gray", lw=7, alpha=0.35,
                solid_capstyle="round", label="reference: ablation at n = 1 x sqrt((n + 1) / 2)")
        ax.plot(a["n"][()], a["relerr"][()], "s--", color="C1", ms=5,
                label="ablation: g = 0, beta x 1e-3 (no contraction)")
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
    paths = []
    pos = g["kl_mean_position"][()]
    interval = int(_attr(g, "chain_interval_bytes") or 0)
    exact = [n for i, n in enumerate(names) if np.all(pos[i] == 0)]
    # Three panels, each a few lines: one restore, re-cached every `interval` bytes, and a bf16
    # state pool against one bf16 and one int8 restore; an 8-byte moving average, since one
    # position's KL varies by orders of magnitude from byte to byte.
    facets = [("one restore", [n for n in names if "chained" not in n and n != "bf16_state_pool"]),
              (f"re-cached every {interval} bytes", [n for n in names if "chained" in n]),
              ("bf16 state pool vs one restore", [n for n in ("bf16", "int8_bf16_scale", "bf16_state_pool")
                                                   if n in names])]
    window = 8
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.5), sharey=True)
    x = np.arange(pos.shape[1])
    smooth = np.array([_smooth(p, window) for p in pos])
    positive = smooth[smooth > 0]
    # One colour per codec in every panel.
    bases = []
    for n in names:
        b = n.replace(f"_chained{interval}", "")
        if b not in bases:
            bases.append(b)
    for ax, (what, members) in zip(axes, facets):
        for n in members:
            i = names.index(n)
            if n in exact:
                continue
            base = n.replace(f"_chained{interval}", "")
            ax.plot(x, smooth[i], lw=1.4, color=f"C{bases.index(base) % 10}", label=base)
        if "re-cached" in what and interval > 0:
            for c in range(interval, pos.shape[1], interval):
                ax.axvline(c, color="k", ls="--", lw=0.9)
                ax.annotate("re-cached here", (c, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                            textcoords="offset points", fontsize=7)
        zeros = [n for n in members if n in exact]
        if zeros:
            ax.text(0.02, 0.03, "KL exactly 0 at every position: " + ", ".join(zeros), transform=ax.transAxes,
                    fontsize=7, va="bottom")
        ax.set_yscale("log")
        if positive.size:
            ax.set_ylim(positive.min() / 3, positive.max() * 3)
        ax.set_title(what, fontsize=9)
        ax.set_xlabel("position after the restore (bytes)")
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel(f"mean KL(p_ref || p_restored), {window}-byte moving average\n(nats, log scale)")
    fig.suptitle(f"KL along the continuation, {model}", fontsize=11)
    paths.append(_save(fig, out, "kl_vs_position.png"))

    mean, p99, mx = g["mean_nats"][()], g["p99_nats"][()], g["max_nats"][()]
    top1 = g["top1_agreement"][()]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    xi = np.arange(len(names))
    _log_limits(ax, mean, p99, mx, below=30, above=3e3)  # room for the top-1 labels
    _log_values(ax, xi - 0.2, mean, 0.4, "mean", "C0")
    _log_values(ax, xi + 0.2, p99, 0.4, "p99", "C1")
    lo = ax.get_ylim()[0]
    pos_max = mx > 0
    ax.plot(xi[pos_max], mx[pos_max], "k_", markersize=14, label="max")
    for i in xi:
        ax.annotate(f"top-1 {top1[i]:.4f}", (i, mx[i] if mx[i] > 0 else lo * 30), fontsize=6, ha="center",
                    xytext=(0, 4), textcoords="offset points", rotation=90)
    ax.set_xticks(xi)
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
    ax.set_xlabel("variant (codec of the restored state)")
    ax.set_ylabel("KL(p_ref || p_restored) (nats, log scale)")
    ax.set_title(f"next-byte KL per codec, {model} (exact 0: every distribution unchanged)")
    ax.legend(fontsize=8, loc="upper left")
    paths.append(_save(fig, out, "kl_per_codec.png"))

    floor = 1e-12  # KL vs prefix: variants with KL exactly 0 are left out of it (named in the title)
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
    """Pool sizes (GiB) and the KV budget under both accountings of the model and TP asked for
    (group "selected"), then of the shipped models with --compare-shipped (experiments/memory.cpp)."""
    g = f["memory"]
    names = _strings(g["models"])
    if not names:
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
    labels = [f"{_attr(g[n], 'model')}\nTP {_attr(g[n], 'tp')}" + (" (asked)" if n == "selected" else "")
              for n in names]
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
    for mode, marker in (("bf16", "o"), ("int8", "s")):
        for i, k in enumerate(K):
            lim = _limit(f"{mode}.K{int(k)}.reuse_frac", "capacity")
            if lim is None:
                continue
            op, value = lim
            ax.plot([k], [value], marker="^" if ">" in op else "v", color="C0" if mode == "bf16" else "C1",
                    ms=8, mfc="none", ls="none")
    ax.plot([], [], "k^", mfc="none", ls="none", label="limit: reuse_frac above (^) / below (v), data/thresholds.json")
    ax.set_ylabel("fraction of probe tokens served from cache\n(reuse_frac: cached / prompt tokens)")
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
    """Trace replay: token hit rate per minute of trace time for every mode, in two panels (pools at
    equal memory, where the KV cache binds; state pools that bind), each mode with its own marker
    and its overall rate, and the limits of data/thresholds.json on the unbounded cache's rate
    (experiments/replay.cpp)."""
    g = f["replay"]
    modes = _strings(g["modes"])
    curve = g["hit_rate_per_minute"][()]
    reuse = float(g["trace_token_reuse"][()])
    t = np.arange(curve.shape[1])
    panels = [("pools at equal memory (KV cache binds)", [m for m in modes if not m.startswith("state_bound")]),
              ("state pools bind", [m for m in modes if m.startswith("state_bound")])]
    panels = [p for p in panels if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.8), sharey=True, squeeze=False)
    markers = ["o", "s", "^", "D", "v", "P"]
    for ax, (what, members) in zip(axes[0], panels):
        for j, m in enumerate(members):
            i = modes.index(m)
            rate = float(g[m]["token_hit_rate"][()])
            same = [o for o in members[:j] if np.array_equal(curve[modes.index(o)], curve[i])]
            covered = any(np.array_equal(curve[modes.index(o)], curve[i]) for o in members[j + 1:])
            note = f", same curve as {same[0]}" if same else ""
            # A curve that a later one repeats gets large hollow markers, the repeat small filled
            # ones inside them and a dashed line: both stay visible.
            line, = ax.plot(t, curve[i], marker=markers[j % len(markers)], ms=12 if covered else 4 if same else 7,
                            mfc=None if same else "none", ls="--" if same else "-", lw=1.2,
                            label=f"{m}: {rate:.3f} overall ({_attr(g[m], 'pool_contents')}{note})")
            ax.axhline(rate, color=line.get_color(), ls=(0, (2, 4)), lw=0.8)
        unbounded = "unbounded" in members
        ax.axhline(reuse, color="k", ls=":", lw=1.2,
                   label=f"trace's own prefix reuse {reuse:.3f}" + (": upper limit of the unbounded cache" if unbounded else ""))
        lim = _limit("unbounded_over_trace_token_reuse", "replay")
        if lim is not None and unbounded:
            ax.axhline(lim[1] * reuse, color="k", ls="-.", lw=1.0,
                       label=f"lower limit of the unbounded cache: {lim[1]:g} x trace reuse (data/thresholds.json)")
        key = "state_bound.int8_minus_bf16.token_hit_rate" if "state pools" in what else "int8_minus_bf16.token_hit_rate"
        lim = _limit(key, "replay")
        if lim is not None:
            what += f"\nlimit: int8 overall minus bf16 overall {lim[0]} {lim[1]:g} (data/thresholds.json)"
        ax.set_title(what, fontsize=9)
        ax.set_xlabel("trace time (minutes since the first request)")
        ax.set_ylim(0, max(0.5, float(np.nanmax(curve)) * 1.6))
        ax.legend(fontsize=6.5, loc="upper left")
    axes[0][0].set_ylabel("token hit rate of requests arriving that minute\n(finely dotted horizontal: overall rate of the mode)")
    fig.suptitle(_title(f, f"replay of {os.path.basename(str(_attr(g, 'trace')))} ({_attr(g, 'requests')} requests)"),
                 fontsize=10)
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
            ax.plot(fr, hit[i], marker="o", ms=4, ls="--" if p in OFFLINE else "-",
                    label=p + (" (offline bound)" if p == "belady" else
                               " (offline)" if p in OFFLINE else ""))
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
    online = [i for i, p in enumerate(pols) if p not in OFFLINE]
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


def plot_inloop(f, out):
    """Working-state formats (experiments/inloop.cpp): state error along time per drive with the
    contraction model, the tiny LM's KL along the text, and the decay sweep."""
    g = f["inloop"]
    names = _strings(g["formats"])
    floor = 1e-12  # fp32 is exactly 0: drawn at the floor of the log axis
    paths = []
    for drive in ("seed-kda", "init-kda", "init-gdn", "tinylm"):
        if drive not in g:
            continue
        d = g[drive]
        cps = d["checkpoints"][()]
        st, model = d["state_relerr"][()], d["model_relerr"][()]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, n in enumerate(names):
            if n == "fp32":
                continue
            line, = ax.plot(cps, np.maximum(st[i], floor), "-", label=n, lw=1.2)
            ax.plot(cps, np.maximum(model[i], floor), ":", color=line.get_color(), lw=1)
        ax.plot(cps, np.maximum(d["checkpoint_int8_relerr"][()], floor), "k--", lw=1,
                label="one int8 checkpoint")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens t (log scale)")
        ax.set_ylabel("||S_F - S_fp32|| / ||S_fp32|| (log scale)")
        ax.set_title(f"working-state error along time, {drive} ({_attr(d, 'model')}); dotted: "
                     "contraction model")
        ax.legend(fontsize=7, ncol=2)
        paths.append(_save(fig, out, f"inloop_state_vs_time_{drive}.png"))
    if "tinylm_kl" in g:
        k = g["tinylm_kl"]
        bins = k["position_bins"][()]
        kl = k["kl_mean_bin"][()]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, n in enumerate(names):
            if n == "fp32":
                continue
            ax.plot(bins, np.maximum(kl[i], floor), "o-", ms=3, label=n)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("position in the held-out text (bytes, bin upper end, log scale)")
        ax.set_ylabel("mean KL(p_fp32 || p_F) in the bin (nats, log scale)")
        ax.set_title("tiny LM with a working-state format: KL along the text")
        ax.legend(fontsize=7, ncol=2)
        paths.append(_save(fig, out, "inloop_kl_vs_position.png"))
    if "decay_sweep" in g:
        w = g["decay_sweep"]
        dec = -w["log_decay"][()]
        st, model = w["state_relerr"][()], w["model_relerr"][()]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, n in enumerate(names):
            if n == "fp32":
                continue
            line, = ax.plot(dec, np.maximum(st[i], floor), "o-", ms=3, label=n)
            ax.plot(dec, np.maximum(model[i], floor), ":", color=line.get_color(), lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("decay strength -g per token (log scale)")
        ax.set_ylabel("state relerr at the last token (log scale)")
        ax.set_title(f"decay sweep ({_attr(w, 'tokens')} tokens, init-gdn); dotted: contraction "
                     "model")
        ax.legend(fontsize=7, ncol=2)
        paths.append(_save(fig, out, "inloop_decay_sweep.png"))
    return paths


def plot_bench(f, out):
    """bench: per kernel its figure against the ceiling measured in the same run: GB/s and the
    fraction of the copy bandwidth for memory-bound kernels; GFLOP/s and the fraction of the fp32
    FMA peak for compute-bound ones (experiments/bench.cpp, experiments/bench_gpu.cpp)."""
    g = f["bench"]
    memory = [k for k in g if isinstance(g[k], h5py.Group) and "fraction_of_copy" in g[k]]
    compute = [k for k in g if isinstance(g[k], h5py.Group) and "fraction_of_peak" in g[k]]
    if not memory and not compute:
        return []
    device = _attr(g, "device")
    copy = float(g["copy_gbps"][()]) if "copy_gbps" in g else float("nan")
    rows = [("memory", k) for k in memory] + [("compute", k) for k in compute]
    height = max(3.5, 0.22 * len(rows) + 1.8)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, height), sharey=True)
    y = np.arange(len(rows))
    for i, (bound, k) in enumerate(rows):
        if bound == "memory":
            ax.barh(i, float(g[k]["gbps"][()]), color="C0")
            bx.barh(i, 100 * float(g[k]["fraction_of_copy"][()]), color="C0")
        else:
            ax.barh(i, float(g[k]["gflops"][()]), color="C2")
            bx.barh(i, 100 * float(g[k]["fraction_of_peak"][()]), color="C2")
        frac = g[k]["fraction_of_copy" if bound == "memory" else "fraction_of_peak"][()]
        bx.annotate(f"{100 * float(frac):.0f}%", (100 * float(frac), i), xytext=(2, 0),
                    textcoords="offset points", va="center", fontsize=6)
    ax.set_yticks(y, [f"{k} ({'GFLOP/s' if b == 'compute' else 'GB/s'})" for b, k in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("GB/s (blue: memory-bound) or GFLOP/s (green: compute-bound), log scale")
    ax.set_title(f"copy bandwidth {copy:.3g} GB/s" + (
        f", fp32 FMA peak {float(g['fma_peak_gflops'][()]):.3g} GFLOP/s" if "fma_peak_gflops" in g else ""),
        fontsize=9)
    bx.axvline(100, color="k", ls=":", lw=1)
    bx.set_xlabel("% of the ceiling measured in the same run")
    bx.set_title("fraction of the ceiling (blue: of the copy bandwidth, green: of the fp32 FMA peak)",
                 fontsize=9)
    fig.suptitle(f"bench, {device}", fontsize=10)
    return [_save(fig, out, "bench_per_kernel.png")]


def _summary_values(path):
    """The numeric entries of a summary JSON: top-level numbers, and those of any nested object
    of numbers (a "values" or "metrics" object), keyed as written. Non-numeric entries (meta,
    units, thresholds) are left out."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
        elif isinstance(v, dict) and k in ("values", "metrics"):
            out.update({kk: float(vv) for kk, vv in v.items() if isinstance(vv, (int, float))})
    meta = d.get("meta") if isinstance(d.get("meta"), dict) else {}
    return out, meta


def _get(values, experiment, key, default=float("nan")):
    """A summary value by its key with the experiment prefix ("codec.int8.state_relerr") or without
    it ("int8.state_relerr")."""
    for k in (f"{experiment}.{key}", key):
        if k in values:
            return values[k]
    return default


def plot_summary(path, out, run=None):
    """One page that answers "what does caching the state in codec X cost and gain?": bytes per
    cached state, state and decode error, next-byte KL and capacity, per codec (summary.png).
    `run`: {"model", "tp"} for the title where the summary has no "meta" object."""
    values, meta = _summary_values(path)
    meta = {**(run or {}), **meta}
    codecs = [c for c in ("fp32", "bf16", "int8", "fp8_e4m3", "fp8_e4m3_raw")
              if np.isfinite(_get(values, "codec", f"{c}.bytes_per_state"))]
    if not codecs:
        return []
    x = np.arange(len(codecs))
    nbytes = np.array([_get(values, "codec", f"{c}.bytes_per_state") for c in codecs])
    state = np.array([_get(values, "codec", f"{c}.state_relerr") for c in codecs])
    decode = np.array([_get(values, "codec", f"{c}.decode_relerr") for c in codecs])
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (a, b), (c, d) = axes

    a.bar(x, nbytes / 2**20, color="C0")
    ref = nbytes[codecs.index("fp32")] if "fp32" in codecs else nbytes.max()
    for i, v in enumerate(nbytes):
        a.annotate(f"{v / 2**20:.2f} MiB\n{v / ref:.2f} x fp32", (i, v / 2**20), xytext=(0, 3),
                   textcoords="offset points", ha="center", fontsize=7)
    a.set_xticks(x, codecs)
    a.set_ylim(0, nbytes.max() / 2**20 * 1.25)
    a.set_ylabel("bytes per cached state (MiB, one sequence,\nall linear layers of one TP shard)")
    a.set_title("memory: bytes per cached state", fontsize=10)

    _log_limits(b, state, decode, above=30)
    _log_values(b, x - 0.2, state, 0.4, "state relerr ||S_hat - S||_F / ||S||_F", "C0")
    _log_values(b, x + 0.2, decode, 0.4, "decode relerr ||O_hat - O||_F / ||O||_F", "C1")
    for i, n in enumerate(codecs):
        _draw_limit(b, i - 0.2, f"{n}.state_relerr", "codec", 0.4)
        _draw_limit(b, i + 0.2, f"{n}.decode_relerr", "codec", 0.4)
    b.set_xticks(x, codecs)
    b.set_ylabel("relative error (log scale)")
    b.set_title("error after one restore (black: limits of data/thresholds.json)", fontsize=10)
    b.legend(fontsize=7, loc="upper left")

    variants = [v for v in ("fp32", "bf16", "int8_bf16_scale", "int8_fp32_scale", "fp8_e4m3", "bf16_state_pool")
                if np.isfinite(_get(values, "kl", f"{v}.mean_nats"))]
    if variants:
        kx = np.arange(len(variants))
        mean = np.array([_get(values, "kl", f"{v}.mean_nats") for v in variants])
        top1 = np.array([_get(values, "kl", f"{v}.top1_agreement") for v in variants])
        _log_limits(c, mean, above=100)
        _log_values(c, kx, mean, 0.6, "mean KL", "C2")
        for i, t in enumerate(top1):
            if np.isfinite(t) and mean[i] > 0:
                c.annotate(f"top-1 {t:.4f}", (i, mean[i]), xytext=(0, 3), textcoords="offset points",
                           ha="center", fontsize=7)
        c.set_xticks(kx, variants, rotation=20, ha="right", fontsize=8)
        c.set_ylabel("mean next-byte KL (nats, log scale)")
        c.set_title("tiny language model after one restore (top-1: same greedy byte)", fontsize=10)
    else:
        c.text(0.5, 0.5, "no kl keys in this summary", ha="center", va="center", transform=c.transAxes)
        c.set_axis_off()

    gain = ref / nbytes
    d.bar(x, gain, color="C4")
    for i, v in enumerate(gain):
        d.annotate(f"{v:.2f} x", (i, v), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    d.set_xticks(x, codecs)
    d.set_ylim(0, gain.max() * 1.6)
    d.set_ylabel("cached states per GiB, relative to fp32")
    d.set_title("capacity: states a GiB of pool holds", fontsize=10)
    lines = []
    knee_b, knee_i = _get(values, "capacity", "bf16.knee_K"), _get(values, "capacity", "int8.knee_K")
    if np.isfinite(knee_b) and np.isfinite(knee_i):
        lines.append(f"K-sweep knee: bf16 single pool {knee_b:.0f} -> int8 checkpoint pool {knee_i:.0f} "
                     f"distinct prefixes ({knee_i / knee_b:.2g} x)")
    sb, si = (_get(values, "replay", "state_bound_bf16.token_hit_rate"),
              _get(values, "replay", "state_bound_int8.token_hit_rate"))
    if np.isfinite(sb) and np.isfinite(si):
        lines.append(f"trace replay, state pools bind: token hit rate bf16 {sb:.3f} -> int8 {si:.3f}")
    eb, ei = _get(values, "replay", "bf16.token_hit_rate"), _get(values, "replay", "int8.token_hit_rate")
    if np.isfinite(eb) and np.isfinite(ei):
        lines.append(f"trace replay, KV cache binds: bf16 {eb:.3f}, int8 {ei:.3f}")
    if lines:
        d.text(0.02, 0.97, "measured in the cache model:\n" + "\n".join(lines), transform=d.transAxes,
               fontsize=7, va="top", bbox=dict(facecolor="white", edgecolor="0.7"))
    who = " ".join(f"{'TP ' if k == 'tp' else ''}{meta[k]}" for k in ("model", "tp") if k in meta)
    fig.suptitle("what caching the recurrent state costs and gains, per codec"
                 + (f" ({who})" if who else "") + f"\nfrom {os.path.basename(path)}", fontsize=11)
    return [_save(fig, out, "summary.png")]


PLOTTERS = [
    ("codec", plot_codec),
    ("chain", plot_chain),
    ("memory", plot_memory),
    ("capacity", plot_capacity),
    ("firecount", plot_firecount),
    ("replay", plot_replay),
    ("kl", plot_kl),
    ("inloop", plot_inloop),
    ("bench", plot_bench),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+",
                   help="statecheck result files (.h5) and, for summary.png, a summary (.json)")
    p.add_argument("--out", required=True, help="directory for the PNG files")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    drawn = []
    summaries = [p for p in args.files if p.endswith(".json")]
    results = [p for p in args.files if not p.endswith(".json")]
    for path in results:
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            sys.exit(f"plot.py: {path}: cannot open as HDF5 ({e})")
        with f:
            for group, fn in PLOTTERS:
                if group in f:
                    drawn += fn(f, args.out)
    if not summaries and results:
        beside = os.path.join(os.path.dirname(results[0]), "summary.json")
        if os.path.isfile(beside):
            summaries = [beside]
    run = {}
    if results:
        with h5py.File(results[0], "r") as f:
            run = {k: _attr(f, k) for k in ("model", "tp") if k in f.attrs}
    for path in summaries:
        try:
            drawn += plot_summary(path, args.out, run)
        except (OSError, ValueError) as e:
            sys.exit(f"plot.py: {path}: cannot read as a summary JSON ({e})")
    for d in drawn:
        print(f"  plot: {d}")
    if not drawn:
        print("plot.py: no known experiment group in the given files; nothing drawn")


if __name__ == "__main__":
    main()
