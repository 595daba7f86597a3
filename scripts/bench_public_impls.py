#!/usr/bin/env python3
"""Times the public implementations next to statecheck's CUDA paths, on the same GPU in one run.

  1. The int8 / fp8 checkpoint codec written with plain PyTorch tensor ops, the way the public
     implementation does it (gather the N active slots of all layers, amax over d_v, scale rounded
     to the state dtype, round/clamp, scatter into checkpoint slots; load = dequantize and scatter
     back), for N in {1, 8, 64} slots of the Qwen3.5-35B-A3B TP-4 state (30 layers, 8 heads,
     128 x 128, fp32 and bf16 active dtype).
  2. With --fla PATH (a local flash-linear-attention checkout): its fused_recurrent GDN and KDA
     kernels at decode batch {1, 32, 256} on the GDN (H 16, HV 32) and KDA (H = HV = 32) shapes;
     and its chunked prefill kernels (chunk_gated_delta_rule, chunk_kda) next to fused_recurrent at
     batch x length 64 x 256, 8 x 4096 and 1 x 32768 (prefill_* rows, with tokens/s).
  3. A working-state decode step written with PyTorch ops (the unfused pipeline: gather the
     batch's slots, dequantize, the FLA-style fp32 step with q/k L2 norm, requantize with the
     per-key-channel scale, scatter back) for int8, int8-sr, fp8_e4m3, fp8_e4m3-sr and bf16-sr
     pools at decode batch {1, 32, 256} on the same GDN and KDA shapes; names match statecheck's
     `decode_<shape>_ws_<format>_B<batch>` rows. The stochastic roundings draw torch.rand words
     (the op count of the pipeline, not statecheck's Philox bits).
  4. With --statecheck-h5 FILE (the result of `statecheck bench --device cuda` run just before):
     the matching statecheck rows side by side, with the speed-up over the PyTorch codec.

Timing: CUDA events, L2 flushed by a 256 MB read before each repeat and again after the launch
inside the timed region (so its writes reach HBM), less the median time of that read alone;
medians (the method of kernels/common/timing.h). Each row is timed twice: eager (the Python call
inside the timed region, so host work that outlasts the flush before it shows as idle GPU time)
and as a CUDA graph replay of the same launches (GPU time alone: how statecheck's bench times its
launches and how serving engines run decode). Copy bandwidth of the
same GPU measured in the same run (tensor copy, bytes read + written). Byte models are those of
statecheck's kernels (kernels/codec/checkpoint_codec.h, kernels/gated_delta/gated_delta_pool.h).
Runs where PyTorch with CUDA is installed; writes a JSON of all rows with --json FILE.

    python3 scripts/bench_public_impls.py --fla /path/to/flash-linear-attention \
        --statecheck-h5 results/gpu/bench.h5 --json results/gpu/public_impls.json
"""
import argparse
import json
import sys

import torch

L, HV, DV, DK, CONV = 30, 8, 128, 128, 2048 * 3


