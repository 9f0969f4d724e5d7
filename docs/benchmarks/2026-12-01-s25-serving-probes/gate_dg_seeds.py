"""Session 25 probe: the spread over seeds of the gated backward's dg error (SPEC 7 metric) on the GPU, against the
fp64 reference, for the shapes of tests/python/test_gpu.py::test_fla_forgetting_attn (g ~ U(-0.1, -0.01)) and two
bf16 variants; and, for the single-head cases, a model of the one error source named in
src/cuda/portable/backward.h: D = round(o) . do instead of the exact sum_j P dP (fp64, nothing else rounded).

    PYTHONPATH=<package> python3 gate_dg_seeds.py SEEDS OUT.tsv [tests|sizes]   (from the repository root, on a GPU)
"""
import sys

import torch

sys.path.insert(0, "tests/python")
import torch_reference as ref  # noqa: E402
import flashgate  # noqa: E402

F16, BF16 = torch.float16, torch.bfloat16
CASE_SETS = {  # dtype, B, T, H, HQ, D, scale (None: 1/sqrt(D))
    "tests": [(F16, 1, 63, 1, 1, 64, 1.0), (F16, 3, 111, 2, 2, 100, 1.0), (F16, 3, 1024, 2, 8, 128, 0.1),
              (BF16, 1, 63, 1, 1, 64, 1.0), (BF16, 1, 63, 1, 1, 64, None), (BF16, 3, 111, 2, 2, 100, None)],
    "sizes": [(BF16, 1, 256, 1, 1, 64, None), (BF16, 1, 1024, 1, 1, 64, None), (BF16, 4, 128, 1, 4, 64, None),
              (BF16, 2, 512, 2, 8, 128, None), (BF16, 2, 512, 2, 8, 128, 1.0), (BF16, 2, 2048, 2, 8, 128, None),
              (BF16, 2, 2048, 2, 8, 128, 1.0)]}
CASES = CASE_SETS[sys.argv[3] if len(sys.argv) > 3 else "tests"]


def model_dg_error(rq, rk, rv, rg, do, scale, dtype, r_dg):
    """rms of the dg change that D = round(o) . do alone makes, over rms(dg): single sequence, one head."""
    q, k, v, g, dod = rq[0, :, 0], rk[0, :, 0], rv[0, :, 0], rg[0, :, 0], do[0, :, 0].double()
    T = q.shape[0]
    Gc = torch.cumsum(g, 0)
    S = ref.api_scale(scale, q.shape[-1]) * q @ k.T + Gc[:, None] - Gc[None, :]
    S = S.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    P = torch.softmax(S, -1)
    o = P @ v
    delta = ((o.to(dtype).double() - o) * dod).sum(-1)      # D's error per row
    d_dgc = -delta + (P * delta[:, None]).sum(0)           # query side - key side of dGc
    d_dg = torch.flip(torch.cumsum(torch.flip(d_dgc, [0]), 0), [0])
    return float(d_dg.square().mean().sqrt() / r_dg[0, :, 0].square().mean().sqrt())


def main():
    seeds, out = int(sys.argv[1]), sys.argv[2]
    rows = []
    with open(out, "w") as f:
        f.write("dtype\tB\tT\tH\tHQ\tD\tscale\tseed\tdq\tdk\tdv\tdg\tdg_model\n")
        for dtype, B, T, H, HQ, D, scale in CASES:
            n = seeds if T < 1000 else max(seeds // 8, 10)
            for seed in range(n):
                gen = torch.Generator(device="cuda").manual_seed(seed)
                rn = lambda shape: torch.randn(shape, generator=gen, device="cuda").to(dtype)  # noqa: E731
                q, k, v = rn((B, T, HQ, D)), rn((B, T, H, D)), rn((B, T, H, D))
                g = torch.rand((B, T, HQ), generator=gen, device="cuda") * 0.09 - 0.1
                inputs = [t.requires_grad_() for t in (q, k, v, g)]
                o = flashgate.parallel_attn(*inputs, scale=scale)
                do = rn(o.shape)
                grads = torch.autograd.grad(o, inputs, do)
                r_inputs = [t.detach().double().requires_grad_() for t in inputs]
                ro, _ = ref.attention(*r_inputs, None, scale, None, None)
                r_grads = torch.autograd.grad(ro, r_inputs, do.double())
                errs = [ref.relative_rms(a, b) for a, b in zip(grads, r_grads)]
                m = model_dg_error(*[t.detach() for t in r_inputs], do, scale, dtype, r_grads[3]) \
                    if B == 1 and HQ == 1 else float("nan")
                name = "f16" if dtype == F16 else "bf16"
                f.write(f"{name}\t{B}\t{T}\t{H}\t{HQ}\t{D}\t{scale}\t{seed}\t" +
                        "\t".join(f"{e:.5f}" for e in errs) + f"\t{m:.5f}\n")
                f.flush()
                rows.append((name, B, T, H, HQ, D, scale, errs, m))
    print("| dtype | B T H HQ D | scale | seeds | dg median / p99 / max | dg > 0.005 | dg > 0.01 | model median / max "
          "| model > 0.005 | dq, dk, dv max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype, B, T, H, HQ, D, scale in CASES:
        name = "f16" if dtype == F16 else "bf16"
        sel = [r for r in rows if r[:7] == (name, B, T, H, HQ, D, scale)]
        dg = torch.tensor([r[7][3] for r in sel], dtype=torch.float64)
        mod = torch.tensor([r[8] for r in sel], dtype=torch.float64)
        others = max(max(r[7][:3]) for r in sel)
        q = lambda t, p: float(torch.quantile(t, p))  # noqa: E731
        model = (f"{q(mod, 0.5):.4f} / {float(mod.max()):.4f} | {100 * float((mod > 0.005).double().mean()):.1f}%"
                 if not torch.isnan(mod).any() else "- | -")
        print(f"| {name} | {B} {T} {H} {HQ} {D} | {scale} | {len(sel)} | {q(dg, 0.5):.4f} / {q(dg, 0.99):.4f} / "
              f"{float(dg.max()):.4f} | {100 * float((dg > 0.005).double().mean()):.1f}% | "
              f"{100 * float((dg > 0.01).double().mean()):.1f}% | {model} | {others:.4f} |")


if __name__ == "__main__":
    main()
