"""flashgate against its peers on every row of bench/rows.txt, in one process, on one GPU.

    python bench/run.py --out OUTDIR [--fla PATH] [--vllm PATH] [--rows TEXT|TEXT...] [--peers LIST]
                        [--flashgate-no-grad]

Writes OUTDIR/results.json (raw), OUTDIR/report.md (tables of TFLOP/s, GB/s and flashgate/peer ratios),
OUTDIR/*.png (plots). A contender that cannot run a case is reported with its error, never as a ratio; a
contender whose output misses the fp32 reference (relative RMS > 0.02 on a slice of heads) is reported as
"wrong" and not timed.
"""
import argparse
import math
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402
import peers  # noqa: E402
import reference  # noqa: E402
import report  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS, TRAINING_ROWS  # noqa: E402

GATE_TOL = 0.02  # correctness gate before timing (bf16 outputs against fp32)


def log(*a):
    print(*a, flush=True)


def wanted_row(args, name):
    """--rows: '|'-separated texts; a row runs when its name contains one of them (all rows without --rows)."""
    return not args.rows or any(text in name for text in args.rows.split("|"))


def short(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e) else type(e).__name__


# ---------------------------------------------------------------------------------------------- training

def training_inputs(row):
    dev, dt = "cuda", torch.bfloat16
    B = 1 if row.packed else row.B
    t = {"q": torch.randn(B, row.T, row.HQ, row.K, device=dev, dtype=dt, requires_grad=True),
         "k": torch.randn(B, row.T, row.H, row.K, device=dev, dtype=dt, requires_grad=True),
         "v": torch.randn(B, row.T, row.H, row.V, device=dev, dtype=dt, requires_grad=True)}
    t["do"] = torch.randn(B, row.T, row.HQ, row.V, device=dev, dtype=dt)
    if row.gate:
        t["g"] = torch.nn.functional.logsigmoid(torch.randn(B, row.T, row.HQ, device=dev)).requires_grad_()
        t["gc_bht"] = t["g"].detach().cumsum(1).transpose(1, 2).contiguous()
    if row.sink:
        t["sink"] = torch.randn(row.HQ, device=dev, requires_grad=True)
    if row.packed:
        cu = [0]
        for L in row.packed:
            cu.append(cu[-1] + L)
        t["cu_seqlens"] = torch.tensor(cu, device=dev, dtype=torch.int32)
        t["cu_seqlens_long"] = t["cu_seqlens"].long()
    return t


def time_training(fwd, t, skip_backward, rep_ms):
    """fwd / bwd / fwd+bwd median ms of one contender (autograd for the backward, as users run it)."""
    res = {"fwd_ms": measure.median_ms(lambda: fwd(), rep_ms=rep_ms)}
    if skip_backward or getattr(fwd, "forward_only", False):
        return res
    grads = [x for x in (t["q"], t["k"], t["v"], t.get("g"), t.get("sink")) if x is not None]
    o = fwd()
    # allow_unused: a peer may not differentiate every input (flex takes the gate as a constant score_mod).
    try:
        res["bwd_ms"] = measure.median_ms(
            lambda: torch.autograd.grad(o, grads, t["do"], retain_graph=True, allow_unused=True), rep_ms=rep_ms)
        res["fwdbwd_ms"] = measure.median_ms(
            lambda: torch.autograd.grad(fwd(), grads, t["do"], allow_unused=True), rep_ms=rep_ms)
    except NotImplementedError as e:  # a contender (a backend in development) with a forward but no backward
        res["bwd_status"] = f"cannot run: {short(e)}"
    return res


# Each row's contenders are timed in rounds, the order rotated each round, and each figure is the median of its
# rounds: the GPU's clock under its power cap drifts with what ran just before (the fp32 reference, the previous
# contender), and no contender should always be the one timed first.
ROUNDS = 3
ROUND_MS = 40


