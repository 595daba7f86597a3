#!/usr/bin/env python3
"""Trains statecheck's tiny byte-level gated-delta language model and exports it for the C++ side.

    python3 scripts/train_tinylm.py --out DIR --minutes M            # CUDA GPU (bf16 autocast)
    python3 scripts/train_tinylm.py --out DIR --device cpu --minutes 2 --tiny

Model (vocabulary 256 = bytes), the structure of the real gated-delta layers (Qwen3-Next GDN;
Kimi-Linear KDA with --gate kda), per block:
    h = RMSNorm(x)
    q, k, v = W_q h, W_k h, W_v h                         [H d_k], [H d_k], [HV d_v]
    (q, k, v) = SiLU(causal depthwise conv1d, width W = 4, over the concatenated channels)
    q, k = L2-normalised over d_k (x / sqrt(sum x^2 + 1e-6)), GVA: value head h reads key head
           h / (HV / H)
    g = -exp(A_log) * softplus(W_a h + dt_bias)           GDN: [HV]; KDA: [HV, d_k]
    beta = sigmoid(W_b h)                                 [HV]
    o = gated delta rule (spec numerics.md section 1), state [HV, d_v, d_k], scale d_k^-1/2
    o = RMSNorm_dv(o) * SiLU(W_z h)                       gated RMSNorm per value head
    x = x + W_o o
    x = x + W_down(SiLU(W_gate RMSNorm(x)) * W_up RMSNorm(x))      SwiGLU MLP
  logits = E RMSNorm(x)   (E tied to the embedding unless --untied)

Training uses the chunked (WY / UT-transform) form of the gated delta rule in plain PyTorch
(chunk 64 for GDN, 16 for KDA, where the per-channel decay needs a [C, C, d_k] tensor); the
self-check at start compares it with the token-by-token recurrence and stops the run if they
disagree. The golden logits are an fp32 forward of the token-by-token recurrence on the CPU.

Corpus: the King James Version text of Debian's bible-kjv-text package (data/tinylm/README.md),
shipped gzipped in data/tinylm/kjv.txt.gz. Split by verses: blocks of 100 verses; block i is
held out (test) if i % 20 == 19, validation if i % 20 == 9, training otherwise.

Outputs in --out (names fixed; the C++ loader reads everything from config.json):
    model.safetensors   fp32 weights            config.json        shapes, hyperparameters, corpus
    train_curve.csv     step, loss, bits/byte   eval.txt           held-out evaluation text
    golden.safetensors  fp32 logits and states on the first bytes of eval.txt
    train_log.txt       the log of the run
Works with torch 1.13 (Debian) and 2.x; needs numpy; nothing is downloaded.
"""
import argparse
import copy
import csv
import gzip
import hashlib
import json
import math
import os
import platform
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

L2NORM_EPS = 1e-6  # inside the square root, as core/recurrence/gated_delta.h
NORM_EPS = 1e-6  # RMSNorm and gated RMSNorm
VOCAB = 256
# model.safetensors must stay under 16 MiB (the largest file a device run hands back; the issue's
# limit is 20 MB): the default model is 4.03 M parameters, 15.4 MiB.
MAX_WEIGHT_BYTES = 16 * 2**20
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

LOG_FILE = None


def log(msg):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if LOG_FILE is not None:
        LOG_FILE.write(line + "\n")
        LOG_FILE.flush()


