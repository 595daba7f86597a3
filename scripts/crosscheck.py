#!/usr/bin/env python3
"""Cross-implementation check: statecheck's references against transformers' gated-delta layers
and flash-linear-attention's kernels, on the same captured inputs (docs/real_models.md,
"Cross-check").

For each family's small randomly initialised config (no weights): export the recurrence inputs
with scripts/export_inputs.py (the model in bf16 on the GPU, transformers' own PyTorch
recurrence), then
  1. statecheck's fp64 loop and fp32 Eigen reference (`statecheck reference`) against the
     outputs and final states transformers computed in the model;
  2. flash-linear-attention's fused_recurrent and chunk kernels on the same inputs (bf16 q, k, v as
     captured; and fp32) against statecheck's fp64 outputs and final states;
  3. the int8 decode-error protocol of `statecheck codec` (prefill, int8 round trip of the state
     with per-column fp32 scales, decode from both states) run through FLA's fused_recurrent and
     through statecheck on the same inputs: the two decode errors must agree to two significant
     figures;
  (with --cuda, statecheck's CUDA kernels against its CPU reference in the same codec run;)
  4. the inplace_final_state trap: FLA's public fused_recurrent_kda called with
     inplace_final_state=True, recording whether the state passed in changed (upstream: it does
     not), and every state the check reads is refused when it equals its starting state.
Writes a results JSON (for results/gpu/); exit 1 when a comparison fails, 2 on an error.

Tolerances (relative Frobenius error ||x - ref|| / ||ref|| against statecheck's fp64 loop):
  fp32 paths (statecheck fp32, FLA fused_recurrent on fp32 inputs): tol32 = T d_k 2^-24. Each
    of the T steps adds at most about d_k fp32 roundings (relative 2^-24) to a state entry, and the
    recurrence does not amplify earlier errors: its transition diag(exp g)(I - beta k k^T) has
    norm <= 1 for g <= 0, beta in [0, 1] and unit keys.
  paths through bf16 (the model in bf16: bf16 outputs, and transformers' Qwen layers L2-normalise
    q and k in bf16; FLA on bf16 inputs keeps its chunk intermediates w, u and the UT-transform
    matrix in the input dtype and returns bf16 outputs): tol16 = 4 x 2^-8. One rounding to bf16
    (8 significant bits) is off by at most 2^-8 of each value; the chunk kernels chain at most four
    such roundings on a path to an output (A, w or u, the state update, the output), and the fp32
    accumulation between them adds only tol32 (below 2^-8 for the configs here).
  FLA chunk on fp32 inputs: tol_tf32 = 4 x 2^-11: Triton's tl.dot on fp32 uses TF32 (11
    significant bits) unless told otherwise; the same four roundings.

  crosscheck.py --statecheck BUILD/statecheck --out results/gpu/crosscheck.json [--cuda]
  crosscheck.py --fixture tests/data/inputs [--statecheck BUILD/statecheck]
  crosscheck.py --self-test        (numpy only: the int8 codec, the metrics, the tolerances)
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_inputs as ex  # noqa: E402

FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_linear", "fla_kda")
U32, U16, UTF32 = 2.0 ** -24, 2.0 ** -8, 2.0 ** -11


def tol32(T, dk):
    return T * dk * U32


TOL16 = 4 * U16
TOL_TF32 = 4 * UTF32


def relerr(ref, x):
    ref, x = np.asarray(ref, np.float64), np.asarray(x, np.float64)
    if not np.all(np.isfinite(x)):
        return float("inf")
    num, den = float(np.sum((x - ref) ** 2)), float(np.sum(ref ** 2))
    return 0.0 if num == 0 else (math.sqrt(num / den) if den > 0 else float("inf"))


def int8_roundtrip(S):
    """statecheck's int8 codec with fp32 scales (docs/codecs.md, "int8"): per head [d_v, d_k] and
    key channel j, amax_j over the d_v rows, scale_j = amax_j / 127, code = clamp(rint(S /
    scale_j), -127, 127), decode = code * scale_j, all in fp32 with ties to even."""
    S = np.asarray(S, np.float32)
    amax = np.maximum(np.abs(S).max(axis=-2, keepdims=True), np.float32(1e-8))
    scale = (amax / np.float32(127)).astype(np.float32)
    code = np.clip(np.rint(S / scale), -127, 127).astype(np.float32)
    return (code * scale).astype(np.float32)


def sig2(x):
    return float(f"{x:.1e}")


def self_test():
    # int8: a column by hand, in values fp32 holds exactly: amax 7.9375 = 127 x 0.0625, so
    # scale 0.0625; 1.0 -> 16; 0.09375 = 1.5 steps -> 2 and 0.03125 = 0.5 steps -> 0 (ties to
    # even); -7.9375 -> -127.
    col = np.array([[1.0], [-7.9375], [0.09375], [0.03125]], np.float32)
    got = int8_roundtrip(col)[:, 0]
    want = np.array([16, -127, 2, 0], np.float32) * np.float32(0.0625)
    assert np.array_equal(got, want), (got, want)
    S = np.random.default_rng(3).standard_normal((3, 64, 32)).astype(np.float32)
    err = np.abs(int8_roundtrip(S) - S)
    step = np.abs(S).max(axis=-2, keepdims=True) / 127
    assert np.all(err <= step / 2 * (1 + 1e-5)), "int8 round trip exceeds half a step"
    # relerr: ||(1,1) - (1,0)|| / ||(1,0)|| = 1; and the two-figure rounding.
    assert relerr([1, 0], [1, 1]) == 1.0 and relerr([2.0], [2.0]) == 0.0
    assert sig2(6.4749e-3) == 6.5e-3 and sig2(6.44e-3) == 6.4e-3
    assert tol32(256, 64) == 256 * 64 * 2.0 ** -24 and TOL16 == 1 / 64
    print("crosscheck self-test: int8 codec, relerr, tolerances ok")
    return 0


# ---- GPU part -----------------------------------------------------------------------------------

def load_inputs(path):
    from safetensors.numpy import load_file
    from safetensors import safe_open
    with safe_open(path, "np") as f:
        meta = f.metadata()
    return load_file(path), meta


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ex.ExportError(f"{' '.join(cmd)} exited {r.returncode}: "
                             f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return r.stdout


def fla_layer(torch, fla_fns, kind, gate, t, i, meta, dtype, t0, t1, S0_vk):
    """FLA kernel `kind` (fused_recurrent | chunk) on layer i's tokens [t0, t1) from S0 [N, HV, d_v,
    d_k] (statecheck layout): returns outputs [N, t1 - t0, HV, d_v] and the final state in
    statecheck layout, both fp32 numpy; q, k repeated to the value heads (GVA by repetition, the
    same mathematics on any FLA version)."""
    dev = "cuda"
    q, k, v, g, beta = (t[f"layers.{i}.{n}"][:, t0:t1] for n in ("q", "k", "v", "g", "beta"))
    HV, H = v.shape[2], q.shape[2]
    as_t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a)).to(dev, dt)
    qt = as_t(q, dtype).repeat_interleave(HV // H, 2)
    kt = as_t(k, dtype).repeat_interleave(HV // H, 2)
    vt, gt, bt = as_t(v, dtype), as_t(g, torch.float32), as_t(beta, torch.float32)
    h0 = as_t(np.swapaxes(S0_vk, -1, -2), torch.float32).contiguous()  # FLA: [N, HV, K, V]
    fn = fla_fns[(gate, kind)]
    o, ht = fn(q=qt, k=kt, v=vt, g=gt, beta=bt, scale=float(meta["scale"]),
               initial_state=h0, output_final_state=True,
               use_qk_l2norm_in_kernel=meta["qk_l2norm_applied"] == "false")
    if ht is None:
        raise ex.ExportError(f"FLA {kind} ({gate}) returned no final state")
    S = np.swapaxes(ht.float().cpu().numpy(), -1, -2)
    ex.require_state_moved(i, S0_vk, S)
    return o.float().cpu().numpy(), S


def inplace_trap(torch, fla_fns, t, i, meta):
    """Calls the public fused_recurrent_kda as SGLang-era code does: initial_state=h and
    inplace_final_state=True, output_final_state=False. Returns whether h changed."""
    from fla.ops.kda import fused_recurrent_kda
    q, k, v, g, beta = (t[f"layers.{i}.{n}"][:1, :16] for n in ("q", "k", "v", "g", "beta"))
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to("cuda", torch.float32)
    HV, H, dk, dv = v.shape[2], q.shape[2], q.shape[3], v.shape[3]
    h = torch.zeros(1, HV, dk, dv, device="cuda", dtype=torch.float32)
    before = h.clone()
    out = fused_recurrent_kda(q=as_t(q).repeat_interleave(HV // H, 2),
                              k=as_t(k).repeat_interleave(HV // H, 2), v=as_t(v), g=as_t(g),
                              beta=as_t(beta), scale=float(meta["scale"]), initial_state=h,
                              inplace_final_state=True, output_final_state=False,
                              use_qk_l2norm_in_kernel=meta["qk_l2norm_applied"] == "false")
    return {"state_changed_in_place": bool(not torch.equal(h, before)),
            "returned_final_state": out[1] is not None,
            "note": "upstream flash-linear-attention: fla/ops/kda/fused_recurrent.py passes "
                    "inplace_final_state=False to fused_recurrent_kda_fwd; the state passed in "
                    "stays as it was and no state is returned"}


def export_family(a, torch):
    """--export-family F: the export of check_family, in a process of its own. transformers'
    families run with flash-linear-attention blocked (ex.block_fla), so that the reference
    outputs and states are transformers' own PyTorch recurrence and not FLA's kernels, which this
    check compares separately; fla_kda is FLA's model code and keeps it. Prints the inputs path."""
    family = a.export_family
    if family != "fla_kda":
        ex.block_fla()
    work = os.path.join(a.work, family)
    model = ex.random_model(family, torch, a.seed)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    if family != "fla_kda":
        ex.force_torch_recurrence(model)
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, 512, (a.sequences, a.tokens), generator=g).to("cuda")
    inputs = ex.export(model, ids, work, f"random-{family}", f"crosscheck.py {family}",
                       {"compute_dtype": "bfloat16", "text": "random token ids",
                        "seed": str(a.seed)}, torch)
    print(json.dumps({"inputs": inputs}))
    return 0


