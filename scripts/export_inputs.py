#!/usr/bin/env python3
"""Exports a model's linear-attention recurrence inputs to a statecheck inputs file.

The model is loaded through transformers from a local directory (no downloads), run on a text,
and every linear-attention layer's recurrence call is captured: q, k, v, g (log-space decay) and
beta exactly as the recurrence consumes them (after the short convolution and activations, and
after any gate or sigmoid the kernel would apply internally), with the layer's own outputs and
final recurrent state as reference tensors. The file layout is described in
docs/real_models.md ("The inputs file") and read by `statecheck ... --drive inputs`.

  export_inputs.py MODEL_DIR --text FILE --tokens T --out DIR     a model directory
  export_inputs.py --random FAMILY --out DIR                       a small random config (no
                                                                   weights): qwen3_next, qwen3_5,
                                                                   qwen3_5_moe, kimi_linear,
                                                                   fla_kda
  export_inputs.py --self-test DIR                                 numpy + h5py only: writes and
                                                                   checks synthetic files

Writes DIR/inputs.safetensors (inputs + reference tensors), DIR/model.json (the model's shapes
in statecheck's config schema, for --model) and DIR/export.json (what was run).

A captured final state equal to the layer's starting state means the implementation did not
write its state back (flash-linear-attention's public fused_recurrent_kda ignores
inplace_final_state=True, docs/real_models.md): the export is refused.
"""
import argparse
import hashlib
import inspect
import json
import math
import os
import struct
import sys

import numpy as np

FORMAT = "statecheck-inputs/1"
LAYER_TENSORS = ("q", "k", "v", "g", "beta", "initial_state", "o", "final_state")


class ExportError(Exception):
    """One line naming the layer or tensor at fault; the command exits with status 2."""


# ---- file writing (numpy only) ---------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    """Writes {name: float array} as F32 safetensors (sorted names, 8-byte aligned header) with
    string metadata. Format: github.com/huggingface/safetensors, README "Format"."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".partial", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".partial", path)


def write_hdf5(path, tensors, metadata):
    """The same content as HDF5: root datasets named like the tensors, metadata as root string
    attributes."""
    import h5py
    with h5py.File(path, "w") as f:
        for name in sorted(tensors):
            f.create_dataset(name, data=np.asarray(tensors[name], dtype=np.float32))
        for k, v in metadata.items():
            f.attrs[k] = str(v)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- the recurrence in numpy (fp64), the guard -------------------------------------------------

