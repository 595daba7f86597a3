import sys, json, struct, inspect
import numpy as np, torch
import transformers.models.qwen3_next.modeling_qwen3_next as m
path = sys.argv[1]
raw = open(path, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; hdr = json.loads(raw[8:8 + n]); base = 8 + n
def t(name):
    h = hdr[name]; a, b = h['data_offsets']
    return torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype=np.float32).reshape(h['shape']).copy())
print("l2norm source:", inspect.getsource(m.l2norm).strip().replace("\n", " | "))
print("matmul precision:", torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
def loop64(q, k, v, g, beta):
    q, k, v, g, beta = [x.double().numpy()[0] for x in (q, k, v, g, beta)]
    T, HV, dv = v.shape; dk = q.shape[-1]
    S = np.zeros((HV, dv, dk)); out = np.zeros((T, HV, dv))
    for tt in range(T):
        for h in range(HV):
            qq = q[tt, h] / np.sqrt((q[tt, h] ** 2).sum() + 1e-6) / np.sqrt(dk)
            kk = k[tt, h] / np.sqrt((k[tt, h] ** 2).sum() + 1e-6)
            S[h] *= np.exp(g[tt, h]); S[h] += beta[tt, h] * np.outer(v[tt, h] - S[h] @ kk, kk); out[tt, h] = S[h] @ qq
    return out
rel = lambda a, b: float(np.linalg.norm((a - b).ravel()) / np.linalg.norm(b.ravel()))
for L in (0, 1):
    q, k, v, g, b, o = [t(f'layers.{L}.{x}') for x in ('q', 'k', 'v', 'g', 'beta', 'o')]
    rep = v.shape[2] // q.shape[2]
    qr, kr = q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2)
    ref = loop64(qr, kr, v, g, b); file_o = o.double().numpy()[0]
    print(f"layer {L}: file o vs fp64 loop {rel(file_o, ref):.3e}")
    for dev in ('cpu', 'cuda'):
        for fn in (m.torch_chunk_gated_delta_rule, m.torch_recurrent_gated_delta_rule):
            for prec in ('highest', 'high'):
                torch.set_float32_matmul_precision(prec)
                out = fn(qr.to(dev), kr.to(dev), v.to(dev), g.to(dev), b.to(dev), initial_state=None,
                         output_final_state=True, use_qk_l2norm_in_kernel=True)[0]
                x = out.double().cpu().numpy()[0]
                print(f"  {dev:4} {fn.__name__:34} {prec:8}: vs fp64 {rel(x, ref):.3e}  vs file {rel(x, file_o):.3e}")
    torch.set_float32_matmul_precision('highest')