def run_training(args, contenders, results):
    """Appends one entry per row to `results` (so an interrupted run keeps the rows it finished)."""
    for row in TRAINING_ROWS:
        if not wanted_row(args, row.name):
            continue
        log(f"[training] {row.name}")
        entry = {"row": row.name, "fwd_flops": row.fwd_flops(), "contenders": {}}
        try:
            t = training_inputs(row)
            ref = reference.attention_slice(row, t)
        except Exception as e:  # noqa: BLE001
            entry["error"] = short(e)
            results.append(entry)
            continue
        timed = {}
        for name, build in contenders.items():
            c = entry["contenders"][name] = {}
            try:
                fwd = build(row, t)
                with torch.no_grad():
                    out = fwd()
                err = measure.relative_rms(out[0, :, :2].float(), ref)
                c["check_rel_rms"] = err
                if not err <= GATE_TOL:
                    c["status"] = f"wrong: relative RMS {err:.3g} against the fp32 reference"
                else:
                    timed[name] = fwd
            except peers.CannotRun as e:
                c["status"] = f"cannot run: {e}"
            except Exception as e:  # noqa: BLE001
                c["status"] = f"cannot run: {short(e)}"
        names = list(timed)
        for r in range(ROUNDS if names else 0):
            for name in names[r % len(names):] + names[:r % len(names)]:
                c = entry["contenders"][name]
                if c.get("status", "ok") != "ok":
                    continue
                try:
                    c.setdefault("rounds", []).append(time_training(timed[name], t, args.skip_backward, ROUND_MS))
                    c["status"] = "ok"
                except Exception as e:  # noqa: BLE001
                    c["status"] = f"cannot run: {short(e)}"
        for name, c in entry["contenders"].items():
            if c.get("status") == "ok":
                c.update(combine_rounds(c["rounds"], row))
            log(f"    {name:10s} {c.get('status')} "
                f"{c.get('fwd_tflops', 0):7.1f} / {c.get('bwd_tflops', 0):7.1f} TFLOP/s")
        del t
        torch.cuda.empty_cache()
        results.append(entry)


def combine_rounds(rounds, row):
    """Each time's median over the rounds, and the TFLOP/s of those medians."""
    res = {}
    for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms"):
        times = sorted(r[key] for r in rounds if key in r)
        if times:
            res[key] = times[len(times) // 2]
    if any("bwd_status" in r for r in rounds):
        res["bwd_status"] = next(r["bwd_status"] for r in rounds if "bwd_status" in r)
    res["fwd_tflops"] = row.fwd_flops() / (res["fwd_ms"] * 1e-3) / 1e12
    if "bwd_ms" in res:
        res["bwd_tflops"] = 2.5 * row.fwd_flops() / (res["bwd_ms"] * 1e-3) / 1e12
        res["fwdbwd_tflops"] = 3.5 * row.fwd_flops() / (res["fwdbwd_ms"] * 1e-3) / 1e12
    return res


# ----------------------------------------------------------------------------------------------- serving

def serving_inputs(row, fp8):
    """A shuffled paged cache (and its contiguous twin for the contiguous-KV peers), bf16 or fp8."""
    dev = "cuda"
    N, L, BS, H, HQ, D = row.batch, row.context, row.block_size, row.H, row.HQ, row.D
    k = torch.randn(N, L, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(N, L, H, D, device=dev, dtype=torch.bfloat16)
    blocks = (L + BS - 1) // BS
    perm = torch.randperm(N * blocks, device=dev, dtype=torch.int32)
    t = {"q": torch.randn(N * row.q_len, HQ, D, device=dev, dtype=torch.bfloat16),
         "block_table": perm.view(N, blocks).contiguous(),
         "seq_lens_k": torch.full((N,), L, device=dev, dtype=torch.int32),
         "cu_seqlens_q": torch.arange(0, N * row.q_len + 1, row.q_len, device=dev, dtype=torch.int32)}
    pad = blocks * BS - L

    def paged(x):
        xp = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)).view(N * blocks, BS, H, x.shape[-1])
        out = torch.empty_like(xp)
        out[perm.long()] = xp
        return out
    if fp8 is None:
        t["k_cache"], t["v_cache"] = paged(k), paged(v)
        t["k_real"], t["v_real"] = k, v
    else:
        for name, x in (("k", k), ("v", v)):
            if fp8 == "per-tensor":
                s = x.float().abs().amax() / 448
                x8 = (x.float() / s).to(torch.float8_e4m3fn)
                t[f"{name}_scale"] = s.reshape(1)
                t[f"{name}_real"] = (x8.float() * s).to(torch.bfloat16)
            else:  # per token and head: scales [num_blocks, H, BS]
                s = x.float().abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448  # [N, L, H, 1]
                x8 = (x.float() / s).to(torch.float8_e4m3fn)
                t[f"{name}_real"] = (x8.float() * s).to(torch.bfloat16)
                sp = paged(s.expand(N, L, H, 1).contiguous())  # [NB, BS, H, 1]
                t[f"{name}_scale"] = sp[..., 0].transpose(1, 2).contiguous()
            t[f"{name}_cache"] = paged(x8.view(torch.uint8)).view(torch.float8_e4m3fn)
    # Contiguous twins for cuDNN / FA2 ([B, H, L, D], one query per sequence).
    t["q_bhld"] = t["q"].view(N, row.q_len, HQ, D)[:, -1:].transpose(1, 2).contiguous()
    t["k_bhld"] = t["k_real"].transpose(1, 2).contiguous()
    t["v_bhld"] = t["v_real"].transpose(1, 2).contiguous()
    return t


