"""Context parallelism's strong scaling: forward + backward of one causal sequence split over the ranks of a
torch.distributed group, flashgate.distributed.context_parallel_attn beside torch's context_parallel over SDPA.

    torchrun --nproc_per_node=N bench/cp_scaling.py --out OUT [--tokens 65536,131072,262144,524288]
        [--rows plain,gate+sink] [--modes allgather] [--reps 5] [--no-torch] [--device cuda|cpu] [--link-mib 256]
    python3 bench/cp_scaling.py --report OUT

Run it with N = 1 and N = 2 (or more) into the same OUT; each run's rank 0 writes OUT/cp_<N>.json, and --report
writes OUT/report.md (throughput, the N-GPU / 1-GPU ratio of each row beside the model's, flashgate / torch at the
same N) and OUT/scaling.png where matplotlib is present. Every rank builds the same whole-sequence inputs (GQA 32/8
D128 bf16, one sequence), keeps its shard and times forward + backward: per repetition all ranks start together (a
barrier) and the slowest rank's time counts; the median over repetitions is reported. One rank runs the op itself (a
group of one is parallel_attn; torch: SDPA). torch's context_parallel takes MHA tensors ([B, heads, T, D]): K and V
are repeated to the query heads for it (its all-gather and ring then move 4x the bytes flashgate's GQA path does).
Rows it cannot run (a gate, a sink) or an error are recorded as such. --device cpu (gloo, small --tokens) checks the
script itself.

The model (docs/perf-notes.md, context parallelism) takes the one-rank time as compute that splits evenly over the
ranks and adds the all-gather mode's transfers, unhidden, at the all-gather bandwidth that a run of N > 1 measures on
its group before the rows (a gather that leaves --link-mib MiB of bf16 on every rank).
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import dump_json, environment, recorded_command  # noqa: E402
from rows import TrainingRow  # noqa: E402

ROWS = {"plain": {}, "gate+sink": {"gate": True, "sink": True}}


def transfer_bytes(tokens, row, world, heads, kv_heads, dim):
    """Bytes each rank receives in the all-gather mode's forward + backward (python/flashgate/distributed.py):
    K and V gathered in the forward and again in the backward (bf16), the fp32 dK / dV shares all-reduced (a ring
    all-reduce moves twice its (W - 1) / W share), with a gate the fp32 cumulative gate gathered and its gradient
    all-reduced."""
    part = (world - 1) / world
    kv = tokens * kv_heads * 2 * dim
    moved = part * (2 * kv * 2 + 2 * kv * 4)
    if ROWS[row].get("gate"):
        moved += part * (tokens * heads * 4 + 2 * tokens * heads * 4)
    return moved


def model_ratio(one_rank_ms, tokens, row, world, heads, kv_heads, dim, gbps):
    """The model's world / 1 throughput: one rank's time split evenly, plus the transfers at gbps, not hidden."""
    if world == 1:
        return 1.0
    transfer_ms = transfer_bytes(tokens, row, world, heads, kv_heads, dim) / (gbps * 1e9) * 1e3
    return one_rank_ms / (one_rank_ms / world + transfer_ms)


def timed(fn, reps, device):
    """Median over reps of the slowest rank's wall time of fn() (ms), every rank starting after a barrier."""
    times = []
    for _ in range(reps + 1):  # the first run warms up
        dist.barrier()
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                            device=device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        times.append(took.item() * 1e3)
    return statistics.median(times[1:])


def whole_inputs(args, tokens, feats, device):
    """The same whole-sequence inputs on every rank (one seed)."""
    gen = torch.Generator(device=device).manual_seed(1234)
    shape_q, shape_kv = (1, tokens, args.heads, args.dim), (1, tokens, args.kv_heads, args.dim)
    rand = lambda *s: torch.randn(*s, generator=gen, device=device, dtype=torch.bfloat16)  # noqa: E731
    x = {"q": rand(*shape_q), "k": rand(*shape_kv), "v": rand(*shape_kv), "do": rand(*shape_q)}
    if feats.get("gate"):
        x["g"] = torch.nn.functional.logsigmoid(
            torch.randn(1, tokens, args.heads, generator=gen, device=device, dtype=torch.float32) + 4.0)
    if feats.get("sink"):
        x["sink"] = torch.randn(args.heads, generator=gen, device=device, dtype=torch.float32)
    return x