def timer(fn, repeats, flush):
    """(ms, ms_memset_flush): median ms of fn timed as statecheck's GpuTimer does
    (kernels/common/timing.h): the flush buffer is read before the launch and again after it
    inside the timed region (so the launch's dirty L2 lines reach HBM), and the median time of
    that read alone is subtracted; and the median after a memset of the buffer with the launch
    alone timed (Triton's do_bench convention).

    fn is called from Python inside the timed region, so whatever of its host work (argument
    checks, dispatch, allocation) outlasts the GPU's flush before it shows up as idle GPU time,
    as it does for an eager caller."""
    sink = torch.empty((), dtype=torch.float32, device=flush.device)

    def read_flush():
        torch.sum(flush, 0, out=sink)

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(with_fn):
        read_flush()
        start, stop = events()
        start.record()
        if with_fn:
            fn()
        read_flush()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    def timed_memset(r):
        flush.fill_(float(r & 0xFF))
        start, stop = events()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    fn()  # warm-up (and Triton compilation)
    torch.cuda.synchronize()
    with_fn, alone, memset = [], [], []
    for r in range(repeats):
        with_fn.append(timed(True))
        alone.append(timed(False))
        memset.append(timed_memset(r))
    alone.sort()
    times = sorted(t - alone[len(alone) // 2] for t in with_fn)
    memset.sort()
    return times[len(times) // 2], memset[len(memset) // 2]


def graph_timer(fn, repeats, flush):
    """timer() of the same launches captured once into a CUDA graph and replayed: the GPU time
    alone, as statecheck's bench times its launches (kernels/common/timing.h) and as a serving
    engine runs decode. Returns (None, None, reason) when fn cannot be captured, else (ms,
    ms_memset_flush, None)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as e:  # noqa: BLE001 - report any capture failure, keep the eager row
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        try:
            torch.cuda.synchronize()
        except Exception as sticky:  # noqa: BLE001 - a sticky error ends the run with both reasons
            raise RuntimeError(f"graph capture failed ({why}) and left the GPU unusable: {sticky}") from e
        return None, None, why
    ms, ms_memset = timer(graph.replay, repeats, flush)
    return ms, ms_memset, None


def measure(fn, repeats, flush):
    """Eager and CUDA-graph timings of fn (see timer and graph_timer)."""
    eager = timer(fn, repeats, flush)
    return eager + graph_timer(fn, repeats, flush)


def row(impl, name, nbytes, times, copy_gbps):
    """A result row: `times` = measure()'s (ms, ms_memset_flush, graph ms, graph ms_memset_flush,
    capture failure), `nbytes` the byte model."""
    ms, ms_memset, gms, gms_memset, why = times
    gbps = nbytes / (ms * 1e-3) / 1e9
    r = {"impl": impl, "name": name, "bytes": nbytes, "ms": ms, "gbps": gbps,
         "fraction_of_copy": gbps / copy_gbps, "gbps_memset_flush": nbytes / (ms_memset * 1e-3) / 1e9}
    r["fraction_of_copy_memset_flush"] = r["gbps_memset_flush"] / copy_gbps
    if gms is None:
        r["graph_capture_failed"] = why
    else:
        r["graph_ms"] = gms
        r["graph_gbps"] = nbytes / (gms * 1e-3) / 1e9
        r["graph_fraction_of_copy"] = r["graph_gbps"] / copy_gbps
        r["graph_gbps_memset_flush"] = nbytes / (gms_memset * 1e-3) / 1e9
        r["graph_fraction_of_copy_memset_flush"] = r["graph_gbps_memset_flush"] / copy_gbps
    return r


def quantize(state, qmax, fp8):
    """The public codec's math: amax over d_v in fp32, scale rounded to the state dtype first."""
    s32 = state.float()
    amax = s32.abs().amax(dim=-2, keepdim=True).clamp(min=1e-8)
    scale = (amax / qmax).to(state.dtype)
    x = s32 / scale.float()
    if fp8:
        q = x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    else:
        q = torch.round(x).clamp(-qmax, qmax).to(torch.int8)
    return q, scale


def bench_codec(dev, repeats, flush, copy_gbps, rows):
    slots = 65
    for dtype in (torch.float32, torch.bfloat16):
        name = "fp32" if dtype == torch.float32 else "bf16"
        active = (torch.randn(L, slots, HV, DV, DK, device=dev) * 0.06).to(dtype)
        aconv = torch.randn(L, slots, CONV, device=dev).to(torch.bfloat16)
        for codec in ("int8", "fp8_e4m3"):
            fp8 = codec == "fp8_e4m3"
            qdata = torch.empty(L, slots, HV, DV, DK, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.int8)
            scale = torch.empty(L, slots, HV, 1, DK, device=dev, dtype=dtype)
            cconv = torch.empty(L, slots, CONV, device=dev, dtype=torch.bfloat16)
            qmax = 448.0 if fp8 else 127.0
            for n in (1, 8, 64):
                g = torch.Generator().manual_seed(n)
                src = (torch.randperm(slots - 1, generator=g)[:n] + 1).to(dev)
                dst = (torch.randperm(slots - 1, generator=g)[:n] + 1).to(dev)
                back = (torch.randperm(slots - 1, generator=g)[:n] + 1).to(dev)

                def store():
                    q, s = quantize(active[:, src], qmax, fp8)
                    qdata[:, dst] = q
                    scale[:, dst] = s
                    cconv[:, dst] = aconv[:, src]

                def load():
                    active[:, back] = (qdata[:, dst].float() * scale[:, dst].float()).to(dtype)
                    aconv[:, back] = cconv[:, dst]

                nbytes = n * L * HV * DV * DK * (active.element_size() + 1) + n * L * HV * DK * scale.element_size() \
                    + 4 * n * L * CONV + 8 * n
                for op, fn in (("store", store), ("load", load)):
                    rows.append(row("torch_ops", f"{op}_{codec}_{name}_active_N{n}", nbytes,
                                    measure(fn, repeats, flush), copy_gbps))


def bench_fla(path, dev, repeats, flush, copy_gbps, rows):
    sys.path.insert(0, path)
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule_fwd
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    K = V = 128
    for shape, H, HVx, kda in (("gdn_H16_HV32", 16, 32, False), ("kda_H32_HV32", 32, 32, True)):
        for B in (1, 32, 256):
            q = (torch.randn(B, 1, H, K, device=dev) * 0.5).bfloat16()
            k = (torch.randn(B, 1, H, K, device=dev) * 0.5).bfloat16()
            v = (torch.randn(B, 1, HVx, V, device=dev) * 0.5).bfloat16()
            beta = torch.rand(B, 1, HVx, device=dev)
            g = -torch.rand(B, 1, HVx, K, device=dev) * 0.1 - 0.005 if kda else -torch.rand(B, 1, HVx, device=dev) * 0.1
            pool = torch.randn(B + 1, HVx, K, V, device=dev) * 0.06
            idx = torch.randperm(B, device=dev).to(torch.int32) + 1
            if kda:
                def run():
                    fused_recurrent_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=pool,
                                            inplace_final_state=True,
                                            ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
                                            cu_seqlens=None)
            else:
                h0 = pool[1:B + 1].contiguous()

                def run():
                    fused_recurrent_gated_delta_rule_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                                                         output_final_state=True, use_qk_l2norm_in_kernel=True)
            per_token = 2 * (2 * H * K + HVx * V) + 4 * (HVx * K if kda else HVx) + 4 * HVx + 2 * HVx * V
            nbytes = 2.0 * B * HVx * K * V * 4 + per_token * B
            rows.append(row("fla_fused_recurrent", f"decode_{shape}_fp32_state_B{B}", nbytes,
                            measure(run, repeats, flush), copy_gbps))


