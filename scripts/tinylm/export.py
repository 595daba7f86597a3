"""What a run writes for the C++ side: safetensors files (written and read with numpy, so no extra
package is needed), the weights under the loader's names, config.json and the golden outputs.
Imports without torch; import_weights and export_golden import it when called.
"""
import copy
import json
import os
import struct

import numpy as np

from . import L2NORM_EPS, NORM_EPS, VOCAB


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
    import torch

    sd = model.state_dict()
    missing = sorted(set(sd) - set(arrays))
    extra = sorted(set(arrays) - set(sd))
    if missing or extra:
        raise ValueError(f"weights do not match the model: missing {missing}, unexpected {extra}")
    for name in sd:
        if tuple(sd[name].shape) != tuple(arrays[name].shape):
            raise ValueError(f"tensor {name}: shape {arrays[name].shape}, model expects {tuple(sd[name].shape)}")
    model.load_state_dict({k: torch.from_numpy(arrays[k]) for k in sd})


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
    import torch

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