def allgather_gbps(device, mib, reps=5):
    """The group's all-gather bandwidth (GB/s): bytes a rank receives over the median time of a gather that leaves
    `mib` MiB on every rank."""
    world = dist.get_world_size()
    x = torch.empty((mib << 20) // 2 // world, dtype=torch.bfloat16, device=device)
    out = [torch.empty_like(x) for _ in range(world)]
    ms = timed(lambda: dist.all_gather(out, x), reps, device)
    return (world - 1) * x.numel() * 2 / (ms * 1e-3) / 1e9


def run_flashgate(args, tokens, feats, mode, device):
    from flashgate import distributed as cp

    x = whole_inputs(args, tokens, feats, device)
    local = {name: (cp.shard(t) if t.dim() > 1 else t.clone()) for name, t in x.items()}
    del x
    leaves = {name: t.requires_grad_() for name, t in local.items() if name != "do"}

    def step():
        o = cp.context_parallel_attn(leaves["q"], leaves["k"], leaves["v"], g=leaves.get("g"),
                                     sink_bias=leaves.get("sink"), mode=mode)
        torch.autograd.grad(o, list(leaves.values()), local["do"])

    return timed(step, args.reps, device)


def run_torch(args, tokens, feats, device):
    """torch's context_parallel over SDPA (cuDNN where it serves), MHA layout; None where it has no such row."""
    if feats:
        return None, "torch's SDPA has no gate or sink"
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    world = dist.get_world_size()
    x = whole_inputs(args, tokens, feats, device)
    group = args.heads // args.kv_heads
    q, do = (x[n].transpose(1, 2).contiguous() for n in ("q", "do"))
    k, v = (x[n].repeat_interleave(group, dim=2).transpose(1, 2).contiguous() for n in ("k", "v"))
    del x

    def attend(q, k, v, do):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), do)

    if world == 1:
        return timed(lambda: attend(q, k, v, do), args.reps, device), None
    mesh = init_device_mesh(device, (world,))
    with context_parallel(mesh, buffers=[q, k, v, do], buffer_seq_dims=[2, 2, 2, 2]):
        return timed(lambda: attend(q, k, v, do), args.reps, device), None


def measure(args):
    device = args.device
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    results = []
    gbps = allgather_gbps(device, args.link_mib) if world > 1 else None
    for tokens in [int(t) for t in args.tokens.split(",")]:
        for row in args.rows.split(","):
            feats = ROWS[row]
            # Forward + backward: the benchmark's causal count (rows.py), the backward 2.5x the forward.
            flops = 3.5 * TrainingRow(row, 1, tokens, args.heads, args.kv_heads, args.dim, args.dim).fwd_flops()
            entry = {"tokens": tokens, "row": row, "world": world, "fwd_bwd_tflop": flops / 1e12}
            for mode in args.modes.split(","):
                try:
                    ms = run_flashgate(args, tokens, feats, mode, device)
                    entry[f"flashgate_{mode}_ms"] = ms
                except Exception as e:  # noqa: BLE001
                    entry[f"flashgate_{mode}_error"] = f"{type(e).__name__}: {e}"[:300]
                if device == "cuda":
                    torch.cuda.empty_cache()
            if not args.no_torch and device == "cuda":
                try:
                    ms, why = run_torch(args, tokens, feats, device)
                    entry["torch_ms" if ms is not None else "torch_error"] = ms if ms is not None else why
                except Exception as e:  # noqa: BLE001
                    entry["torch_error"] = f"{type(e).__name__}: {e}"[:300]
                torch.cuda.empty_cache()
            if rank == 0:
                print(json.dumps(entry), flush=True)
            results.append(entry)
    if rank == 0:
        env = {"world": world, "device": device, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
               "shape": f"B1 HQ{args.heads} H{args.kv_heads} K{args.dim} V{args.dim} bf16 causal",
               "heads": args.heads, "kv_heads": args.kv_heads, "dim": args.dim, "allgather_gbps": gbps,
               "command": recorded_command(sys.argv, launcher="torchrun --nproc_per_node=N")}
        if device == "cuda":  # the versions as the benchmark of record gives them, and NCCL's
            versions = environment(sys.argv)
            env.update({key: versions[key] for key in ("driver", "cuda", "cudnn", "flashgate", "git", "python")})
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        os.makedirs(args.out, exist_ok=True)
        dump_json(os.path.join(args.out, f"cp_{world}.json"), {"environment": env, "results": results})
    dist.destroy_process_group()


