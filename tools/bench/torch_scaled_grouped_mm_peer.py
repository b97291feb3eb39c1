#!/usr/bin/env python3
"""FP8 MoE layer forward built the way a torch user would build it on `torch._scaled_grouped_mm`,
timed as a peer of `moegraph bench moe --quant fp8-channel` (issue 11, item 6). Torch only; our code.

What one timed call does (one input set, all on the GPU, no host sync, so it is graph-captured):
  1. route: softmax (fp32) -> top-k -> renormalise, from given router logits (the harness's `route`,
     the same random routing as the other peers: moe_common.make_inputs / route)
  2. dynamic FP8 quantization of x, one scale per token: scale = max(amax, 1e-10) / 448,
     codes = e4m3(clamp(x / scale, -448, 448))
  3. permutation of the (token, slot) pairs to expert-contiguous order (stable sort of the expert
     ids), group end offsets (int32 cumsum of the per-expert counts), gather of codes and scales
  4. GEMM1: torch._scaled_grouped_mm(codes [S, H], w13 codes [E, H, 2I] (column-major view of
     [E, 2I, H]), per-row scale [S], per-output-channel scale [E, 2I], offs) -> bf16 [S, 2I]
  5. silu(gate) * up in bf16, requantized per row (as in 2)
  6. GEMM2 likewise with w2 -> bf16 [S, H]
  7. weighted combine: y * routing weight, index_add into [M, H]

Scale layout: `_scaled_grouped_mm` on sm_90 takes FP32 row-wise scales only (the 2D x 3D case:
scale_a 1-D, one per row of mat_a; scale_b [groups, N], one per output channel of each group)
or MX block scales (e8m0, 1x32: sm_100). It does NOT take DeepSeek's 128x128 weight blocks or
1x128 activation groups, so this peer is FP8 *per-channel* W8A8 (per-token activations,
per-output-channel weights): the same scheme as `bench moe --quant fp8-channel`, not fp8-block.
Requirements checked by torch (aten GroupedBlas.cpp, torch/_meta_registrations.py, torch 2.11):
e4m3 operands, mat_a row-major, mat_b column-major, K and N multiples of 16 (every shape here:
2880 = 16 * 180), int32 contiguous offsets, bf16 output, no bias. The 2D x 3D case places no
alignment requirement on the group sizes (only the 2D x 2D backward case groups along K and needs
multiples of 16); `--align-m 16` pads every group to 16 rows all the same (the layout torchao's
MoE training uses), and `--align-m auto` (default) uses 1 unless the correctness check at the
check M fails, then 16, and records which it used.

Timing: as ../shared/peers/run_quant_peers.py: CUDA-graph replay (run_moe_baselines.graphify) of
one full call, rotating among 4 input sets, median of CUDA-event times (moe_common.time_fn);
floor = max(distinct experts x (FP8 codes + F32 per-channel scales) / measured copy bandwidth,
flops / measured FP8 GEMM rate), the same ceilings the vLLM FP8 peer uses (floor.measure,
run_quant_peers.measure_fp8_rate).

Correctness: at the check M (default 16) against (a) the fp32 reference with the dequantized
weights and the activation quantization emulated exactly (the bound: bf16 rounding only) and
(b) the fp32 reference with the dequantized weights and unquantized activations (what the
activation quantization costs); prints max |out - ref| / max |ref| and the norm-wise rel error.

JSON: the layout of run_quant_peers.py (env, floor, configs.<harness name>.modes.<MODE>.rows.<M>
with "SGMM-graph": {us, p10, p90, reps, pct_floor}), so fp8_peer_run.sh's table stage reads it
like the vLLM peer's; `--md` writes a markdown table. If the torch here lacks
`torch._scaled_grouped_mm` or it fails on the device, one line says so and the JSON records it
(`unavailable`); exit status 0.

    python3 tools/bench/torch_scaled_grouped_mm_peer.py --harness-dir .peer/harness \\
        --out sgmm.json --md sgmm.md [--configs mixtral,qwen3-30b-a3b,deepseek-v3-routed,\\
        gpt-oss-120b-bf16] [--ms 1,16,256,4096] [--check-ms 16] [--align-m auto|1|16] \\
        [--fast-accum] [--budget-s 400] [--target-ms 60] [--eager]
    python3 tools/bench/torch_scaled_grouped_mm_peer.py --dry-run      # arguments and plan only
    python3 tools/bench/torch_scaled_grouped_mm_peer.py --self-test    # CPU, emulated grouped mm
"""
import argparse
import json
import os
import sys
import time
import traceback