def naive_recurrence(q, k, v, g, beta, S0, l2norm, scale):
    """fp64 gated delta rule of one sequence (docs/numerics.md, "The recurrence").
    q, k [T, H, d_k]; v [T, HV, d_v]; g [T, HV] or [T, HV, d_k] (log space); beta [T, HV];
    S0 [HV, d_v, d_k]. Returns outputs [T, HV, d_v] and the final state [HV, d_v, d_k]."""
    q, k, v, g, beta = (np.asarray(x, np.float64) for x in (q, k, v, g, beta))
    T, H, dk = q.shape
    HV, dv = v.shape[1], v.shape[2]
    group = HV // H
    S = np.array(S0, np.float64, copy=True)
    o = np.zeros((T, HV, dv))
    for t in range(T):
        for h in range(HV):
            qh, kh = q[t, h // group].copy(), k[t, h // group].copy()
            if l2norm:
                qh /= math.sqrt(float(qh @ qh) + 1e-6)
                kh /= math.sqrt(float(kh @ kh) + 1e-6)
            qh *= scale
            decay = np.exp(g[t, h]) if g.ndim == 2 else np.exp(g[t, h])[None, :]
            S[h] *= decay
            u = S[h] @ kh
            S[h] += beta[t, h] * np.outer(v[t, h] - u, kh)
            o[t, h] = S[h] @ qh
    return o, S


def require_state_moved(layer, initial, final):
    """Refuses a captured final state equal, bit for bit, to the starting state: the
    implementation returned (or left) a state it never wrote. `initial` may be None (zeros)."""
    final = np.asarray(final)
    start = np.zeros_like(final) if initial is None else np.asarray(initial)
    if final.shape != start.shape:
        raise ExportError(f"layer {layer}: final state shape {final.shape} differs from the "
                          f"starting state's {start.shape}")
    if np.array_equal(final, start):
        raise ExportError(
            f"layer {layer}: the captured final state equals the starting state "
            f"({'zero' if initial is None else 'given'}): the implementation did not write its "
            f"state back (flash-linear-attention's public fused_recurrent_kda ignores "
            f"inplace_final_state=True; ask for output_final_state=True and use the returned "
            f"state; docs/real_models.md)")


def metadata_for(gate, qk_l2norm_in_kernel, scale, extra=None):
    m = {"format": FORMAT, "gate": gate,
         "qk_l2norm_applied": "false" if qk_l2norm_in_kernel else "true",
         "scale": repr(float(scale))}
    m.update(extra or {})
    return m


def statecheck_model_json(name, family, num_layers, linear_layers, H, HV, dk, dv, conv_width,
                          full_attention, source):
    """A model config in statecheck's schema (data/models/README.md)."""
    full = [i for i in range(num_layers) if i not in set(linear_layers)]
    return {"name": name, "source": source, "family": family, "num_layers": num_layers,
            "full_attention_layers": full,
            "linear": {"num_key_heads": H, "num_value_heads": HV, "head_k_dim": dk,
                       "head_v_dim": dv, "conv_width": conv_width,
                       "conv_layout": "window_first" if family == "kda" else "channels_first"},
            "full_attention": full_attention}


# ---- self-test (numpy + h5py) ------------------------------------------------------------------

def synthetic_layers(rng, layers, N, T, H, HV, dk, dv, kda, initial):
    """Inputs of the shapes of a real layer with realistic gate ranges (g = -A softplus(a + b))."""
    t = {}
    for i in layers:
        q = rng.standard_normal((N, T, H, dk)).astype(np.float32)
        k = rng.standard_normal((N, T, H, dk)).astype(np.float32)
        v = rng.standard_normal((N, T, HV, dv)).astype(np.float32)
        gshape = (N, T, HV, dk) if kda else (N, T, HV)
        A = rng.uniform(1, 16, size=(HV, 1) if kda else HV)
        g = (-A * np.log1p(np.exp(rng.standard_normal(gshape) - 4.0))).astype(np.float32)
        beta = (1 / (1 + np.exp(-rng.standard_normal((N, T, HV))))).astype(np.float32)
        t.update({f"layers.{i}.q": q, f"layers.{i}.k": k, f"layers.{i}.v": v,
                  f"layers.{i}.g": g, f"layers.{i}.beta": beta})
        if initial:
            t[f"layers.{i}.initial_state"] = (0.1 * rng.standard_normal((N, HV, dv, dk))).astype(np.float32)
    return t


def add_reference(t, layers, l2norm, scale):
    for i in layers:
        N = t[f"layers.{i}.q"].shape[0]
        HV, dv, dk = t[f"layers.{i}.v"].shape[2], t[f"layers.{i}.v"].shape[3], t[f"layers.{i}.q"].shape[3]
        outs, finals = [], []
        for n in range(N):
            S0 = t.get(f"layers.{i}.initial_state", np.zeros((N, HV, dv, dk), np.float32))[n]
            o, S = naive_recurrence(*(t[f"layers.{i}.{x}"][n] for x in ("q", "k", "v", "g", "beta")),
                                    S0, l2norm, scale)
            require_state_moved(i, S0, S)
            outs.append(o)
            finals.append(S)
        t[f"layers.{i}.o"] = np.stack(outs).astype(np.float32)
        t[f"layers.{i}.final_state"] = np.stack(finals).astype(np.float32)


def self_test(out_dir):
    """Writes, under out_dir, the files the ctest cli.inputs_* cases read (a GDN model with GVA as
    HDF5, a KDA model as safetensors, each with reference tensors from the fp64 loop above, and a
    KDA file whose stored final state never moved), and checks the guard and the loop here."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20260)
    # The guard: an unmoved state is refused; a moved one passes.
    S0 = rng.standard_normal((2, 4, 4)).astype(np.float32)
    try:
        require_state_moved(0, S0, S0.copy())
        raise SystemExit("self-test: require_state_moved accepted an unmoved state")
    except ExportError:
        pass
    require_state_moved(0, S0, S0 + 1e-3)
    # The loop against a case by hand: one token, one head, d_k = d_v = 1 without normalisation:
    # S = e^g S0 + beta (v - e^g S0 k) k, o = S q scale.
    o, S = naive_recurrence(np.full((1, 1, 1), 2.0), np.full((1, 1, 1), 0.5), np.full((1, 1, 1), 3.0),
                            np.full((1, 1), math.log(0.5)), np.full((1, 1), 0.25),
                            np.full((1, 1, 1), 4.0), False, 0.5)
    S_hand = 0.5 * 4.0 + 0.25 * (3.0 - 0.5 * 4.0 * 0.5) * 0.5
    if abs(S[0, 0, 0] - S_hand) > 1e-15 or abs(o[0, 0, 0] - S_hand * 2.0 * 0.5) > 1e-15:
        raise SystemExit(f"self-test: naive_recurrence gives {S[0, 0, 0]}, expected {S_hand}")

    scale = 1 / math.sqrt(16)
    gdn_layers = [0, 1, 2]  # 4 decoder layers, full attention in the last
    gdn = {"name": "self-test-gdn", "source": "scripts/export_inputs.py --self-test", "family": "gdn",
           "num_layers": 4, "full_attention_layers": [3],
           "linear": {"num_key_heads": 1, "num_value_heads": 2, "head_k_dim": 16, "head_v_dim": 12,
                      "conv_width": 4},
           "full_attention": {"kind": "mha", "num_kv_heads": 1, "head_dim": 16}}
    t = synthetic_layers(rng, gdn_layers, 2, 40, 1, 2, 16, 12, False, True)
    add_reference(t, gdn_layers, True, scale)
    write_hdf5(os.path.join(out_dir, "gdn.h5"), t, metadata_for("gdn", True, scale))
    with open(os.path.join(out_dir, "gdn.model.json"), "w") as f:
        json.dump(gdn, f, indent=1)

    kda_layers = [0, 2]
    kda = statecheck_model_json("self-test-kda", "kda", 3, kda_layers, 2, 2, 16, 16, 4,
                                {"kind": "mla", "kv_lora_rank": 16, "rope_dim": 8},
                                "scripts/export_inputs.py --self-test")
    t = synthetic_layers(rng, kda_layers, 1, 300, 2, 2, 16, 16, True, False)
    add_reference(t, kda_layers, True, scale)
    write_safetensors(os.path.join(out_dir, "kda.safetensors"), t, metadata_for("kda", True, scale))
    with open(os.path.join(out_dir, "kda.model.json"), "w") as f:
        json.dump(kda, f, indent=1)
    # The trap as an exporter without the guard would write it: final state left at zero.
    t["layers.2.final_state"] = np.zeros_like(t["layers.2.final_state"])
    write_safetensors(os.path.join(out_dir, "kda_unmoved.safetensors"), t,
                      metadata_for("kda", True, scale))
    print(f"export_inputs self-test: wrote {out_dir}/gdn.h5, kda.safetensors, "
          f"kda_unmoved.safetensors and their model.json")


# ---- capture from a PyTorch model ------------------------------------------------------------

# Callables through which the supported layers run their recurrence: attributes of the layer
# module (transformers' Qwen3-Next / Qwen3.5 store them on the instance) and functions of the
# layer's Python module (transformers 5.17's Kimi-Linear calls chunk_kimi_delta_attention and
# recurrent_kimi_delta_attention, flash-linear-attention's KDA layer chunk_kda and
# fused_recurrent_kda, by global name).
KERNEL_NAMES = ("chunk_gated_delta_rule", "recurrent_gated_delta_rule",
                "fused_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule",
                "torch_recurrent_gated_delta_rule", "chunk_kda", "recurrent_kda",
                "fused_recurrent_kda", "torch_chunk_kda", "torch_recurrent_kda",
                "chunk_kimi_delta_attention", "recurrent_kimi_delta_attention")


def is_linear_attention(module):
    n = type(module).__name__
    return n.endswith("GatedDeltaNet") or n.endswith("DeltaAttention")


def layer_heads(module):
    """(H, HV, d_k, d_v) of a linear-attention module, from the attribute names each family uses."""
    H = getattr(module, "num_k_heads", None) or getattr(module, "num_heads", None)
    HV = getattr(module, "num_v_heads", None) or H
    dk = getattr(module, "head_k_dim", None) or getattr(module, "head_dim", None)
    dv = getattr(module, "head_v_dim", None) or getattr(module, "head_dim", None)
    if None in (H, HV, dk, dv):
        raise ExportError(f"{type(module).__name__}: cannot read its heads and head dims")
    return int(H), int(HV), int(dk), int(dv)


def full_fp32_precision(torch):
    """fp32 matmuls and convolutions at full precision, not TF32 (10 mantissa bits): with TF32,
    transformers' chunked recurrence differs from the fp64 loop by ~1e-3 relative, which would be
    mistaken for a semantic difference. The metadata records it as matmul_precision."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def kernel_modules(module):
    """The Python modules where a linear-attention layer's kernels may live: that of its class, then
    those of its base classes from transformers or fla (a layer that inherits another model's
    forward)."""
    out = []
    for cls in type(module).__mro__:
        pymod = sys.modules.get(cls.__module__)
        if pymod is None or pymod in out:
            continue
        if cls is type(module) or pymod.__name__.startswith(("transformers.", "fla.")):
            out.append(pymod)
    return out


class Capture:
    """Forward hooks mark which layer runs; the wrapped kernels record what it consumed."""

    def __init__(self, torch, model):
        self.torch, self.current, self.inside = torch, None, False
        self.records = {}  # decoder layer index -> list of per-call dicts
        self.modules = {}
        self.restore = []  # (Python module, name, function) replaced by a wrapper
        self.shadowed = []  # (layer, name, had its own attribute, that attribute)
        self.hooks = []
        for name, module in model.named_modules():
            if not is_linear_attention(module):
                continue
            idx = getattr(module, "layer_idx", None)
            if idx is None:
                parts = name.split(".")
                idx = next(int(parts[j + 1]) for j in range(len(parts) - 1)
                           if parts[j] == "layers" and parts[j + 1].isdigit())
            idx = int(idx)
            self.modules[idx] = module
            self.hooks.append(module.register_forward_pre_hook(
                lambda m, a, i=idx: setattr(self, "current", i)))
            self.hooks.append(module.register_forward_hook(
                lambda m, a, o: setattr(self, "current", None)))
            # The kernel as the layer reaches it: an attribute of the layer, however it resolves
            # (its own, its class's taken as bound, or one served by the module's __getattr__, as
            # transformers' use_kernelized_func keeps it in _hidden_kernels), shadowed by an
            # instance attribute; or a function of the Python module of the layer's class or of a
            # base class from transformers or fla (a layer that inherits another model's forward).
            for attr in KERNEL_NAMES:
                fn = getattr(module, attr, None)
                if callable(fn) and not getattr(fn, "_statecheck_capture", False):
                    self.shadowed.append((module, attr, attr in module.__dict__,
                                          module.__dict__.get(attr)))
                    object.__setattr__(module, attr, self.wrap(fn))
            for pymod in kernel_modules(module):
                for attr in KERNEL_NAMES:
                    fn = getattr(pymod, attr, None)
                    if callable(fn) and not getattr(fn, "_statecheck_capture", False):
                        self.restore.append((pymod, attr, fn))
                        setattr(pymod, attr, self.wrap(fn))
        if not self.modules:
            raise ExportError("the model has no linear-attention layers this exporter knows "
                              "(classes ending in GatedDeltaNet or DeltaAttention)")

    def close(self):
        """Puts back every function and attribute the capture replaced and removes its hooks."""
        for pymod, attr, fn in self.restore:
            setattr(pymod, attr, fn)
        for module, attr, had, old in self.shadowed:
            if had:
                object.__setattr__(module, attr, old)
            else:
                object.__delattr__(module, attr)
        for h in self.hooks:
            h.remove()
        self.restore, self.shadowed, self.hooks = [], [], []

    def wrap(self, fn):
        def captured(*args, **kwargs):
            if self.inside or self.current is None:
                return fn(*args, **kwargs)
            layer, module = self.current, self.modules[self.current]
            names = ("q", "k", "v", "g", "beta")
            alias = {"q": "query", "k": "key", "v": "value"}
            x = {}
            for j, n in enumerate(names):
                if j < len(args):
                    x[n] = args[j]
                elif n in kwargs:
                    x[n] = kwargs[n]
                elif alias.get(n) in kwargs:
                    x[n] = kwargs[alias[n]]
                else:
                    raise ExportError(f"layer {layer}: {kernel_name(fn)} was called without '{n}'")
            asked_final = bool(kwargs.get("output_final_state", False))
            kwargs["output_final_state"] = True
            initial = kwargs.get("initial_state")
            initial_copy = None if initial is None else initial.detach().clone()
            self.inside = True
            try:
                result = fn(*args, **kwargs)
            finally:
                self.inside = False
            o, state = result[0], result[1]
            self.records.setdefault(layer, []).append(
                self.convert(layer, module, fn, x, kwargs, initial_copy, o, state))
            return (o, state if asked_final else None) + tuple(result[2:])

        captured._statecheck_capture = True
        return captured

    def convert(self, layer, module, fn, x, kwargs, initial, o, state):
        torch = self.torch
        H, HV, dk, dv = layer_heads(module)
        q, k, v, g, beta = (x[n].detach() for n in ("q", "k", "v", "g", "beta"))
        if kwargs.get("allow_neg_eigval"):
            raise ExportError(f"layer {layer}: allow_neg_eigval puts beta in [0, 2); statecheck's "
                              f"recurrence takes beta in [0, 1]")
        if kwargs.get("use_gate_in_kernel"):
            # The kernel computes the log-space decay itself; the same formula, in fp32, from
            # flash-linear-attention's reference gate functions (fla/ops/kda/gate.py).
            from fla.ops.kda import gate as kda_gate
            lower = kwargs.get("lower_bound")
            A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
            if lower is not None:
                g = kda_gate.naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound=lower)
            else:
                g = kda_gate.naive_kda_gate(g, A_log, dt_bias)
        if kwargs.get("use_beta_sigmoid_in_kernel"):
            beta = torch.sigmoid(beta.float())
        # q and k repeated to the value heads before the call (transformers' Qwen layers use
        # repeat_interleave): keep one copy per key head, after checking the copies agree.
        if q.shape[2] == HV and H < HV:
            group = HV // H
            q1, k1 = q[:, :, ::group], k[:, :, ::group]
            if not (torch.equal(q1.repeat_interleave(group, 2), q)
                    and torch.equal(k1.repeat_interleave(group, 2), k)):
                raise ExportError(f"layer {layer}: q/k have {HV} heads that are not repeats of "
                                  f"{H} key heads")
            q, k = q1, k1
        if state is None:
            raise ExportError(f"layer {layer}: {kernel_name(fn)} returned no final state although "
                              f"output_final_state=True was passed")
        # Final states come as [N, HV, d_k, d_v] unless state_v_first; statecheck keeps
        # [N, HV, d_v, d_k].
        v_first = bool(kwargs.get("state_v_first", False))
        to_vk = (lambda s: s) if v_first else (lambda s: s.transpose(-1, -2))
        final = to_vk(state.detach().float())
        init = None if initial is None else to_vk(initial.float())
        require_state_moved(layer, None if init is None else init.cpu().numpy(), final.cpu().numpy())
        scale = kwargs.get("scale")
        if scale is None:
            scale = dk ** -0.5
        f32 = lambda t: t.detach().float().cpu().numpy()
        rec = {"q": f32(q), "k": f32(k), "v": f32(v), "g": f32(g), "beta": f32(beta),
               "o": f32(o), "final_state": f32(final),
               "qk_l2norm_in_kernel": bool(kwargs.get("use_qk_l2norm_in_kernel", False)),
               "scale": float(scale), "kernel": kernel_name(fn),
               "gate": "kda" if g.dim() == 4 else "gdn"}
        if init is not None:
            rec["initial_state"] = f32(init)
        for n, want in (("q", (H, dk)), ("k", (H, dk)), ("v", (HV, dv))):
            if tuple(rec[n].shape[2:]) != want:
                raise ExportError(f"layer {layer}: captured {n} has shape {rec[n].shape}, expected "
                                  f"[N, T, {want[0]}, {want[1]}]")
        return rec