def report(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "cp_*.json"))):
        with open(path) as f:
            data = json.load(f)
        runs[data["environment"]["world"]] = data
    if 1 not in runs:
        raise SystemExit("cp_scaling --report: no one-rank run (cp_1.json) to compare with")
    env1 = runs[1]["environment"]
    units = "GPUs" if env1["device"] == "cuda" else "ranks"
    base = {(r["tokens"], r["row"]): r for r in runs[1]["results"]}
    links = ", ".join(f"{w} {units} {runs[w]['environment']['allgather_gbps']:.3g} GB/s" for w in sorted(runs)
                      if runs[w]["environment"].get("allgather_gbps"))
    versions = ", ".join(f"{name} {env1[key]}" for key, name in
                         (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("driver", "driver"),
                          ("flashgate", "flashgate"), ("git", "git")) if env1.get(key))
    lines = ["# Context parallelism: strong scaling", "",
             f"Shape: {env1['shape']}; command: `{env1['command']}`; {versions}; {env1['gpu']}.", "",
             "Model: the one-rank time split evenly over the ranks, plus the all-gather mode's transfers (K and V "
             "gathered in the forward and the backward, the fp32 dK / dV shares all-reduced; with a gate its "
             f"cumulative sums and their gradient) unhidden at the group's measured all-gather bandwidth ({links}).",
             "", f"| {units} | tokens | row | flashgate ms (TFLOP/s) | N / 1 | model N / 1 | torch CP ms (TFLOP/s) | "
             "N / 1 | flashgate / torch |", "|---|---|---|---|---|---|---|---|---|"]
    plot = {}

    def tflops(r, key):
        return r["fwd_bwd_tflop"] / (r[key] * 1e-3) if key in r else math.nan

    for world in sorted(runs):
        env = runs[world]["environment"]
        for r in runs[world]["results"]:
            b = base.get((r["tokens"], r["row"]), {})
            modes = [k for k in r if k.startswith("flashgate_") and k.endswith("_ms")]
            for key in modes or ["flashgate_allgather_ms"]:
                fg, fg1 = tflops(r, key), tflops(b, key)
                th, th1 = tflops(r, "torch_ms"), tflops(b, "torch_ms")
                model = math.nan
                if key == "flashgate_allgather_ms" and key in b and (world == 1 or env.get("allgather_gbps")):
                    model = model_ratio(b[key], r["tokens"], r["row"], world, env["heads"], env["kv_heads"],
                                        env["dim"], env.get("allgather_gbps"))
                fmt = lambda ms, t: f"{ms:.1f} ({t:.0f})" if not math.isnan(t) else "—"  # noqa: E731
                lines.append(f"| {world} | {r['tokens']} | {r['row']} ({key[10:-3]}) | {fmt(r.get(key, 0), fg)} | "
                             f"{fg / fg1:.2f}x | {model:.2f}x | {fmt(r.get('torch_ms', 0), th)} | {th / th1:.2f}x | "
                             f"{fg / th:.2f}x |".replace("nanx", "—"))
                plot.setdefault((r["row"], key, world), []).append((r["tokens"], fg / fg1, model))
    errors = [f"- {w} {units}, {r['tokens']} tokens, {r['row']}: {k}: {v}" for w in sorted(runs)
              for r in runs[w]["results"] for k, v in r.items() if k.endswith("_error")]
    if errors:
        lines += ["", "Not run:", *errors]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for (row, key, world), pts in sorted(plot.items()):
        if world > 1:
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                            label=f"{world} {units}, {row}, {key[10:-3]}")
            if not all(math.isnan(p[2]) for p in pts):
                ax.plot([p[0] for p in pts], [p[2] for p in pts], linestyle="--", color=line.get_color(),
                        label=f"model, {world} {units}, {row}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens")
    ax.set_ylabel(f"fwd + bwd throughput / one {units[:-1]}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=False)
    ap.add_argument("--report", metavar="OUT")
    ap.add_argument("--tokens", default="65536,131072,262144,524288")
    ap.add_argument("--rows", default="plain,gate+sink")
    ap.add_argument("--modes", default="allgather")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--link-mib", type=int, default=256, help="size of the all-gather that measures the link")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    if args.report:
        return report(args.report)
    if not args.out:
        ap.error("--out is required to measure")
    measure(args)


if __name__ == "__main__":
    main()