def die(msg):
    log("FAILED: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------
# Gated delta rule: token-by-token reference and chunked (WY) form.
# Layouts: q, k [B, T, HV, d_k] (already expanded to value heads, L2-normalised; q not yet
# scaled), v [B, T, HV, d_v], g [B, T, HV] (GDN) or [B, T, HV, d_k] (KDA), log space,
# beta [B, T, HV], state S [B, HV, d_v, d_k] (the serving layout: u = S k).
# ---------------------------------------------------------------------------------------------


def gated_delta_recurrent(q, k, v, g, beta, S0, scale):
    """Token-by-token: S <- S exp(g); u = S k; S <- S + beta (v - u) k^T; o = S (scale q)."""
    T = q.shape[1]
    kda = g.dim() == 4
    S = S0.clone()
    outs = []
    for t in range(T):
        decay = g[:, t].exp()
        S = S * (decay[:, :, None, :] if kda else decay[:, :, None, None])
        kt = k[:, t]
        u = torch.matmul(S, kt.unsqueeze(-1)).squeeze(-1)  # [B, HV, d_v]
        w = beta[:, t].unsqueeze(-1) * (v[:, t] - u)
        S = S + w.unsqueeze(-1) * kt.unsqueeze(-2)
        outs.append(torch.matmul(S, (q[:, t] * scale).unsqueeze(-1)).squeeze(-1))
    return torch.stack(outs, 1), S


def gated_delta_chunked(q, k, v, g, beta, S0, scale, chunk):
    """Chunked form, exact up to rounding. Within a chunk of C tokens with cumulative log decay
    G_t (per channel for KDA), the written values w_t = beta_t (v_t - decayed S_{t-1} k_t) solve
        (I + A) W = beta V - beta e^G K S0^T,   A[t, s] = beta_t sum_c k_t[c] k_s[c] e^(G_t[c] - G_s[c])
    for s < t (unit lower-triangular, solved by substitution), and then
        O   = (q e^G) S0^T + (lower-incl. (q k^T weighted by e^(G_t - G_s))) W
        S_C = S0 e^(G_C) + W^T (k e^(G_C - G)).
    Every exponent is <= 0, so nothing overflows. Tokens past T are padded with k = 0, beta = 0,
    g = 0, which leave the state unchanged."""
    B, T, HV, dk = k.shape
    dv = v.shape[-1]
    kda = g.dim() == 4
    C = chunk
    pad = (-T) % C
    if pad:
        q = F.pad(q, (0, 0, 0, 0, 0, pad))
        k = F.pad(k, (0, 0, 0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, 0, 0, pad))
        g = F.pad(g, (0, 0, 0, 0, 0, pad)) if kda else F.pad(g, (0, 0, 0, pad))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // C
    q = (q * scale).transpose(1, 2).reshape(B, HV, N, C, dk)
    k = k.transpose(1, 2).reshape(B, HV, N, C, dk)
    v = v.transpose(1, 2).reshape(B, HV, N, C, dv)
    beta = beta.transpose(1, 2).reshape(B, HV, N, C)
    idx = torch.arange(C, device=q.device)
    incl = idx[:, None] >= idx[None, :]
    strict = idx[:, None] > idx[None, :]
    if not kda:
        G = g.transpose(1, 2).reshape(B, HV, N, C).cumsum(-1)
        diff = G[..., :, None] - G[..., None, :]
        dec_incl = diff.masked_fill(~incl, float("-inf")).exp()
        dec_strict = diff.masked_fill(~strict, float("-inf")).exp()
        A = torch.matmul(k, k.transpose(-1, -2)) * dec_strict * beta[..., :, None]
        P = torch.matmul(q, k.transpose(-1, -2)) * dec_incl
        eG = G.exp()
        q_dec = q * eG[..., None]
        k_rhs = k * (beta * eG)[..., None]
        k_end = k * (G[..., -1:] - G).exp()[..., None]
        total = G[..., -1].exp()[..., None, None]  # [B, HV, N, 1, 1]
    else:
        G = g.transpose(1, 2).reshape(B, HV, N, C, dk).cumsum(-2)
        diff = G[..., :, None, :] - G[..., None, :, :]  # [B, HV, N, C, C, d_k]
        dec_incl = diff.masked_fill(~incl[..., None], float("-inf")).exp()
        dec_strict = diff.masked_fill(~strict[..., None], float("-inf")).exp()
        A = torch.einsum("bhntc,bhnsc,bhntsc->bhnts", k, k, dec_strict) * beta[..., :, None]
        P = torch.einsum("bhntc,bhnsc,bhntsc->bhnts", q, k, dec_incl)
        eG = G.exp()
        q_dec = q * eG
        k_rhs = k * eG * beta[..., None]
        k_end = k * (G[..., -1:, :] - G).exp()
        total = G[..., -1, :].exp()[..., None, :]  # [B, HV, N, 1, d_k]
    M = A + torch.eye(C, dtype=A.dtype, device=A.device)
    U = torch.linalg.solve_triangular(M, v * beta[..., None], upper=False, unitriangular=True)
    Wk = torch.linalg.solve_triangular(M, k_rhs, upper=False, unitriangular=True)
    S = S0
    outs = []
    for n in range(N):
        St = S.transpose(-1, -2)  # [B, HV, d_k, d_v]
        W = U[:, :, n] - torch.matmul(Wk[:, :, n], St)
        outs.append(torch.matmul(q_dec[:, :, n], St) + torch.matmul(P[:, :, n], W))
        S = S * total[:, :, n] + torch.matmul(W.transpose(-1, -2), k_end[:, :, n])
    O = torch.stack(outs, 2).reshape(B, HV, N * C, dv)[:, :, :T].transpose(1, 2)
    return O, S


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def rms_norm(x, weight, eps=NORM_EPS):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return rms_norm(x, self.weight)


class GatedDeltaMixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, HV, dk, dv, W = (cfg[n] for n in ("d_model", "H", "HV", "dk", "dv", "conv_width"))
        self.H, self.HV, self.dk, self.dv, self.W = H, HV, dk, dv, W
        self.kda = cfg["gate"] == "kda"
        self.chunk = cfg["chunk"]
        self.conv_dim = 2 * H * dk + HV * dv
        self.q_proj = nn.Linear(D, H * dk, bias=False)
        self.k_proj = nn.Linear(D, H * dk, bias=False)
        self.v_proj = nn.Linear(D, HV * dv, bias=False)
        self.z_proj = nn.Linear(D, HV * dv, bias=False)
        gate_width = HV * dk if self.kda else HV
        self.a_proj = nn.Linear(D, gate_width, bias=False)
        self.b_proj = nn.Linear(D, HV, bias=False)
        bound = 1.0 / math.sqrt(W)  # torch's default for a depthwise conv1d (fan_in = W)
        self.conv_weight = nn.Parameter(torch.empty(self.conv_dim, W).uniform_(-bound, bound))
        # Mamba2 / GDN initialisation (spec numerics.md section 1): exp(A_log) ~ U[1, 16],
        # dt ~ logU[1e-3, 1e-1], dt_bias = softplus^-1(dt) = dt + log(-expm1(-dt)).
        self.A_log = nn.Parameter(torch.empty(HV).uniform_(1.0, 16.0).log())
        dt = torch.empty(gate_width).uniform_(math.log(1e-3), math.log(1e-1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.out_norm = RMSNorm(dv)
        self.o_proj = nn.Linear(HV * dv, D, bias=False)

    def gates(self, h, rt):
        a = self.a_proj(h).to(rt)
        b = self.b_proj(h).to(rt)
        if self.kda:
            B, T, _ = a.shape
            a = a.view(B, T, self.HV, self.dk)
            g = -self.A_log.to(rt).exp()[:, None] * F.softplus(a + self.dt_bias.to(rt).view(self.HV, self.dk))
        else:
            g = -self.A_log.to(rt).exp() * F.softplus(a + self.dt_bias.to(rt))
        return g, torch.sigmoid(b)

    def forward(self, h, state, mode):
        B, T, _ = h.shape
        H, HV, dk, dv, W = self.H, self.HV, self.dk, self.dv, self.W
        rt = torch.promote_types(h.dtype, torch.float32)  # fp32 (fp64 in the self-check)
        # [B, T, conv_dim]; the conv, gates and recurrence run in rt even under autocast.
        qkv = torch.cat([self.q_proj(h), self.k_proj(h), self.v_proj(h)], -1).to(rt)
        if state is None:
            conv_state = qkv.new_zeros(B, self.conv_dim, W - 1)
            S0 = qkv.new_zeros(B, HV, dv, dk)
        else:
            S0, conv_state = state
        # Causal depthwise conv: y[t, c] = sum_w weight[c, w] x[t - (W - 1) + w, c]; the conv state
        # holds the W - 1 inputs before the first token, [B, conv_dim, W - 1] (channels first).
        x_ext = torch.cat([conv_state.transpose(1, 2).to(rt), qkv], 1)
        cw = self.conv_weight.to(rt)
        y = x_ext[:, 0:T] * cw[:, 0]
        for w in range(1, W):
            y = y + x_ext[:, w : w + T] * cw[:, w]
        new_conv = x_ext[:, T : T + W - 1].transpose(1, 2)
        y = F.silu(y)
        q, k, v = torch.split(y, [H * dk, H * dk, HV * dv], -1)
        group = HV // H
        q = l2norm(q.reshape(B, T, H, dk)).repeat_interleave(group, dim=2)
        k = l2norm(k.reshape(B, T, H, dk)).repeat_interleave(group, dim=2)
        v = v.reshape(B, T, HV, dv)
        g, beta = self.gates(h, rt)
        scale = dk ** -0.5
        with autocast_off(h.device):
            if mode == "recurrent":
                o, S = gated_delta_recurrent(q, k, v, g, beta, S0.to(rt), scale)
            else:
                o, S = gated_delta_chunked(q, k, v, g, beta, S0.to(rt), scale, self.chunk)
        z = self.z_proj(h).to(rt).view(B, T, HV, dv)
        o = rms_norm(o, self.out_norm.weight.to(rt)) * F.silu(z)
        return self.o_proj(o.reshape(B, T, HV * dv).to(h.dtype)), (S, new_conv)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg["d_model"])
        self.mixer = GatedDeltaMixer(cfg)
        self.mlp_norm = RMSNorm(cfg["d_model"])
        self.gate_proj = nn.Linear(cfg["d_model"], cfg["mlp_hidden"], bias=False)
        self.up_proj = nn.Linear(cfg["d_model"], cfg["mlp_hidden"], bias=False)
        self.down_proj = nn.Linear(cfg["mlp_hidden"], cfg["d_model"], bias=False)
        # Training only (identity in eval mode, so the exported model has none).
        self.dropout = nn.Dropout(cfg.get("dropout", 0.0))

    def forward(self, x, state, mode):
        o, new_state = self.mixer(self.attn_norm(x), state, mode)
        x = x + self.dropout(o)
        h = self.mlp_norm(x)
        x = x + self.dropout(self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)))
        return x, new_state


class TinyLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB, cfg["d_model"])
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num_layers"])])
        self.final_norm = RMSNorm(cfg["d_model"])
        self.lm_head = None if cfg["tie_word_embeddings"] else nn.Linear(cfg["d_model"], VOCAB, bias=False)
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.startswith("embed") or name.startswith("lm_head"):
                nn.init.normal_(p, std=std)
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, std=std / math.sqrt(2 * cfg["num_layers"]))

    def forward(self, tokens, states=None, mode="chunk"):
        """tokens [B, T] int64 -> logits [B, T, 256], per-layer states [(S [B, HV, d_v, d_k],
        conv [B, conv_dim, W - 1])]. `states` continues a previous call (None: zeros)."""
        x = self.embed(tokens)
        new_states = []
        for i, layer in enumerate(self.layers):
            x, st = layer(x, None if states is None else states[i], mode)
            new_states.append(st)
        h = self.final_norm(x)
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(h, w.to(h.dtype)), new_states


class autocast_off:
    """Disables autocast inside the recurrence (fp32 math) on torch 1.13 and 2.x."""

    def __init__(self, device):
        self.ctx = torch.autocast(device_type=device.type, enabled=False)

    def __enter__(self):
        return self.ctx.__enter__()

    def __exit__(self, *a):
        return self.ctx.__exit__(*a)


