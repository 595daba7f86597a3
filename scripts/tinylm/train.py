"""Trains statecheck's tiny byte-level gated-delta language model and exports it for the C++ side.

The command line, the self-check that runs first (the chunked recurrence against the token-by-token
one, fp64 and fp32 on the device, and a state continuation; any disagreement stops the run), the
training loop (bf16 autocast for the projections on a GPU) with a checkpoint at every improvement
in validation loss, and the held-out evaluation and export at the end (main).
"""
import argparse
import csv
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from . import VOCAB
from .data import eval_text_of, load_corpus, windows
from .export import (config_json, export_golden, export_weights, import_weights, load_safetensors,
                     save_safetensors, write_text_atomic)
from .model import TinyLM, amp_context, l2norm
from .reference import gated_delta_chunked, gated_delta_recurrent

# model.safetensors must stay under 16 MiB (the largest file a device run hands back; the issue's
# limit is 20 MB): the default model is 4.03 M parameters, 15.4 MiB.
MAX_WEIGHT_BYTES = 16 * 2**20

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


def parse_args():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/
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