MODE = "fp8_channel_sgmm"
COL = "SGMM-graph"
DEFAULT_CONFIGS = "mixtral,qwen3-30b-a3b,deepseek-v3-routed,gpt-oss-120b-bf16"
NSETS = 4
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
CHECK_TOL = 0.05  # rel error vs the emulated reference above which the layout is called wrong


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--harness-dir", default=".peer/harness",
                    help="folder with the peer harness (moe_common.py, floor.py, "
                         "run_moe_baselines.py, run_quant_peers.py)")
    ap.add_argument("--out", default="sgmm_peer.json")
    ap.add_argument("--md", default="", help="also write a markdown table here")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="harness shape names")
    ap.add_argument("--ms", default="1,16,256,4096")
    ap.add_argument("--check-ms", default="16", help="token counts checked against the reference")
    ap.add_argument("--align-m", default="auto", choices=["auto", "1", "16"],
                    help="pad every expert's group of rows to this many (auto: 1, or 16 if the "
                         "check fails with 1)")
    ap.add_argument("--fast-accum", action="store_true",
                    help="use_fast_accum=True (default False, torch's default)")
    ap.add_argument("--budget-s", type=float, default=400.0)
    ap.add_argument("--target-ms", type=float, default=60.0)
    ap.add_argument("--eager", action="store_true", help="also time the un-graphed call (SGMM)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no torch)")
    ap.add_argument("--self-test", action="store_true",
                    help="CPU check of the permutation / padding / combine with an emulated "
                         "grouped mm (test path only; no GPU, no harness timing)")
    args = ap.parse_args(argv)
    try:
        args.ms_list = [int(m) for m in args.ms.split(",") if m]
        args.check_list = [int(m) for m in args.check_ms.split(",") if m]
    except ValueError:
        ap.error(f"--ms / --check-ms: expected comma-separated integers, got '{args.ms}' / "
                 f"'{args.check_ms}'")
    if not args.ms_list or min(args.ms_list) < 1:
        ap.error(f"--ms: expected positive token counts, got '{args.ms}'")
    args.config_list = [c for c in args.configs.split(",") if c]
    return args