def amp_context(device, enabled):
    if enabled and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return torch.autocast(device_type=device.type, enabled=False)


# ---------------------------------------------------------------------------------------------
# safetensors (written and read here with numpy, so no extra package is needed)
# ---------------------------------------------------------------------------------------------


def save_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b : 8 + n + e], dtype="<f4").reshape(t["shape"]).copy()
    return out


def write_text_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def export_weights(model):
    """Weights under the names the C++ loader (core/tinylm/tinylm.h) reads, fp32 numpy."""
    out = {}
    for name, p in model.state_dict().items():
        out[name] = p.detach().float().cpu().numpy()
    return out


def import_weights(model, arrays):
    sd = model.state_dict()
    missing = sorted(set(sd) - set(arrays))
    extra = sorted(set(arrays) - set(sd))
    if missing or extra:
        raise ValueError(f"weights do not match the model: missing {missing}, unexpected {extra}")
    for name in sd:
        if tuple(sd[name].shape) != tuple(arrays[name].shape):
            raise ValueError(f"tensor {name}: shape {arrays[name].shape}, model expects {tuple(sd[name].shape)}")
    model.load_state_dict({k: torch.from_numpy(arrays[k]) for k in sd})


# ---------------------------------------------------------------------------------------------
# Corpus and splits
# ---------------------------------------------------------------------------------------------


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
    n = (len(data) - 1) // length
    if count is not None:
        n = min(n, count)
    a = np.frombuffer(data, dtype=np.uint8)
    return torch.from_numpy(np.stack([a[i * length : i * length + length + 1] for i in range(n)]).astype(np.int64))