def check_family(family, a, torch, fla_fns, out_dir, partial):
    """The checks of one family; its comparison rows are also kept in partial["comparisons"] as
    they are made, so that a later failure does not hide them."""
    work = os.path.join(out_dir, family)
    start = time.monotonic()

    def step(what):  # progress on stderr: the first run of FLA's Triton kernels compiles them
        print(f"crosscheck {family}: {what} ({time.monotonic() - start:.0f} s)", file=sys.stderr,
              flush=True)

    step("exporting a random model")
    out = run([sys.executable, os.path.abspath(__file__), "--export-family", family, "--work",
               out_dir, "--seed", str(a.seed), "--tokens", str(a.tokens), "--sequences",
               str(a.sequences)])
    inputs = json.loads(out.strip().splitlines()[-1])["inputs"]
    mj = os.path.join(work, "model.json")
    t, meta = load_inputs(inputs)
    layers = sorted({int(n.split(".")[1]) for n in t})
    gate = meta["gate"]
    T = a.tokens
    dk = t[f"layers.{layers[0]}.q"].shape[3]
    rows = partial.setdefault("comparisons", [])

    def row(a_name, b_name, quantity, err, tol, derivation):
        rows.append({"a": a_name, "b": b_name, "quantity": quantity, "relerr": err, "tol": tol,
                     "derivation": derivation, "pass": bool(err < tol),
                     "used_of_tol": err / tol})

    step("statecheck references")
    ref_h5 = os.path.join(work, "reference.h5")
    ref_json = os.path.join(work, "reference.json")
    run([a.statecheck, "reference", "--model", mj, "--drive", "inputs", "--inputs", inputs,
         "--out", ref_h5, "--summary", ref_json])
    with open(ref_json) as f:
        s = json.load(f)
    t32 = tol32(T, dk)
    row("statecheck fp32", "statecheck fp64", "outputs",
        s["reference.fp32_vs_fp64.output_relerr_layer_max"], t32, "tol32 = T d_k 2^-24")
    row("statecheck fp32", "statecheck fp64", "final states",
        s["reference.fp32_vs_fp64.final_state_relerr_layer_max"], t32, "tol32")
    row("transformers (bf16 model)", "statecheck fp64", "outputs",
        s["reference.file_vs_fp64.output_relerr_layer_max"], TOL16, "tol16 = 4 x 2^-8")
    row("transformers (bf16 model)", "statecheck fp64", "final states",
        s["reference.file_vs_fp64.final_state_relerr_layer_max"], TOL16, "tol16")

    import h5py
    with h5py.File(ref_h5, "r") as f:
        o64 = {i: f[f"reference/layers.{i}/fp64_outputs"][()] for i in layers}
        S64 = {i: f[f"reference/layers.{i}/fp64_final_state"][()] for i in layers}
    for kind in ("fused_recurrent", "chunk"):
        step(f"FLA {kind}")
        for dt_name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            worst_o = worst_S = 0.0
            for i in layers:
                S0 = t.get(f"layers.{i}.initial_state",
                           np.zeros_like(t[f"layers.{i}.final_state"]))
                o, S = fla_layer(torch, fla_fns, kind, gate, t, i, meta, dt, 0, T, S0)
                worst_o, worst_S = max(worst_o, relerr(o64[i], o)), max(worst_S, relerr(S64[i], S))
            if dt_name == "bf16":
                tol, why = TOL16, "tol16"
            elif kind == "chunk":
                tol, why = TOL_TF32, "tol_tf32 = 4 x 2^-11"
            else:
                tol, why = t32, "tol32"
            row(f"FLA {kind} ({dt_name} q/k/v)", "statecheck fp64", "outputs", worst_o, tol, why)
            row(f"FLA {kind} ({dt_name} q/k/v)", "statecheck fp64", "final states", worst_S, tol, why)

    # The decode-error protocol, through FLA (fp32 fused_recurrent) and through statecheck.
    step("the int8 decode error through statecheck and FLA")
    Td = a.decode
    Tp = T - Td
    sc_json = os.path.join(work, "codec.json")
    run([a.statecheck, "codec", "--model", mj, "--drive", "inputs", "--inputs", inputs,
         "--prefill", str(Tp), "--decode", str(Td), "--out", os.path.join(work, "codec.h5"),
         "--summary", sc_json] + (["--device", "cuda"] if a.cuda else []))
    with open(sc_json) as f:
        sc = json.load(f)
    if a.cuda:
        # statecheck's CUDA pool kernels (bf16 q/k/v and outputs, fp32 state) against its CPU fp32
        # reference on the same inputs: a bf16 path.
        row("statecheck CUDA", "statecheck fp32 CPU", "prefill states",
            sc["codec.cuda.prefill_state_relerr_vs_cpu"], TOL16, "tol16")
        row("statecheck CUDA", "statecheck fp32 CPU", "decode outputs",
            sc["codec.cuda.decode_output_relerr_vs_cpu"], TOL16, "tol16")
    err2 = ref2 = 0.0
    for i in layers:
        S0 = t.get(f"layers.{i}.initial_state", np.zeros_like(t[f"layers.{i}.final_state"]))
        _, S = fla_layer(torch, fla_fns, "fused_recurrent", gate, t, i, meta, torch.float32, 0, Tp, S0)
        o_ref, _ = fla_layer(torch, fla_fns, "fused_recurrent", gate, t, i, meta, torch.float32,
                             Tp, T, S)
        o_hat, _ = fla_layer(torch, fla_fns, "fused_recurrent", gate, t, i, meta, torch.float32,
                             Tp, T, int8_roundtrip(S))
        err2 += float(np.sum((o_hat.astype(np.float64) - o_ref) ** 2))
        ref2 += float(np.sum(o_ref.astype(np.float64) ** 2))
    fla_decode = math.sqrt(err2 / ref2)
    sc_decode = sc["codec.int8.decode_relerr"]
    decode = {"prefill": Tp, "decode": Td, "fla_fused_recurrent": fla_decode,
              "statecheck": sc_decode, "fla_2sf": sig2(fla_decode), "statecheck_2sf": sig2(sc_decode),
              # Two figures, or within 0.1% where the two straddle a rounding boundary of the
              # second figure (6.4499e-3 and 6.4501e-3 agree).
              "agree_2sf": sig2(fla_decode) == sig2(sc_decode)
              or abs(fla_decode - sc_decode) <= 1e-3 * sc_decode,
              "relative_difference": abs(fla_decode - sc_decode) / sc_decode}
    result = {"family": family, "inputs": inputs, "inputs_sha256": ex.file_sha256(inputs),
              "metadata": meta, "layers": layers, "sequences": a.sequences, "tokens": T,
              "comparisons": rows, "decode_error_int8": decode}
    if gate == "kda":
        result["inplace_final_state_trap"] = inplace_trap(torch, fla_fns, t, layers[0], meta)
    result["pass"] = all(r["pass"] for r in rows) and decode["agree_2sf"]
    return result


