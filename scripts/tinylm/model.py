"""The tiny byte-level language model (vocabulary 256 = bytes), with the structure of the real
gated-delta layers (Qwen3-Next GDN; Kimi-Linear KDA with --gate kda). Per block:
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
The recurrence runs chunked (reference.gated_delta_chunked) or token by token (mode="recurrent")
in fp32 even under autocast. The C++ forward pass (core/tinylm/tinylm.h) reads the same weights.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import L2NORM_EPS, NORM_EPS, VOCAB
from .reference import gated_delta_chunked, gated_delta_recurrent


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