@torch.no_grad()
def bits_per_byte(model, wins, device, batch, amp=False):
    """Mean cross-entropy in bits per predicted byte over windows [N, T + 1] (every window starts
    from a zero state; all T positions count)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, wins.shape[0], batch):
        w = wins[i : i + batch].to(device)
        with amp_context(device, amp):
            logits, _ = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), w[:, 1:].reshape(-1), reduction="sum")
        total += float(loss)
        count += w[:, 1:].numel()
    model.train()
    return total / count / math.log(2.0)


# ---------------------------------------------------------------------------------------------
# Self-check (runs first; any failure stops the run)
# ---------------------------------------------------------------------------------------------


def random_recurrence_inputs(gen, B, T, H, HV, dk, dv, kda, dtype):
    def rn(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64)

    group = HV // H
    q = l2norm(rn(B, T, H, dk)).repeat_interleave(group, dim=2)
    k = l2norm(rn(B, T, H, dk)).repeat_interleave(group, dim=2)
    v = rn(B, T, HV, dv)
    A = torch.empty(HV, dtype=torch.float64).uniform_(1.0, 16.0, generator=gen)
    gshape = (B, T, HV, dk) if kda else (B, T, HV)
    dt = torch.empty(gshape[2:], dtype=torch.float64).uniform_(math.log(1e-3), math.log(1e-1), generator=gen).exp()
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    Ab = A[:, None] if kda else A
    g = -Ab * F.softplus(rn(*gshape) + dt_bias)
    beta = torch.sigmoid(rn(B, T, HV))
    S0 = 0.3 * rn(B, HV, dv, dk)
    return [x.to(dtype) for x in (q, k, v, g, beta, S0)]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def self_check(cfg, device):
    """Chunked vs token-by-token recurrence (fp64 on the CPU, fp32 on `device`), model-level
    chunked vs recurrent logits, and prefix + continuation from the exported states equal to one
    uninterrupted run."""
    t0 = time.time()
    gen = torch.Generator().manual_seed(1234)
    for kda in (False, True):
        chunk = 16 if kda else 64
        for T in (1, 63, 150):
            q, k, v, g, beta, S0 = random_recurrence_inputs(gen, 2, T, 2, 6, 24, 20, kda, torch.float64)
            scale = 24 ** -0.5
            o_ref, S_ref = gated_delta_recurrent(q, k, v, g, beta, S0, scale)
            o_chk, S_chk = gated_delta_chunked(q, k, v, g, beta, S0, scale, chunk)
            eo, es = rel(o_chk, o_ref), rel(S_chk, S_ref)
            if not (eo < 1e-10 and es < 1e-10):
                die(f"self-check: chunked vs recurrent ({'kda' if kda else 'gdn'}, T={T}, fp64): "
                    f"output relerr {eo:.3g}, state relerr {es:.3g} (limit 1e-10)")
            # fp32 on the training device against the fp64 reference.
            args32 = [x.float().to(device) for x in (q, k, v, g, beta, S0)]
            o32, S32 = gated_delta_chunked(*args32[:5], args32[5], scale, chunk)
            eo, es = rel(o32.cpu(), o_ref), rel(S32.cpu(), S_ref)
            # fp32 rounding, u = 6e-8, grown over a few hundred operations: 1e-4 is loose.
            if not (eo < 1e-4 and es < 1e-4):
                die(f"self-check: chunked fp32 on {device} vs fp64 reference ({'kda' if kda else 'gdn'}, "
                    f"T={T}): output relerr {eo:.3g}, state relerr {es:.3g} (limit 1e-4)")
    # Model level, small shapes of the configured gate, fp64 on the CPU.
    small = dict(cfg, d_model=48, num_layers=2, H=2, HV=4, dk=16, dv=12, mlp_hidden=64)
    torch.manual_seed(4321)
    m = TinyLM(dict(small, dropout=0.0)).double().eval()
    with torch.no_grad():
        for p in m.parameters():  # larger weights than the init, so every path matters
            p.add_(0.2 * torch.randn_like(p))
        tok = torch.randint(0, VOCAB, (2, 150), generator=gen)
        lr_, st_r = m(tok, mode="recurrent")
        lc_, st_c = m(tok, mode="chunk")
        e = rel(lc_, lr_)
        if not e < 1e-10:
            die(f"self-check: model logits chunked vs recurrent (fp64): relerr {e:.3g} (limit 1e-10)")
        l1, s1 = m(tok[:, :97], mode="chunk")
        l2, s2 = m(tok[:, 97:], states=s1, mode="chunk")
        e = max(rel(torch.cat([l1, l2], 1), lr_), max(rel(a[0], b[0]) + rel(a[1], b[1]) for a, b in zip(s2, st_r)))
        if not e < 1e-10:
            die(f"self-check: prefix + continuation from the exported state vs one run (fp64): relerr {e:.3g}")
    log(f"self-check passed (chunked = recurrent for GDN and KDA, fp64 and fp32 on {device}; "
        f"state continuation) in {time.time() - t0:.1f} s")


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


def config_json(cfg, corpus_info, training, golden_info, n_params):
    """config.json: a statecheck model config (data/models/README.md schema: `family`, `linear`,
    ...) so that `statecheck --model data/tinylm/config.json` works, plus the `tinylm` section the
    C++ forward pass reads."""
    return {
        "name": cfg["name"],
        "source": "data/tinylm: trained by scripts/train_tinylm.py on " + corpus_info["package"] + " " + corpus_info["version"],
        "family": cfg["gate"],
        "num_layers": cfg["num_layers"],
        "full_attention_layers": [],
        "linear": {
            "num_key_heads": cfg["H"],
            "num_value_heads": cfg["HV"],
            "head_k_dim": cfg["dk"],
            "head_v_dim": cfg["dv"],
            "conv_width": cfg["conv_width"],
            "conv_layout": "channels_first",
        },
        "full_attention": {"kind": "mha", "num_kv_heads": 0, "head_dim": 0},
        "params_billion": n_params / 1e9,
        "ssm_dtype": "float32",
        "default_tp": 1,
        "tinylm": {
            "vocab_size": VOCAB,
            "d_model": cfg["d_model"],
            "mlp_hidden": cfg["mlp_hidden"],
            "norm_eps": NORM_EPS,
            "l2norm_eps": L2NORM_EPS,
            "tie_word_embeddings": cfg["tie_word_embeddings"],
            "parameters": n_params,
            "weights": "model.safetensors",
            "eval_text": "eval.txt",
            "golden": "golden.safetensors",
            "train_curve": "train_curve.csv",
            "chunk": cfg["chunk"],
            "golden_info": golden_info,
        },
        "corpus": corpus_info,
        "training": training,
    }


def export_golden(model_cpu, eval_bytes, n_tokens, out_dir):
    """Golden logits of the fp32 token-by-token forward on the CPU, plus fp64 logits and the
    per-layer states after the input, for tests/test_tinylm.cpp."""
    tok = torch.tensor(list(eval_bytes[:n_tokens]), dtype=torch.int64)[None]
    with torch.no_grad():
        m32 = copy.deepcopy(model_cpu).float().eval()
        logits, states = m32(tok, mode="recurrent")
        logits_chunk, _ = m32(tok, mode="chunk")
        m64 = copy.deepcopy(model_cpu).double().eval()
        logits64, _ = m64(tok, mode="recurrent")
    temporal = torch.stack([s[0][0] for s in states]).numpy()
    conv = torch.stack([s[1][0] for s in states]).numpy()
    save_safetensors(
        os.path.join(out_dir, "golden.safetensors"),
        {
            "tokens": tok[0].float().numpy(),
            "logits": logits[0].numpy(),
            "logits_fp64": logits64[0].float().numpy(),
            "temporal_state": temporal,
            "conv_state": conv,
        },
        {"input": f"first {n_tokens} bytes of eval.txt", "path": "token-by-token recurrence, fp32, CPU"},
    )
    return {
        "file": "golden.safetensors",
        "tokens": n_tokens,
        "input": f"first {n_tokens} bytes of eval.txt",
        "path": "token-by-token recurrence, fp32, CPU (torch " + torch.__version__ + ")",
        "max_abs_logit": float(logits.abs().max()),
        "max_abs_diff_fp32_vs_fp64": float((logits.double() - logits64).abs().max()),
        "max_abs_diff_chunked_vs_recurrent_fp32": float((logits_chunk - logits).abs().max()),
    }


def eval_text_of(test_bytes, size):
    cut = test_bytes[:size]
    nl = cut.rfind(b"\n")
    return cut[: nl + 1] if nl > 0 else cut


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--minutes", type=float, default=6.0, help="training wall-clock budget; start-up, final evaluation and export add well under a minute on a GPU")
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    p.add_argument("--tiny", action="store_true", help="small model and batches, for a CPU")
    p.add_argument("--gate", choices=("gdn", "kda"), default="gdn", help="gdn: scalar decay per head; kda: per channel")
    p.add_argument("--corpus", default=os.path.join(here, "..", "data", "tinylm", "kjv.txt.gz"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None)
    p.add_argument("--d-model", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int, help="key heads H")
    p.add_argument("--value-heads", type=int, help="value heads HV (multiple of H)")
    p.add_argument("--head-dim", type=int, help="d_k = d_v")
    p.add_argument("--mlp-hidden", type=int)
    p.add_argument("--untied", action="store_true", help="separate LM head instead of the tied embedding")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, help="residual-branch dropout in training (default 0.1; --tiny 0)")
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time budget only)")
    p.add_argument("--eval-every-s", type=float, help="seconds between validation evaluations")
    p.add_argument("--eval-text-bytes", type=int, default=8192)
    p.add_argument("--golden-tokens", type=int, default=300)
    p.add_argument("--export-only", action="store_true",
                   help="no training: read --out/model.safetensors + config.json, write golden, eval text, test bpb")
    return p.parse_args()


def model_config(args):
    tiny = args.tiny
    cfg = {
        "gate": args.gate,
        "d_model": 128 if tiny else 256,
        "num_layers": 4 if tiny else 6,
        "H": 1 if tiny else 2,
        "HV": 2 if tiny else 4,
        "dk": 64,
        "dv": 64,
        "conv_width": 4,
        "mlp_hidden": 384 if tiny else 512,
        "tie_word_embeddings": not args.untied,
        "chunk": 16 if args.gate == "kda" else 64,
        "dropout": args.dropout if args.dropout is not None else (0.0 if tiny else 0.1),
    }
    for key, arg in (("d_model", "d_model"), ("num_layers", "layers"), ("H", "heads"), ("HV", "value_heads"),
                     ("mlp_hidden", "mlp_hidden")):
        if getattr(args, arg) is not None:
            cfg[key] = getattr(args, arg)
    if args.head_dim is not None:
        cfg["dk"] = cfg["dv"] = args.head_dim
    if cfg["HV"] % cfg["H"] != 0:
        die(f"--value-heads {cfg['HV']} is not a multiple of --heads {cfg['H']}")
    cfg["name"] = args.name or f"tinylm-kjv-{cfg['gate']}"
    return cfg


def main():
    global LOG_FILE
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    LOG_FILE = open(os.path.join(args.out, "train_log.txt"), "a" if args.export_only else "w")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        die("--device cuda but torch.cuda.is_available() is False")
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    log(f"train_tinylm: torch {torch.__version__}, python {platform.python_version()}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f" ({os.cpu_count()} CPUs)"))
    if device.type == "cuda":
        # fp32 matmuls (the recurrence, evaluation, self-check) stay fp32; the projections run in
        # bf16 under autocast during training.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    if not os.path.exists(args.corpus):
        die(f"corpus {args.corpus} not found (data/tinylm/kjv.txt.gz ships with the repository)")
    splits, corpus_info = load_corpus(args.corpus)
    log(f"corpus {corpus_info['package']} {corpus_info['version']}: {corpus_info['bytes']} bytes, "
        f"train {len(splits['train'])}, val {len(splits['val'])}, test {len(splits['test'])}")
    eval_bytes = eval_text_of(splits["test"], args.eval_text_bytes)

    if args.export_only:
        cfg_path = os.path.join(args.out, "config.json")
        with open(cfg_path) as f:
            saved = json.load(f)
        cfg = dict(saved["model"]) if "model" in saved else None
        if cfg is None:
            die(f"{cfg_path}: no 'model' section")
        model = TinyLM(cfg)
        import_weights(model, load_safetensors(os.path.join(args.out, "model.safetensors")))
        training = saved.get("training", {})
        seq = training.get("seq_len", 2048)
        test_wins = windows(splits["test"], seq)
        training["test_bits_per_byte"] = round(bits_per_byte(model.to(device), test_wins, device, 8), 5)
        training["test_windows"] = f"{test_wins.shape[0]} windows of {seq} bytes from a zero state, every position scored"
        log(f"held-out (test split) {training['test_bits_per_byte']:.4f} bits/byte over {test_wins.shape[0]} "
            f"windows of {seq} bytes, fp32")
        finish(args, cfg, model.cpu(), corpus_info, training, eval_bytes)
        return

    cfg = model_config(args)
    self_check(cfg, device)

    seq = args.seq_len or (256 if args.tiny else 2048)
    batch = args.batch_size or (16 if args.tiny else 32)
    lr_peak = args.lr or (3e-3 if args.tiny else 2e-3)
    eval_every = args.eval_every_s or (60.0 if args.tiny else 30.0)
    torch.manual_seed(args.seed)
    model = TinyLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model {cfg['name']}: {json.dumps(cfg)}; {n_params} parameters ({4 * n_params / 2**20:.1f} MiB fp32)")
    if 4 * n_params + 65536 > MAX_WEIGHT_BYTES:
        die(f"{n_params} parameters are {4 * n_params / 2**20:.2f} MiB in fp32, over the "
            f"{MAX_WEIGHT_BYTES / 2**20:.0f} MiB limit on model.safetensors")

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr_peak, betas=(0.9, 0.95), eps=1e-8)

    train = torch.from_numpy(np.frombuffer(splits["train"], dtype=np.uint8).astype(np.int64)).to(device)
    val_wins = windows(splits["val"], seq, count=16 if args.tiny else 48)
    test_wins = windows(splits["test"], seq)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    amp = device.type == "cuda"

    curve_path = os.path.join(args.out, "train_curve.csv")
    curve_rows = []
    best = {"val_bpb": float("inf"), "state": None, "step": 0}
    budget = args.minutes * 60.0
    step, tokens_seen, bad_steps = 0, 0, 0
    run_loss, run_n = 0.0, 0
    t_start = time.time()
    last_eval = t_start
    last_print = t_start

    def evaluate_and_checkpoint():
        nonlocal run_loss, run_n, last_eval
        val = bits_per_byte(model, val_wins, device, batch)
        train_bpb = run_loss / max(run_n, 1) / math.log(2.0)
        row = {"step": step, "tokens": tokens_seen, "elapsed_s": round(time.time() - t_start, 1),
               "lr": opt.param_groups[0]["lr"], "train_bits_per_byte": round(train_bpb, 5) if run_n else "",
               "val_bits_per_byte": round(val, 5)}
        curve_rows.append(row)
        run_loss, run_n = 0.0, 0
        with open(curve_path + ".tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row.keys()))
            w.writeheader()
            w.writerows(curve_rows)
        os.replace(curve_path + ".tmp", curve_path)
        log(f"eval step {step}: train {row['train_bits_per_byte']} bits/byte, validation {val:.4f} bits/byte"
            f" ({tokens_seen / 1e6:.1f} M tokens, {time.time() - t_start:.0f} s)")
        if val < best["val_bpb"]:
            best.update(val_bpb=val, step=step, state={k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
            # Checkpoint on every improvement, so an interrupted run still leaves usable weights.
            save_safetensors(os.path.join(args.out, "model.safetensors"), export_weights(model))
            write_text_atomic(os.path.join(args.out, "config.json"), json.dumps(
                {**config_json(cfg, corpus_info, {"status": "checkpoint", "step": step}, {}, n_params), "model": cfg},
                indent=1))
        last_eval = time.time()

    log(f"training: seq {seq}, batch {batch}, lr {lr_peak}, budget {args.minutes} min"
        + (f", at most {args.max_steps} steps" if args.max_steps else ""))
    evaluate_and_checkpoint()
    model.train()
    while True:
        elapsed = time.time() - t_start
        if elapsed >= budget or (args.max_steps and step >= args.max_steps):
            break
        progress = step / args.max_steps if args.max_steps else elapsed / budget
        warm = min(1.0, (step + 1) / args.warmup_steps)
        lr = lr_peak * warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        offs = torch.randint(0, train.numel() - seq - 1, (batch,), generator=gen).to(device)
        idx = offs[:, None] + torch.arange(seq + 1, device=device)[None, :]
        xy = train[idx]
        try:
            with amp_context(device, amp):
                logits, _ = model(xy[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), xy[:, 1:].reshape(-1))
            if not torch.isfinite(loss):
                bad_steps += 1
                opt.zero_grad(set_to_none=True)
                log(f"step {step}: non-finite loss, update skipped ({bad_steps} so far)")
                if bad_steps > 20:
                    log("too many non-finite losses: training stops; the best checkpoint is exported")
                    break
                step += 1
                continue
            loss.backward()
        except RuntimeError as e:  # out of memory on the first steps: halve the batch and retry
            if "out of memory" in str(e) and batch > 1 and step < 5:
                del e
                opt.zero_grad(set_to_none=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                batch //= 2
                log(f"out of memory: batch halved to {batch}")
                continue
            raise
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens_seen += batch * seq
        run_loss += float(loss.detach())
        run_n += 1
        now = time.time()
        if now - last_print > 10:
            log(f"step {step}: loss {float(loss):.4f} nats/byte, lr {lr:.2e}, "
                f"{tokens_seen / (now - t_start) / 1e3:.1f} k tokens/s")
            last_print = now
        if now - last_eval > eval_every:
            evaluate_and_checkpoint()
    train_seconds = time.time() - t_start
    if curve_rows[-1]["step"] != step:  # the last step not yet evaluated
        evaluate_and_checkpoint()
    log(f"training done: {step} steps, {tokens_seen / 1e6:.2f} M tokens in {train_seconds:.0f} s; "
        f"best validation {best['val_bpb']:.4f} bits/byte at step {best['step']}")

    model.load_state_dict(best["state"])
    test_bpb = bits_per_byte(model, test_wins, device, batch)
    log(f"held-out (test split) {test_bpb:.4f} bits/byte over {test_wins.shape[0]} windows of {seq} bytes, fp32")
    training = {
        "status": "complete",
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "torch": torch.__version__,
        "seed": args.seed,
        "minutes_budget": args.minutes,
        "train_seconds": round(train_seconds, 1),
        "steps": step,
        "tokens": tokens_seen,
        "epochs": round(tokens_seen / len(splits["train"]), 2),
        "seq_len": seq,
        "batch_size": batch,
        "lr_peak": lr_peak,
        "schedule": f"linear warm-up over {args.warmup_steps} steps, cosine to 0.1 x peak over the budget",
        "optimizer": f"AdamW betas (0.9, 0.95), weight decay {args.weight_decay} on matrices, grad clip 1.0",
        "precision": "bf16 autocast for the projections, fp32 recurrence" if amp else "fp32",
        "selected_step": best["step"],
        "val_bits_per_byte": round(best["val_bpb"], 5),
        "test_bits_per_byte": round(test_bpb, 5),
        "test_windows": f"{test_wins.shape[0]} windows of {seq} bytes from a zero state, every position scored",
        "command": " ".join(sys.argv),
    }
    finish(args, cfg, model.cpu(), corpus_info, training, eval_bytes)


def finish(args, cfg, model_cpu, corpus_info, training, eval_bytes):
    model_cpu = model_cpu.float().eval()
    n_params = sum(p.numel() for p in model_cpu.parameters())
    save_safetensors(os.path.join(args.out, "model.safetensors"), export_weights(model_cpu))
    with open(os.path.join(args.out, "eval.txt"), "wb") as f:
        f.write(eval_bytes)
    golden = export_golden(model_cpu, eval_bytes, args.golden_tokens, args.out)
    log(f"golden: {json.dumps(golden)}")
    cfg_out = config_json(cfg, corpus_info, training, golden, n_params)
    cfg_out["model"] = cfg  # the script's own view, read back by --export-only
    write_text_atomic(os.path.join(args.out, "config.json"), json.dumps(cfg_out, indent=1) + "\n")
    log(f"wrote {args.out}: model.safetensors, config.json, train_curve.csv, eval.txt ({len(eval_bytes)} bytes), "
        "golden.safetensors, train_log.txt")


if __name__ == "__main__":
    main()