def flashgate_paged(row, t, fp8):
    import flashgate

    # max_seqlen_q as a serving engine passes it (vLLM's unified attention takes it too).
    def fwd():
        return flashgate.paged_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens_k"],
                                         t["cu_seqlens_q"], k_scale=t.get("k_scale"), v_scale=t.get("v_scale"),
                                         max_seqlen_q=row.q_len)
    return fwd


def flashgate_decode(row, t):
    import flashgate
    N, L, H, D = row.batch, row.context, row.H, row.D
    kp = t["k_real"].reshape(1, N * L, H, D)
    vp = t["v_real"].reshape(1, N * L, H, D)
    q = t["q"].view(1, N, row.HQ, D)
    cu = torch.arange(0, N * L + 1, L, device="cuda", dtype=torch.int32)

    def fwd():
        return flashgate.attn_decoding_one_step(q, kp, vp, cu_seqlens=cu)[0]
    return fwd


def run_serving(args):
    results = []
    cases = [("decode", r, None) for r in DECODE_ROWS] + \
            [("paged", r, m) for m in (None, "per-tensor", "per-token") for r in PAGED_ROWS]
    for op, row, fp8 in cases:
        label = f"{op} {'bf16' if fp8 is None else 'fp8 ' + fp8} {row.name}"
        if not wanted_row(args, label):
            continue
        log(f"[serving] {label}")
        entry = {"op": op, "kv": "bf16" if fp8 is None else f"fp8 {fp8}", "row": row.name,
                 "kv_bytes": row.kv_bytes(2 if fp8 is None else 1, fp8 == "per-token"),
                 "tokens": row.batch * row.context, "contenders": {}}
        try:
            t = serving_inputs(row, fp8)
            ref = reference.decode_slice(t["q"].view(row.batch, row.q_len, row.HQ, row.D)[:, -1],
                                         t["k_real"], t["v_real"], row.HQ, row.H)
        except Exception as e:  # noqa: BLE001
            entry["error"] = short(e)
            results.append(entry)
            continue
        contenders = {"flashgate": (lambda r, tt: flashgate_decode(r, tt)) if op == "decode"
                      else (lambda r, tt: flashgate_paged(r, tt, fp8))}
        if fp8 is None and row.q_len == 1:
            contenders["cuDNN (contiguous)"] = peers.sdpa_decode("CUDNN_ATTENTION")
            contenders["FA2 (contiguous)"] = peers.sdpa_decode("FLASH_ATTENTION")
        if op == "decode" and args.fla:
            contenders["FLA decode"] = peers.fla_decode(args.fla)
        if op == "paged" and args.vllm:
            contenders["vLLM paged"] = lambda r, tt: peers.vllm_paged(args.vllm)(r, tt, fp8)
        for name, build in contenders.items():
            c = {}
            try:
                fwd = build(row, t)
                out = fwd()
                last = out.view(row.batch, row.q_len, row.HQ, row.D)[0, -1] if out.dim() == 3 and \
                    out.shape[0] == row.batch * row.q_len else out[0].reshape(row.HQ, row.D)
                err = measure.relative_rms(last.float(), ref)
                c["check_rel_rms"] = err
                if not err <= GATE_TOL:
                    c["status"] = f"wrong: relative RMS {err:.3g} against the fp32 reference"
                else:
                    replay = measure.graph_replay(fwd)
                    c["ms"] = measure.median_ms(replay)  # after do_bench's L2 flush (the figures of record)
                    c["gbps"] = entry["kv_bytes"] / (c["ms"] * 1e-3) / 1e9
                    c["tokens_per_s"] = entry["tokens"] / (c["ms"] * 1e-3)
                    c["ms_back_to_back"] = measure.back_to_back_ms(replay)
                    c["gbps_back_to_back"] = entry["kv_bytes"] / (c["ms_back_to_back"] * 1e-3) / 1e9
                    c["tokens_per_s_back_to_back"] = entry["tokens"] / (c["ms_back_to_back"] * 1e-3)
                    c["status"] = "ok"
            except peers.CannotRun as e:
                c["status"] = f"cannot run: {e}"
            except Exception as e:  # noqa: BLE001
                c["status"] = f"cannot run: {short(e)}"
            entry["contenders"][name] = c
            log(f"    {name:20s} {c.get('status')} {c.get('gbps', 0):8.0f} GB/s {c.get('ms', 0):8.3f} ms; "
                f"back to back {c.get('gbps_back_to_back', 0):8.0f} GB/s")
        del t
        torch.cuda.empty_cache()
        results.append(entry)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fla", default="", help="path of a flash-linear-attention checkout (optional)")
    ap.add_argument("--vllm", default="", help="path of a vLLM checkout (optional)")
    ap.add_argument("--fa4", default="", help="directory flash-attn-4 is installed in (pip --target; optional)")
    ap.add_argument("--rows", default="", help="only rows whose name contains one of these '|'-separated texts")
    ap.add_argument("--peers", default="cuDNN,FA2,flex,FLA",
                    help="training peers to run beside flashgate (FLA needs --fla; flex compiles take time)")
    ap.add_argument("--skip-backward", action="store_true")
    ap.add_argument("--flashgate-backends", default="",
                    help="flashgate forced onto these backends too, as extra contenders (e.g. hopper)")
    ap.add_argument("--flashgate-no-grad", action="store_true",
                    help="also flashgate's forward with no backward to follow (no residual kept), forward only")
    ap.add_argument("--only", choices=["training", "serving"], default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    torch.manual_seed(0)

    out = {"env": measure.environment(sys.argv), "ceilings": measure.ceilings()}
    # Peers that need a checkout path the command did not give: named in the report, not silently absent.
    out["peers_not_given"] = [f"{name} (no {flag} PATH)" for name, flag, path in
                              (("FLA Triton / FLA decode", "--fla", args.fla), ("vLLM paged", "--vllm", args.vllm),
                               ("FA4", "--fa4", args.fa4))
                              if not path]
    log(f"env: {out['env']}\nceilings: {out['ceilings']}")
    contenders = {"flashgate": peers.flashgate_training}
    for backend in filter(None, args.flashgate_backends.split(",")):
        contenders[f"flashgate {backend}"] = peers.flashgate_backend_training(backend)
    if args.flashgate_no_grad:
        contenders["flashgate no grad"] = peers.flashgate_no_grad
    wanted = set(args.peers.split(","))
    contenders.update({n: b for n, b in peers.TRAINING_PEERS.items() if n in wanted})
    if args.fla and "FLA" in wanted:
        contenders["FLA Triton"] = peers.fla_training(args.fla)
    if args.fa4:
        contenders["FA4"] = peers.fa4_training(args.fa4)
    try:
        if args.only != "serving":
            out["training"] = []
            run_training(args, contenders, out["training"])
        if args.only != "training":
            out["serving"] = run_serving(args)
    except BaseException:  # noqa: BLE001 - keep what was measured (also on SIGINT from a time limit)
        out["fatal"] = traceback.format_exc()
        log(out["fatal"])
    out["seconds"] = time.time() - started
    measure.dump_json(os.path.join(args.out, "results.json"), out)
    report.write(out, args.out)
    log(f"done in {out['seconds']:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