# ---- the peer: FP8 per-channel MoE forward on torch._scaled_grouped_mm ------------------------
def quantize_rows(x):
    """Dynamic e4m3 quantization, one scale per row: (codes [R, K] e4m3, scales [R] fp32)."""
    import torch
    xf = x.float()
    s = xf.abs().amax(dim=-1).clamp_min(1e-10) / FP8_MAX
    q = (xf / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, s


class ChannelFp8Weights:
    """Expert weights as e4m3 codes with one fp32 scale per output channel, in the layout
    `_scaled_grouped_mm` wants: codes stored [E, N, K] contiguous and handed over as the
    column-major view [E, K, N]; scales [E, N]. Indexing [e] gives the dequantized fp32 matrix
    [N, K] of expert e (for the references)."""

    def __init__(self, w, chunk_bytes=1 << 31):
        import torch
        E, N, K = w.shape
        self.codes = torch.empty((E, N, K), device=w.device, dtype=torch.float8_e4m3fn)
        self.scale = torch.empty((E, N), device=w.device, dtype=torch.float32)
        step = max(1, chunk_bytes // (N * K * 4))  # bounds the fp32 temporary
        for e0 in range(0, E, step):
            wf = w[e0:e0 + step].float()
            s = wf.abs().amax(dim=-1).clamp_min(1e-10) / FP8_MAX
            self.codes[e0:e0 + step] = (wf / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(
                torch.float8_e4m3fn)
            self.scale[e0:e0 + step] = s
            del wf, s
        self.mat_b = self.codes.transpose(1, 2)  # [E, K, N], column-major, no copy

    @property
    def shape(self):
        return self.codes.shape

    def __getitem__(self, e):
        return self.codes[e].float() * self.scale[e].unsqueeze(-1)

    def nbytes(self):
        return self.codes.numel() + 4 * self.scale.numel()


def permute_by_expert(ti, E, align):
    """(token, slot) pairs in expert-contiguous order, without a host sync.
    Returns order [S] (flat pair index per sorted position), offs [E] int32 group ends of the
    (padded) layout, dest [S] (row of each sorted pair in that layout) and the number of rows R of
    the layout (static: S, or S + E * (align - 1) with padding)."""
    import torch
    flat = ti.reshape(-1)
    S = flat.numel()
    _, order = torch.sort(flat, stable=True)
    counts = torch.zeros(E, dtype=torch.int64, device=ti.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # bincount would sync
    if align == 1:
        return order, torch.cumsum(counts, 0).to(torch.int32), None, S
    padded = (counts + (align - 1)) // align * align
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    sorted_ids = flat[order]
    first = torch.cumsum(counts, 0) - counts  # first sorted position of each expert
    rank = torch.arange(S, device=ti.device) - first[sorted_ids]
    dest = starts[sorted_ids] + rank
    return order, ends.to(torch.int32), dest, S + E * (align - 1)


def moe_fp8_sgmm(x, logits, k, w13, w2, route, align=1, fast_accum=False, gmm=None):
    """The timed call: route, quantize, permute, two FP8 grouped GEMMs, silu*mul, combine.
    gmm: the grouped mm (torch._scaled_grouped_mm; the self-test passes an emulation)."""
    import torch
    import torch.nn.functional as F
    if gmm is None:
        gmm = torch._scaled_grouped_mm
    M, H = x.shape
    E = w13.codes.shape[0]
    I = w2.codes.shape[2]
    tw, ti = route(logits, k)
    order, offs, dest, R = permute_by_expert(ti, E, align)
    tok = order // k
    xq, xs = quantize_rows(x)  # M rows, then gathered: the same codes as quantizing S rows
    a = xq.view(torch.uint8).index_select(0, tok)
    sa = xs.index_select(0, tok)
    if dest is not None:
        # rows between groups stay zero codes with scale 0: their outputs are never read
        a = torch.zeros((R, H), dtype=torch.uint8, device=x.device).index_copy_(0, dest, a)
        sa = torch.zeros((R,), dtype=torch.float32, device=x.device).index_copy_(0, dest, sa)
    h = gmm(a.view(torch.float8_e4m3fn), w13.mat_b, sa, w13.scale, offs=offs,
            out_dtype=torch.bfloat16, use_fast_accum=fast_accum)  # [R, 2I]
    act = F.silu(h[:, :I]) * h[:, I:]
    aq, asc = quantize_rows(act)
    y = gmm(aq, w2.mat_b, asc, w2.scale, offs=offs, out_dtype=torch.bfloat16,
            use_fast_accum=fast_accum)  # [R, H]
    if dest is not None:
        y = y.index_select(0, dest)
    y = y * tw.reshape(-1)[order].to(y.dtype).unsqueeze(-1)
    return torch.zeros_like(x).index_add_(0, tok, y)


def emulated_scaled_grouped_mm(a, b, sa, sb, offs=None, out_dtype=None, use_fast_accum=False):
    """Test path only: what _scaled_grouped_mm computes in the 2D x 3D case, one group at a time
    in fp32 (rows past offs[-1] stay zero)."""
    import torch
    out = torch.zeros((a.shape[0], b.shape[2]), dtype=torch.float32, device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = (a[start:end].float() * sa[start:end, None]) @ (
                b[g].float() * sb[g][None, :])
        start = end
    return out.to(out_dtype or torch.bfloat16)


# ---- references ---------------------------------------------------------------------------------
def reference_row_act(x, w13, w2, tw, ti):
    """fp32 reference with the dequantized weights and the activation quantization emulated
    exactly as the peer does it: x per token; gate/up rounded to bf16 (the grouped mm's output),
    silu(g) * u in bf16, then quantized per row before the second GEMM."""
    import torch
    import torch.nn.functional as F
    M, H = x.shape
    I = w2.codes.shape[2]
    out = torch.zeros((M, H), device=x.device, dtype=torch.float32)
    xq, xs = quantize_rows(x)
    xd = xq.float() * xs.unsqueeze(-1)
    for e in torch.unique(ti).tolist():
        tok, pos = torch.where(ti == e)
        gu = (xd[tok] @ w13[e].t()).to(torch.bfloat16)
        h = F.silu(gu[:, :I]) * gu[:, I:]
        hq, hs = quantize_rows(h)
        y = (hq.float() * hs.unsqueeze(-1)) @ w2[e].t()
        out.index_add_(0, tok, y * tw[tok, pos, None].float())
    return out


def errors(out, ref):
    import torch
    out = out.float()
    if not torch.isfinite(out).all():
        return float("nan"), float("nan")
    d = out - ref
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


# ---- floor --------------------------------------------------------------------------------------
def floor_channel(M, H, I, E, k, bw, peak_fp8, expected_distinct_experts):
    """run_quant_peers.floor_q for FP8 per-channel weights: distinct experts x (codes + fp32
    per-output-channel scales) + bf16 x in / out + fp32 logits, against the FP8 GEMM rate."""
    D = expected_distinct_experts(M, E, k)
    wb, sb = 3 * H * I, 4 * (2 * I + H)
    bytes_w = D * (wb + sb)
    bytes_act = M * H * 2 * 2 + M * E * 4
    flops = 2.0 * M * k * 3 * H * I
    t_mem, t_cmp = (bytes_w + bytes_act) / bw, flops / peak_fp8
    return max(t_mem, t_cmp) * 1e6, dict(D=D, bytes=bytes_w + bytes_act, weight_bytes=D * wb,
                                          scale_bytes=D * sb, flops=flops, peak_flops=peak_fp8,
                                          t_mem_us=t_mem * 1e6, t_cmp_us=t_cmp * 1e6)


# ---- markdown -----------------------------------------------------------------------------------
def markdown(res):
    lines = []
    fl = res.get("floor") or {}
    if res.get("unavailable"):
        return f"torch._scaled_grouped_mm peer: {res['unavailable']}\n"
    lines.append(f"torch._scaled_grouped_mm FP8 **per-channel** W8A8 (per-token activation scales, "
                 f"per-output-channel weight scales; `_scaled_grouped_mm` takes no 128x128 "
                 f"blocks), CUDA-graph replay, torch {res['env'].get('torch')}, "
                 f"{res['env'].get('device')}; use_fast_accum={res.get('fast_accum')}.")
    if fl:
        lines.append(f"Ceilings: copy {fl['copy_bytes_per_s']/1e12:.3f} TB/s, FP8 GEMM "
                     f"{fl['fp8_peak_flops_per_s']/1e12:.0f} TFLOP/s.")
    lines.append("")
    lines.append("| shape | M | D | floor us (bound) | torch sgmm FP8 graph us (% floor) | "
                 "rel err (emulated / vs dequant) | align |")
    lines.append("|---|---|---|---|---|---|---|")
    for cname, cr in res.get("configs", {}).items():
        mrec = cr.get("modes", {}).get(MODE, {})
        if mrec.get("skipped") or mrec.get("error"):
            lines.append(f"| {cname} | - | - | - | {mrec.get('skipped') or mrec.get('error')} | - | - |")
            continue
        for M, row in mrec.get("rows", {}).items():
            if "floor_us" not in row:
                lines.append(f"| {cname} | {M} | - | - | {row.get('skipped') or row.get('error')} "
                             f"| - | - |")
                continue
            d = row["floor_detail"]
            bound = "mem" if d["t_mem_us"] >= d["t_cmp_us"] else "cmp"
            g = row.get(COL, {})
            cell = (f"{g['us']:,.1f} ({g['pct_floor']:.0f}%)" if "us" in g
                    else row.get("error") or g.get("error") or "-")
            err = (f"{row['rel_err']:.1e} / {row['rel_err_vs_dequant']:.1e}"
                   if "rel_err" in row else "-")
            lines.append(f"| {cname} | {M} | {d['D']:.1f} | {row['floor_us']:,.1f} ({bound}) | "
                         f"{cell} | {err} | {mrec.get('align_m', '-')} |")
    return "\n".join(lines) + "\n"


# ---- driver -------------------------------------------------------------------------------------
def write(args, res):
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(res))


def unavailable(args, res, why):
    print(f"torch._scaled_grouped_mm peer: {why}; no measurement", flush=True)
    res["unavailable"] = why
    write(args, res)
    return 0


def probe(torch):
    """One tiny grouped call against the emulation: None if it works, else why not."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((48, 64), device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn((3, 32, 64), device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand((48,), device="cuda", generator=g) + 0.5
    sb = torch.rand((3, 32), device="cuda", generator=g) + 0.5
    offs = torch.tensor([16, 16, 41], device="cuda", dtype=torch.int32)  # an empty, an odd group
    try:
        out = torch._scaled_grouped_mm(a, b.transpose(1, 2), sa, sb, offs=offs,
                                       out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
    except Exception as ex:  # noqa: BLE001
        return f"fails on this device: {repr(ex)[:300]}"
    ref = emulated_scaled_grouped_mm(a, b.transpose(1, 2), sa, sb, offs=offs)
    e = ((out[:41].float() - ref[:41].float()).norm() / ref[:41].float().norm()).item()
    if not e < 1e-2:
        return f"gives wrong numbers on this device (rel err {e:.2e} on a 3-group probe)"
    return None


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        print(f"plan: configs {args.config_list}, M {args.ms_list}, check M {args.check_list}, "
              f"align-m {args.align_m}, fast-accum {args.fast_accum}, harness "
              f"{os.path.abspath(args.harness_dir)} "
              f"({'present' if os.path.isfile(os.path.join(args.harness_dir, 'moe_common.py')) else 'MISSING'}), "
              f"out {args.out}" + (f", md {args.md}" if args.md else ""))
        return 0
    if args.self_test:
        return self_test()
    res = dict(env={}, mode=MODE, fast_accum=args.fast_accum, floor=None, configs={}, notes=[
        "FP8 per-channel W8A8: per-token activation scales, per-output-channel weight scales "
        "(torch._scaled_grouped_mm has no 128x128 block scales); compare with bench moe "
        "--quant fp8-channel"])
    try:
        import torch
    except Exception as ex:  # noqa: BLE001
        return unavailable(args, res, f"torch is not importable ({ex!r})")
    res["env"] = dict(torch=torch.__version__, cuda=torch.version.cuda,
                      has_scaled_grouped_mm=hasattr(torch, "_scaled_grouped_mm"))
    if not hasattr(torch, "_scaled_grouped_mm"):
        return unavailable(args, res, f"torch {torch.__version__} has no torch._scaled_grouped_mm")
    if not torch.cuda.is_available():
        return unavailable(args, res, "no CUDA device")
    cap = torch.cuda.get_device_capability(0)
    res["env"].update(device=torch.cuda.get_device_name(0), capability=f"{cap[0]}.{cap[1]}")
    why = probe(torch)
    if why:
        return unavailable(args, res, f"torch {torch.__version__}: torch._scaled_grouped_mm {why}")

    sys.path.insert(0, os.path.abspath(args.harness_dir))
    import floor as floor_mod
    from moe_common import CONFIGS, expected_distinct_experts, make_inputs, make_weights, \
        reference, route, time_fn
    from run_moe_baselines import env_info, graphify
    from run_quant_peers import measure_fp8_rate

    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    res["env"].update(env_info())
    print(json.dumps(res["env"]), flush=True)
    fl = floor_mod.measure()
    fl.update(measure_fp8_rate())
    res["floor"] = fl
    BW, PEAK8 = fl["copy_bytes_per_s"], fl["fp8_peak_flops_per_s"]
    print(f"floor: copy {BW/1e12:.3f} TB/s, fp8 mm {PEAK8/1e12:.1f} TFLOP/s", flush=True)
    for cname in args.config_list:
        if cname not in CONFIGS:
            res["configs"][cname] = dict(modes={MODE: dict(skipped=f"unknown config (known: "
                                                                   f"{', '.join(CONFIGS)})")})
            print(f"== {cname}: unknown config", flush=True)
            continue
        c = CONFIGS[cname]
        H, I, E, k = c["H"], c["I"], c["E"], c["k"]
        mrec = dict(rows={})
        res["configs"][cname] = dict(shape=c, modes={MODE: mrec})
        if time.time() - t_start > args.budget_s:
            mrec["skipped"] = "time budget"
            print(f"== {cname}: skipped (time budget)", flush=True)
            write(args, res)
            continue
        if H % 16 or I % 16:
            mrec["skipped"] = f"_scaled_grouped_mm needs K and N multiples of 16 (H={H}, I={I})"
            continue
        torch.cuda.empty_cache()
        t0 = time.time()
        w13b, w2b = make_weights(H, I, E)
        w13, w2 = ChannelFp8Weights(w13b), ChannelFp8Weights(w2b)
        torch.cuda.synchronize()
        mrec.update(weight_and_scale_bytes=w13.nbytes() + w2.nbytes(), quantize_s=time.time() - t0)
        print(f"== {cname} {c} weights+scales {mrec['weight_and_scale_bytes']/1e9:.2f} GB "
              f"(quantized in {mrec['quantize_s']:.1f}s)", flush=True)
        del w13b, w2b  # the references use the dequantized codes (ChannelFp8Weights[e])
        torch.cuda.empty_cache()
        # The correctness check comes first, at the check M, so that with --align-m auto every
        # timed M uses the layout the check settled on.
        align = 16 if args.align_m == "16" else 1
        checks = {}
        for M in args.check_list:
            sets = make_inputs(M, H, E, NSETS)
            x0 = sets[0][0]
            tw, ti = route(sets[0][1], k)
            chk = dict(M=M)
            try:
                ref = reference_row_act(x0, w13, w2, tw, ti)
                ref_dq = reference(x0, w13, w2, tw, ti)
                out, e, emax = None, float("nan"), float("nan")
                for al in [align] if args.align_m != "auto" else [1, 16]:
                    try:
                        out = moe_fp8_sgmm(x0, sets[0][1], k, w13, w2, route, align=al,
                                           fast_accum=args.fast_accum)
                        torch.cuda.synchronize()
                        e, emax = errors(out, ref)
                    except Exception as ex:  # noqa: BLE001
                        out, e, emax = None, float("nan"), float("nan")
                        chk.setdefault("check_failures", []).append(
                            dict(align_m=al, error=repr(ex)[:300]))
                        traceback.print_exc(limit=3)
                        torch.cuda.synchronize()
                        continue
                    if e < CHECK_TOL:
                        align = al
                        break
                    chk.setdefault("check_failures", []).append(
                        dict(align_m=al, rel_err=e, max_rel_err=emax))
                chk["rel_err"], chk["max_rel_err"] = e, emax
                chk["rel_err_vs_dequant"], chk["max_rel_err_vs_dequant"] = (
                    errors(out, ref_dq) if out is not None else (float("nan"), float("nan")))
                print(f"{cname} M={M} check (align {align}): max rel err {emax:.2e} "
                      f"(norm {e:.2e}) vs the fp32 reference with the FP8 activation "
                      f"quantization emulated, {chk['max_rel_err_vs_dequant']:.2e} (norm "
                      f"{chk['rel_err_vs_dequant']:.2e}) vs the fp32 reference on the dequantized "
                      f"weights without it", flush=True)
                if out is None:
                    chk["error"] = f"raised: {chk['check_failures'][-1]['error']}"
                elif not e < CHECK_TOL:
                    chk["error"] = f"wrong numbers: rel err {e:.2e} (bound {CHECK_TOL})"
                del ref, ref_dq, out
            except Exception as ex:  # noqa: BLE001
                chk["error"] = repr(ex)[:400]
                traceback.print_exc(limit=3)
            checks[M] = chk
            del sets
        mrec["align_m"] = align
        mrec["checks"] = {str(M): c for M, c in checks.items()}
        failed = [c["error"] for c in checks.values() if "error" in c]
        if failed:
            mrec["error"] = f"correctness check failed: {failed[0]}"
            print(f"== {cname}: {mrec['error']}; not timed", flush=True)
            write(args, res)
            del w13, w2
            torch.cuda.empty_cache()
            continue
        for M in args.ms_list:
            if time.time() - t_start > args.budget_s:
                mrec["rows"][M] = dict(skipped="time budget")
                print(f"{cname} M={M}: skipped (time budget)", flush=True)
                continue
            row = dict(M=M)
            row.update({kk: v for kk, v in checks.get(M, {}).items() if kk != "M"})
            fl_us, fl_detail = floor_channel(M, H, I, E, k, BW, PEAK8, expected_distinct_experts)
            row["floor_us"], row["floor_detail"] = fl_us, fl_detail
            sets = make_inputs(M, H, E, NSETS)

            def call(i):
                return moe_fp8_sgmm(sets[i][0], sets[i][1], k, w13, w2, route, align=align,
                                    fast_accum=args.fast_accum)
            try:
                out = call(0)
                torch.cuda.synchronize()
                if not torch.isfinite(out).all():
                    row["error"] = "non-finite output"
                del out
            except Exception as ex:  # noqa: BLE001
                row["error"] = repr(ex)[:400]
                traceback.print_exc(limit=3)
            row["align_m"] = align
            if "error" in row:
                print(f"{cname} M={M}: {row['error']}", flush=True)
                mrec["rows"][M] = row
                write(args, res)
                continue
            peers = {}
            if args.eager:
                peers["SGMM"] = call
            try:
                peers[COL] = graphify(call, NSETS)
            except Exception as ex:  # noqa: BLE001
                row[COL] = dict(error=repr(ex)[:300])
            for name, fn in peers.items():
                try:
                    med, p10, p90, reps = time_fn(fn, NSETS, target_ms=args.target_ms)
                    row[name] = dict(us=med, p10=p10, p90=p90, reps=reps,
                                     pct_floor=100.0 * fl_us / med)
                except Exception as ex:  # noqa: BLE001
                    row[name] = dict(error=repr(ex)[:400])
                    traceback.print_exc(limit=2)
                    torch.cuda.synchronize()
            mrec["rows"][M] = row
            parts = [f"{n}={row[n]['us']:.1f}us({row[n]['pct_floor']:.0f}%)" if "us" in row.get(n, {})
                     else f"{n}=ERR" for n in list(peers) + ([COL] if COL not in peers else [])]
            print(f"{cname} M={M} floor={fl_us:.1f}us (mem {fl_detail['t_mem_us']:.1f}, cmp "
                  f"{fl_detail['t_cmp_us']:.1f}) D={fl_detail['D']:.1f} " + " ".join(parts),
                  flush=True)
            del sets, peers
            torch.cuda.empty_cache()
            write(args, res)
        del w13, w2
        torch.cuda.empty_cache()
    res["elapsed_s"] = time.time() - t_start
    write(args, res)
    if args.md:
        print(markdown(res))
    print(f"done in {res['elapsed_s']:.0f}s", flush=True)
    return 0


def self_test():
    """CPU, tiny shapes: the permutation (with and without padding), the requantization and the
    combine through the emulated grouped mm, against the per-expert reference; the errors against
    the emulated reference must be at bf16-rounding level, against unquantized activations at
    e4m3 level. Routing and references as the harness does them (written here so the test needs
    no harness)."""
    import torch

    def route(logits, k):
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        w, idx = torch.topk(probs, k, dim=-1)
        return w / w.sum(dim=-1, keepdim=True), idx

    def reference_dq(x, w13, w2, tw, ti):
        I = w2.codes.shape[2]
        out = torch.zeros(x.shape, dtype=torch.float32)
        for e in torch.unique(ti).tolist():
            tok, pos = torch.where(ti == e)
            gu = x[tok].float() @ w13[e].t()
            y = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]) @ w2[e].t()
            out.index_add_(0, tok, y * tw[tok, pos, None])
        return out

    torch.manual_seed(0)
    ok = True
    for (M, H, I, E, k) in [(1, 64, 32, 4, 2), (16, 64, 48, 8, 3), (37, 32, 32, 5, 2),
                            (64, 128, 64, 16, 4)]:
        w13 = ChannelFp8Weights((torch.randn(E, 2 * I, H) / H ** 0.5).to(torch.bfloat16))
        w2 = ChannelFp8Weights((torch.randn(E, H, I) / I ** 0.5).to(torch.bfloat16))
        x = torch.randn(M, H).to(torch.bfloat16)
        logits = torch.randn(M, E)
        tw, ti = route(logits, k)
        ref = reference_row_act(x, w13, w2, tw, ti)
        ref_dq = reference_dq(x, w13, w2, tw, ti)
        for align in (1, 16):
            out = moe_fp8_sgmm(x, logits, k, w13, w2, route, align=align,
                               gmm=emulated_scaled_grouped_mm)
            e, emax = errors(out, ref)
            edq, edq_max = errors(out, ref_dq)
            good = e < 1e-2 and edq < 0.1
            ok &= good
            print(f"M={M:3d} H={H:3d} I={I:3d} E={E:2d} k={k} align={align:2d}: max rel err "
                  f"{emax:.2e} (norm {e:.2e}) vs emulated, {edq_max:.2e} (norm {edq:.2e}) vs "
                  f"dequantized {'ok' if good else 'FAIL'}")
        # the padded layout: every group starts on a multiple of 16, the pairs land where offs say
        order, offs, dest, R = permute_by_expert(ti, E, 16)
        flat = ti.reshape(-1)[order]
        ends = offs.long()
        starts = torch.cat([ends.new_zeros(1), ends[:-1]])
        layout_ok = bool((starts % 16 == 0).all() and ends[-1] <= R and
                         (dest >= starts[flat]).all() and (dest < ends[flat]).all() and
                         dest.unique().numel() == dest.numel())
        ok &= layout_ok
        if not layout_ok:
            print(f"M={M}: padded layout wrong: offs {offs.tolist()} dest {dest.tolist()}")
    print("self-test " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