def bench_fla_prefill(path, dev, repeats, flush, copy_gbps, rows):
    """FLA's chunked kernels (chunk_gated_delta_rule, chunk_kda) and fused_recurrent at batch x
    length 64 x 256, 8 x 4096 and 1 x 32768 on the GDN and KDA shapes, fp32 initial and final
    states, bf16 inputs, q/k L2 norm in the kernel; names match statecheck's
    `prefill_chunked_<shape>_fp32_state_B<B>_T<T>` and `prefill_recurrent_...` rows, with the same
    byte model, so the GB/s ratio is the speed ratio."""
    sys.path.insert(0, path)
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule_fwd
    from fla.ops.kda import chunk_kda
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    K = V = 128
    for shape, H, HVx, kda in (("gdn_H16_HV32", 16, 32, False), ("kda_H32_HV32", 32, 32, True)):
        for B, T in ((64, 256), (8, 4096), (1, 32768)):
            q = (torch.randn(B, T, H, K, device=dev) * 0.5).bfloat16()
            k = (torch.randn(B, T, H, K, device=dev) * 0.5).bfloat16()
            v = (torch.randn(B, T, HVx, V, device=dev) * 0.5).bfloat16()
            beta = torch.rand(B, T, HVx, device=dev)
            g = (-torch.rand(B, T, HVx, K, device=dev) * 0.1 - 0.005 if kda
                 else -torch.rand(B, T, HVx, device=dev) * 0.1)
            h0 = torch.randn(B, HVx, K, V, device=dev) * 0.06
            per_token = 2 * (2 * H * K + HVx * V) + 4 * (HVx * K if kda else HVx) + 4 * HVx + 2 * HVx * V
            nbytes = 2.0 * B * HVx * K * V * 4 + per_token * B * T
            if kda:
                def chunk():
                    chunk_kda(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                              output_final_state=True, use_qk_l2norm_in_kernel=True)

                def recurrent():
                    fused_recurrent_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                                            output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=None)
            else:
                def chunk():
                    chunk_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                                           output_final_state=True, use_qk_l2norm_in_kernel=True)

                def recurrent():
                    fused_recurrent_gated_delta_rule_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5,
                                                         initial_state=h0, output_final_state=True,
                                                         use_qk_l2norm_in_kernel=True)
            for impl, kind, fn in (("fla_chunk", "chunked", chunk), ("fla_fused_recurrent", "recurrent", recurrent)):
                with torch.no_grad():
                    r = row(impl, f"prefill_{kind}_{shape}_fp32_state_B{B}_T{T}", nbytes,
                            measure(fn, repeats, flush), copy_gbps)
                r["tokens_per_s"] = B * T / (r.get("graph_ms", r["ms"]) * 1e-3)
                print(f"  {impl} {r['name']}: {r['tokens_per_s'] / 1e6:.2f}M tokens/s", file=sys.stderr)
                rows.append(r)