def fixture(a, torch):
    """One small export for tests/data/inputs: a random 3-layer Qwen3-Next (2 gated-delta layers)
    in float32 with transformers' own PyTorch recurrence, 64 tokens, with its outputs and final
    states (a few hundred KB). Runs with flash-linear-attention blocked (ex.block_fla), so that
    the outputs are transformers' PyTorch recurrence, not FLA's TF32 kernels."""
    ex.block_fla()
    model = ex.random_model("qwen3_next", torch, a.seed, layers=3)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device=dev, dtype=torch.float32).eval()
    ex.force_torch_recurrence(model)
    ids = torch.randint(0, 512, (1, 64), generator=torch.Generator().manual_seed(a.seed)).to(dev)
    tmp = os.path.join(a.fixture, "qwen3_next_tiny.export")
    inputs = ex.export(model, ids, tmp, "qwen3-next-tiny-random",
                       "scripts/crosscheck.py --fixture (random weights, seed %d)" % a.seed,
                       {"compute_dtype": "float32", "text": "random token ids",
                        "seed": str(a.seed)}, torch)
    os.replace(inputs, os.path.join(a.fixture, "qwen3_next_tiny.safetensors"))
    os.replace(os.path.join(tmp, "model.json"), os.path.join(a.fixture, "qwen3_next_tiny.model.json"))
    os.replace(os.path.join(tmp, "export.json"), os.path.join(a.fixture, "qwen3_next_tiny.export.json"))
    os.rmdir(tmp)
    if a.statecheck:
        print(run([a.statecheck, "reference", "--model",
                   os.path.join(a.fixture, "qwen3_next_tiny.model.json"), "--drive", "inputs",
                   "--inputs", os.path.join(a.fixture, "qwen3_next_tiny.safetensors"),
                   "--out", "/tmp/statecheck_fixture_reference.h5"]))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--fixture", metavar="DIR", help="write the host-test fixture into DIR")
    p.add_argument("--export-family", metavar="F", help=argparse.SUPPRESS)
    p.add_argument("--statecheck", help="path of the statecheck binary")
    p.add_argument("--out", default="results/gpu/crosscheck.json")
    p.add_argument("--work", default="/tmp/statecheck_crosscheck", help="exports go here")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--sequences", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cuda", action="store_true",
                   help="also run statecheck's CUDA path (codec --device cuda; a CUDA build)")
    a = p.parse_args(argv)
    try:
        if a.self_test:
            return self_test()
        import torch
        if a.fixture:
            return fixture(a, torch)
        if a.export_family:
            return export_family(a, torch)
        if not a.statecheck:
            raise ex.ExportError("--statecheck BUILD/statecheck is required")
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        from fla.ops.kda import chunk_kda, fused_recurrent_kda
        fla_fns = {("gdn", "fused_recurrent"): fused_recurrent_gated_delta_rule,
                   ("gdn", "chunk"): chunk_gated_delta_rule,
                   ("kda", "fused_recurrent"): fused_recurrent_kda, ("kda", "chunk"): chunk_kda}
        results = []
        for family in a.families.split(","):
            partial = {}
            try:
                results.append(check_family(family, a, torch, fla_fns, a.work, partial))
            except Exception as e:  # one family failing to build must not hide the others
                results.append({"family": family, **partial, "pass": False,
                                "error": f"{type(e).__name__}: {e}"})
            r = results[-1]
            print(f"crosscheck {family}: {'pass' if r['pass'] else 'FAIL'} "
                  f"{r.get('error', '')}")
            for c in r.get("comparisons", []):
                print(f"  {c['a']:<32} vs {c['b']:<16} {c['quantity']:<13} {c['relerr']:.3g} "
                      f"(tol {c['tol']:.3g}, {100 * c['used_of_tol']:.0f}% used)")
            if "decode_error_int8" in r:
                d = r["decode_error_int8"]
                print(f"  int8 decode error: FLA {d['fla_fused_recurrent']:.4g}, statecheck "
                      f"{d['statecheck']:.4g} ({'agree' if d['agree_2sf'] else 'DIFFER'} to 2 "
                      f"figures)")
        import transformers
        fla_commit = ""
        try:
            import fla
            fla_dir = os.path.dirname(os.path.dirname(os.path.abspath(fla.__file__)))
            fla_commit = subprocess.run(["git", "-C", fla_dir, "rev-parse", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
        except Exception:
            pass
        # A checkout without its git history (an archive): the commit as given by the caller.
        fla_commit = fla_commit or os.environ.get("FLA_COMMIT", "")
        doc = {"tool": "scripts/crosscheck.py", "machine": platform.node(),
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
               "torch": torch.__version__, "transformers": transformers.__version__,
               "fla_commit": fla_commit, "seed": a.seed, "tokens": a.tokens,
               "sequences": a.sequences, "tolerances": __doc__.split("Tolerances")[1].split("  crosscheck.py")[0].strip(),
               "families": results, "pass": all(r["pass"] for r in results)}
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"crosscheck: wrote {a.out}: {'all pass' if doc['pass'] else 'FAILURES'}")
        return 0 if doc["pass"] else 1
    except ex.ExportError as e:
        print(f"crosscheck: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
