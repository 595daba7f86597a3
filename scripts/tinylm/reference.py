"""The gated delta rule in plain PyTorch: the token-by-token reference recurrence and the chunked
(WY / UT-transform) form that training uses: chunk 64 for GDN, 16 for KDA, where the per-channel
decay needs a [C, C, d_k] tensor. train.self_check compares the two before a run; the golden logits
are an fp32 forward of the token-by-token recurrence on the CPU.

Layouts: q, k [B, T, HV, d_k] (already expanded to value heads, L2-normalised; q not yet
scaled), v [B, T, HV, d_v], g [B, T, HV] (GDN) or [B, T, HV, d_k] (KDA), log space,
beta [B, T, HV], state S [B, HV, d_v, d_k] (the serving layout: u = S k).
"""
import torch
import torch.nn.functional as F


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