def bench_ws_torch(dev, repeats, flush, copy_gbps, rows):
    """Working-state decode as PyTorch ops; byte model of kernels/working_state/ws_decode.h."""
    K = V = 128
    for shape, H, HVx, kda in (("gdn_H16_HV32", 16, 32, False), ("kda_H32_HV32", 32, 32, True)):
        for fmt in ("int8", "int8_sr", "fp8_e4m3", "fp8_e4m3_sr", "bf16_sr"):
            sr = fmt.endswith("_sr")
            base = fmt[:-3] if sr else fmt
            for B in (1, 32, 256):
                slots = B + 1
                s0 = torch.randn(slots, HVx, V, K, device=dev) * 0.06
                if base == "bf16":
                    codes, scales = s0.bfloat16(), None
                else:
                    qmax = 127.0 if base == "int8" else 448.0
                    scales = s0.abs().amax(dim=-2, keepdim=True) / qmax
                    y = s0 / scales
                    codes = torch.round(y).clamp(-127, 127).to(torch.int8) if base == "int8" \
                        else y.to(torch.float8_e4m3fn)
                q = (torch.randn(B, H, K, device=dev) * 0.5).bfloat16()
                k = (torch.randn(B, H, K, device=dev) * 0.5).bfloat16()
                v = (torch.randn(B, HVx, V, device=dev) * 0.5).bfloat16()
                beta = torch.rand(B, HVx, device=dev)
                g = -torch.rand(B, HVx, K, device=dev) * 0.1 - 0.005 if kda else -torch.rand(B, HVx, device=dev) * 0.1
                idx = torch.randperm(B, device=dev) + 1
                rep = HVx // H

                def step():
                    S = codes[idx].float() if scales is None else codes[idx].float() * scales[idx]
                    qf, kf = q.float(), k.float()
                    qf = qf / torch.sqrt((qf * qf).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
                    kf = kf / torch.sqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
                    qf, kf = qf.repeat_interleave(rep, dim=1), kf.repeat_interleave(rep, dim=1)
                    S = S * (torch.exp(g)[:, :, None, :] if kda else torch.exp(g)[:, :, None, None])
                    u = torch.einsum("bhvk,bhk->bhv", S, kf)
                    S = S + (beta[..., None] * (v.float() - u))[..., None] * kf[:, :, None, :]
                    o = torch.einsum("bhvk,bhk->bhv", S, qf).bfloat16()
                    if base == "bf16":
                        bits = S.view(torch.int32)
                        if sr:
                            bits = bits + torch.randint(0, 1 << 16, bits.shape, device=dev, dtype=torch.int32)
                        codes[idx] = (bits & -65536).view(torch.float32).bfloat16()
                        return o
                    amax = S.abs().amax(dim=-2, keepdim=True)
                    sc = torch.where(amax == 0, torch.ones_like(amax), amax.clamp(min=1e-8) / qmax)
                    y = S / sc
                    if base == "int8":
                        y = torch.floor(y + torch.rand_like(y)) if sr else torch.round(y)
                        codes[idx] = y.clamp(-127, 127).to(torch.int8)
                    else:
                        if sr:  # noise of the E4M3 gap at |y| (3 mantissa bits), then round
                            gap = torch.exp2(torch.floor(torch.log2(y.abs().clamp(min=2.0 ** -6))) - 3)
                            y = y + (torch.rand_like(y) - 0.5) * gap
                        codes[idx] = y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
                    scales[idx] = sc
                    return o

                state = HVx * V * K * (2 if base == "bf16" else 1) + (0 if base == "bf16" else 4 * HVx * K)
                per_token = 2 * (2 * H * K + HVx * V) + 4 * (HVx * K if kda else HVx) + 4 * HVx + 2 * HVx * V
                nbytes = 2.0 * B * state + per_token * B + 4 * (4 * B + 1)
                rows.append(row("torch_ops", f"decode_{shape}_ws_{fmt}_B{B}", nbytes,
                                measure(step, repeats, flush), copy_gbps))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fla", help="path of a flash-linear-attention checkout (optional)")
    p.add_argument("--statecheck-h5", help="statecheck bench result to print side by side (optional)")
    p.add_argument("--json", help="write all rows here")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--prefill-only", action="store_true",
                   help="with --fla: only the prefill rows (item 2's chunked and recurrent prefill)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_public_impls.py: needs PyTorch with a CUDA GPU")
    dev = "cuda"
    flush = torch.zeros(64 << 20, dtype=torch.float32, device=dev)  # 256 MB
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms, _ = timer(lambda: dst.copy_(src), args.repeats, flush)
    copy_gbps = 2 * src.numel() / (copy_ms * 1e-3) / 1e9
    rows = []
    if args.prefill_only and not args.fla:
        sys.exit("bench_public_impls.py: --prefill-only needs --fla")
    if not args.prefill_only:
        bench_codec(dev, args.repeats, flush, copy_gbps, rows)
        bench_ws_torch(dev, args.repeats, flush, copy_gbps, rows)
    if args.fla:
        if not args.prefill_only:
            bench_fla(args.fla, dev, args.repeats, flush, copy_gbps, rows)
        bench_fla_prefill(args.fla, dev, args.repeats, flush, copy_gbps, rows)
    ours = {}
    if args.statecheck_h5:
        import h5py
        with h5py.File(args.statecheck_h5, "r") as f:
            bench = f["bench"]
            their_copy = float(bench["copy_gbps"][()])
            for name in bench:
                g = bench[name]
                if isinstance(g, h5py.Group) and "gbps" in g and "fraction_of_copy_memset_flush" in g:
                    # (own-bytes GB/s, memset-flush GB/s) of statecheck's kernel
                    ours[name] = (float(g["gbps"][()]), float(g["fraction_of_copy_memset_flush"][()]) * their_copy)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy bandwidth {copy_gbps:.1f} GB/s")
    print("eager: called from Python inside the timed region; graph: the same launches replayed from a CUDA graph")
    print("speed-ups: statecheck's GB/s over the row's, each timed by the own-bytes method, and each by the memset "
          "flush (do_bench convention)")
    print(f"{'impl':<20} {'kernel':<40} {'eager us':>9} {'of copy':>8} {'memset':>7} {'graph us':>9} {'of copy':>8} "
          f"{'memset':>7} {'statecheck GB/s':>16} {'x eager':>8} {'x graph':>8} {'memset: x eager':>16} {'x graph':>8}")
    for r in rows:
        mine = ours.get(r["name"])
        graph = "graph_gbps" in r
        extra = ""
        if mine:
            r["statecheck_gbps"], r["speedup"] = mine[0], mine[0] / r["gbps"]
            extra = f"{mine[0]:>16.1f} {r['speedup']:>7.1f}x"
            r["speedup_memset_flush"] = mine[1] / r["gbps_memset_flush"]
            if graph:
                r["speedup_graph"] = mine[0] / r["graph_gbps"]
                r["speedup_graph_memset_flush"] = mine[1] / r["graph_gbps_memset_flush"]
                extra += f" {r['speedup_graph']:>7.1f}x"
            else:
                extra += f" {'':>8}"
            extra += f" {r['speedup_memset_flush']:>15.1f}x"
            if graph:
                extra += f" {r['speedup_graph_memset_flush']:>7.1f}x"
        g = (f"{r['graph_ms'] * 1e3:>9.1f} {100 * r['graph_fraction_of_copy']:>7.1f}% "
             f"{100 * r['graph_fraction_of_copy_memset_flush']:>6.1f}%" if graph else f"{'n/a':>9} {'':>8} {'':>7}")
        print(f"{r['impl']:<20} {r['name']:<40} {r['ms'] * 1e3:>9.1f} {100 * r['fraction_of_copy']:>7.1f}% "
              f"{100 * r['fraction_of_copy_memset_flush']:>6.1f}% {g} {extra}")
        if not graph:
            print(f"    graph capture failed: {r['graph_capture_failed']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbps": copy_gbps,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