def kernel_name(fn):
    """A kernel's name: its function name, or the class of a callable object (a hub kernel)."""
    return getattr(fn, "__name__", type(fn).__name__)


def kernel_candidates(module):
    """Names on a linear-attention layer (instance or class) that look like a recurrence kernel,
    with what they are, and the kernel-like names the layer's forward uses (through decorators):
    what a capture that found no call should have wrapped."""
    words = ("kda", "delta", "chunk", "recurrent", "kernel")
    out = []
    for n in sorted(dir(module)):
        if n.startswith("__") or not any(w in n.lower() for w in words):
            continue
        where = "instance" if n in module.__dict__ else "class or __getattr__"
        try:
            kind = type(getattr(module, n, None)).__name__
        except Exception as e:  # a property that fails is reported, not raised
            kind = f"unreadable: {type(e).__name__}"
        out.append(f"{n} ({where}: {kind})")
    # The names the layer's forward itself uses (attributes and globals, nested functions too), and
    # what each is in the Python module of its definition: how it reaches its kernel.
    fwd = inspect.unwrap(getattr(type(module), "forward", None) or (lambda: None))
    code = getattr(fwd, "__code__", None)
    used, stack = [], [code] if code else []
    while stack:
        c = stack.pop()
        used += [n for n in c.co_names if any(w in n.lower() for w in words)]
        stack += [k for k in c.co_consts if hasattr(k, "co_names")]
    if used:
        glb = getattr(fwd, "__globals__", {})
        out.append("forward uses " + ", ".join(
            f"{n} (global: {type(glb[n]).__name__})" if n in glb else n
            for n in sorted(set(used))))
    return ", ".join(out) or "none"


def collect(records, layers, modules=None):
    """Turns one capture per layer into the file's tensors and metadata."""
    tensors, kinds = {}, set()
    for i in layers:
        calls = records.get(i, [])
        if len(calls) != 1:
            seen = ""
            if modules and i in modules:
                seen = (f"; {type(modules[i]).__name__} has {kernel_candidates(modules[i])}")
            raise ExportError(f"layer {i}: {len(calls)} recurrence calls captured in one forward "
                              f"pass (expected 1; is its kernel one of {', '.join(KERNEL_NAMES)}?"
                              f"{seen})")
        r = calls[0]
        kinds.add((r["gate"], r["qk_l2norm_in_kernel"], r["scale"], r["kernel"]))
        for n in LAYER_TENSORS:
            if n in r:
                tensors[f"layers.{i}.{n}"] = r[n]
    if len({k[:3] for k in kinds}) != 1:
        raise ExportError(f"layers disagree on gate kind, q/k normalisation or scale: {sorted(kinds)}")
    gate, l2, scale, _ = sorted(kinds)[0]
    return tensors, gate, l2, scale, sorted({k[3] for k in kinds})


# ---- models -----------------------------------------------------------------------------------

def random_model(family, torch, seed, layers=4):
    """A randomly initialised small model of `family` (no weights needed): 2 key heads and 4 value
    heads of d_k = d_v = 32 (KDA: 2 heads), `layers` decoder layers with full attention in the
    last one."""
    torch.manual_seed(seed)
    import transformers as tf
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  max_position_embeddings=2048, rms_norm_eps=1e-6)
    types = ["linear_attention"] * (layers - 1) + ["full_attention"]
    gdn = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
               linear_value_head_dim=32, linear_conv_kernel_dim=4, layer_types=types,
               full_attention_interval=layers)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
               shared_expert_intermediate_size=64, decoder_sparse_step=1)
    if family == "qwen3_next":
        return tf.Qwen3NextForCausalLM(tf.Qwen3NextConfig(**common, **gdn, **moe))
    if family == "qwen3_5":
        cfg = getattr(tf, "Qwen3_5TextConfig", None) or tf.Qwen3_5Config
        return tf.Qwen3_5ForCausalLM(cfg(**common, **gdn))
    if family == "qwen3_5_moe":
        cfg = getattr(tf, "Qwen3_5MoeTextConfig", None) or tf.Qwen3_5MoeConfig
        return tf.Qwen3_5MoeForCausalLM(cfg(**common, **gdn, **moe))
    if family == "kimi_linear":
        kda_layers = list(range(1, layers))  # 1-based, as Kimi's config lists them
        cfg = tf.KimiLinearConfig(
            **common, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=32,
            linear_value_head_dim=32, linear_conv_kernel_dim=4, layer_types=types,
            mlp_layer_types=["dense"] * layers,
            linear_attn_config={"num_heads": 2, "head_dim": 32, "short_conv_kernel_size": 4,
                                "kda_layers": kda_layers, "full_attn_layers": [layers]},
            q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=32, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
            n_shared_experts=1, n_group=1, topk_group=1,
            # Kimi's own token ids (pad 163839) lie outside the small vocabulary.
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
        return tf.KimiLinearForCausalLM(cfg)
    if family == "fla_kda":
        from fla.models import KDAConfig, KDAForCausalLM
        return KDAForCausalLM(KDAConfig(hidden_size=128, num_hidden_layers=layers - 1,
                                        num_heads=2, head_dim=32, vocab_size=512,
                                        fuse_norm=False, fuse_swiglu=False,
                                        fuse_cross_entropy=False))
    raise ExportError(f"unknown family '{family}' (qwen3_next, qwen3_5, qwen3_5_moe, kimi_linear, "
                      f"fla_kda)")


def model_json(model, capture, name, source):
    cfg = getattr(model.config, "text_config", None) or model.config
    num_layers = int(cfg.num_hidden_layers)
    linear = sorted(capture.modules)
    H, HV, dk, dv = layer_heads(capture.modules[linear[0]])
    mod = capture.modules[linear[0]]
    conv = int(getattr(mod, "conv_kernel_size", None) or getattr(mod, "conv_size", 4))
    family = "kda" if "Kimi" in type(mod).__name__ or "KDA" in type(model).__name__ else "gdn"
    if len(linear) == num_layers:
        full = {"kind": "mha", "num_kv_heads": 0, "head_dim": 0}
    elif getattr(cfg, "kv_lora_rank", None):
        full = {"kind": "mla", "kv_lora_rank": int(cfg.kv_lora_rank),
                "rope_dim": int(getattr(cfg, "qk_rope_head_dim", 0) or 0)}
    else:
        full = {"kind": "mha", "num_kv_heads": int(cfg.num_key_value_heads),
                "head_dim": int(getattr(cfg, "head_dim", None)
                                or cfg.hidden_size // cfg.num_attention_heads)}
    return statecheck_model_json(name, family, num_layers, linear, H, HV, dk, dv, conv, full, source)


def export(model, input_ids, out_dir, name, source, extra_meta, torch):
    """Runs `model` on input_ids [N, T] with the capture in place and writes the three files;
    fp32 matmuls at full precision (full_fp32_precision). The metadata records matmul_precision
    and fla_blocked ("true" when block_fla ran: the recurrence was transformers' own PyTorch code;
    "false": transformers may have dispatched it to flash-linear-attention's TF32 kernels)."""
    full_fp32_precision(torch)
    extra_meta = dict(extra_meta, matmul_precision=torch.get_float32_matmul_precision(),
                      fla_blocked=str("fla" in sys.modules and sys.modules["fla"] is None).lower())
    capture = Capture(torch, model)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)
    finally:
        capture.close()
    layers = sorted(capture.modules)
    tensors, gate, l2, scale, kernels = collect(capture.records, layers, capture.modules)
    meta = metadata_for(gate, l2, scale, dict(extra_meta, kernels=",".join(kernels)))
    os.makedirs(out_dir, exist_ok=True)
    inputs = os.path.join(out_dir, "inputs.safetensors")
    write_safetensors(inputs, tensors, meta)
    mj = model_json(model, capture, name, source)
    with open(os.path.join(out_dir, "model.json"), "w") as f:
        json.dump(mj, f, indent=1)
    info = dict(meta, inputs=inputs, inputs_sha256=file_sha256(inputs), layers=layers,
                sequences=int(input_ids.shape[0]), tokens=int(input_ids.shape[1]),
                torch=torch.__version__)
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    with open(os.path.join(out_dir, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"export_inputs: {len(layers)} linear-attention layers ({gate}, kernels "
          f"{', '.join(kernels)}), {input_ids.shape[0]} x {input_ids.shape[1]} tokens -> {inputs}")
    return inputs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", nargs="?", help="local Hugging Face model directory")
    p.add_argument("--random", metavar="FAMILY", help="a small randomly initialised model instead")
    p.add_argument("--self-test", metavar="DIR", help="numpy + h5py self-test; writes test files")
    p.add_argument("--out", help="output directory")
    p.add_argument("--text", help="text file to run (model directory mode)")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per sequence T")
    p.add_argument("--sequences", type=int, default=1, help="sequences N (consecutive windows "
                   "of the text, or random token streams)")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights and tokens")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--device", default="cuda", help="torch device")
    p.add_argument("--recurrence", default="as-loaded", choices=["as-loaded", "torch"],
                   help="torch: force transformers' own PyTorch recurrence (Qwen layers)")
    a = p.parse_args(argv)
    try:
        if a.self_test:
            self_test(a.self_test)
            return 0
        if not a.out:
            raise ExportError("--out DIR is required")
        import torch
        dtype = getattr(torch, a.dtype)
        if a.random:
            if a.recurrence == "torch" and a.random != "fla_kda":
                block_fla()
            model = random_model(a.random, torch, a.seed)
            name, source = f"random-{a.random}", f"scripts/export_inputs.py --random {a.random}"
            g = torch.Generator().manual_seed(a.seed)
            ids = torch.randint(0, model.config.vocab_size if hasattr(model.config, "vocab_size")
                                else 512, (a.sequences, a.tokens), generator=g)
            text_meta = {"text": "random token ids", "seed": str(a.seed)}
        else:
            if not a.model_dir or not os.path.isdir(a.model_dir):
                raise ExportError(f"{a.model_dir}: not a model directory")
            if not a.text:
                raise ExportError("--text FILE is required with a model directory")
            if a.recurrence == "torch":
                block_fla()
            import transformers as tf
            try:
                import fla  # noqa: F401  (registers flash-linear-attention's model classes)
            except ImportError:
                pass
            tok = tf.AutoTokenizer.from_pretrained(a.model_dir, local_files_only=True)
            model = tf.AutoModelForCausalLM.from_pretrained(a.model_dir, local_files_only=True,
                                                            dtype=dtype)
            with open(a.text, encoding="utf-8") as f:
                ids_all = tok(f.read(), return_tensors="pt").input_ids[0]
            need = a.sequences * a.tokens
            if ids_all.numel() < need:
                raise ExportError(f"{a.text}: {ids_all.numel()} tokens, {a.sequences} x "
                                  f"{a.tokens} = {need} needed")
            ids = ids_all[:need].reshape(a.sequences, a.tokens)
            name = os.path.basename(os.path.normpath(a.model_dir))
            source = os.path.abspath(a.model_dir)
            text_meta = {"text": os.path.abspath(a.text), "text_sha256": file_sha256(a.text)}
        model = model.to(device=a.device, dtype=dtype).eval()
        if a.recurrence == "torch":
            force_torch_recurrence(model)
        export(model, ids.to(a.device), a.out, name, source,
               dict(text_meta, compute_dtype=a.dtype, model=name), torch)
        return 0
    except ExportError as e:
        print(f"export_inputs: {e}", file=sys.stderr)
        return 2


def block_fla():
    """Makes `import fla` fail for the rest of the process. transformers dispatches its gated-delta
    functions, torch_chunk_gated_delta_rule included, to flash-linear-attention's Triton kernels
    whenever fla is importable (it says it falls back to PyTorch only when fla is absent); those
    kernels run their fp32 dots in TF32, about 1.5e-3 relative from the fp64 loop. An export
    meant to hold transformers' own PyTorch recurrence must therefore run without fla."""
    if any(m == "fla" or m.startswith("fla.") for m in sys.modules if sys.modules[m] is not None):
        raise ExportError("flash-linear-attention is already imported: transformers would run its "
                          "kernels instead of its own PyTorch recurrence")
    sys.modules["fla"] = None


def force_torch_recurrence(model):
    """Points every linear-attention layer at transformers' own PyTorch recurrence (the layers
    otherwise use flash-linear-attention's kernels when it is importable). transformers may still
    dispatch that recurrence to flash-linear-attention when fla is importable: block_fla() first
    where the export must hold the PyTorch recurrence itself."""
    for module in model.modules():
        if not is_linear_attention(module):
            continue
        pymods = kernel_modules(module)
        for attr, torch_fn in (("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"),
                               ("recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule"),
                               ("chunk_kda", "torch_chunk_kda"),
                               ("recurrent_kda", "torch_recurrent_kda")):
            if not hasattr(module, attr):
                continue
            pymod = next((m for m in pymods if hasattr(m, torch_fn)), None)
            # None: the layer keeps its kernel, which with fla blocked is transformers' own
            # fallback to the same PyTorch recurrence.
            if pymod is not None:
                object.__setattr__(module, attr, getattr(pymod, torch_fn))


if __name__ == "__main__":
    sys.exit(main())
