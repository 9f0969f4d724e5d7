"""Key slices (split-KV) swept on the benchmark's split rows, every kind, in one process:

    PYTHONPATH=<flashgate package> python sweep_slices.py OUT.tsv [ROUNDS] [short | ROW=N,N;ROW=N,...] [--kinds K,K]
        [--head-dim D]

For each split row (bench/rows.txt: the paged rows, and decode B8/32768) and cache kind, the inputs are built once;
each slice count (FLASHGATE_NUM_SPLITS, read by the planner on every call; 0: the planner's own) is captured in a CUDA
graph and timed as the benchmark times it (after do_bench's flush, and back to back), the counts interleaved over
ROUNDS rounds so that drift hits all of them alike. `short`: the planner's count and a few near the best of session
21's run 1; `ROW=N,N;...`: those rows (names as in rows.txt, decode rows as "decode NAME") at those counts only
(a count `NhH`: N slices with H kv heads per CTA in turn, FLASHGATE_HEADS_PER_CTA); `--kinds`: bf16, per-tensor,
per-token (default all; decode rows are bf16 only); `--head-dim`: the rows at head dim D (K = V = D) instead of theirs. One line per (row, kind, slices,
round): ms flushed, ms back to back. Outputs are not checked (variants that skip work are timed too)."""
import argparse
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench"))
import measure  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
from run import flashgate_decode, flashgate_paged, serving_inputs  # noqa: E402

# Row name -> slice counts to try (CTAs of one slice: 8 kv heads x sequences; 132 SMs).
COUNTS = {
    "B8 ctx 32768": [2, 3, 4, 5, 6, 8, 12],
    "B1 ctx 131072": [8, 12, 16, 17, 22, 24, 33, 44, 50, 66],
    "verify 3 x 4 tokens, ctx 32768": [4, 5, 6, 8, 11, 12, 16, 22],
    "verify 3 x 4 tokens, ctx 131072": [4, 6, 8, 11, 12, 16, 22, 33],
}
SHORT = {"B8 ctx 32768": [6], "B1 ctx 131072": [16, 33, 44], "verify 3 x 4 tokens, ctx 32768": [16],
         "verify 3 x 4 tokens, ctx 131072": [16]}
KINDS = ("bf16", "per-tensor", "per-token")


def parse_counts(spec):
    if spec in (None, "full"):
        return COUNTS
    if spec == "short":
        return SHORT
    counts = {}
    for item in spec.split(";"):
        name, values = item.split("=")
        counts[name.strip()] = [x.strip() for x in values.split(",") if x.strip()]
    return counts


def cases(counts, kinds, head_dim=None):
    """(label, row, kind, fp8, make_fwd) for every row of `counts` and kind of `kinds`."""
    rows = [("", r) for r in PAGED_ROWS] + [("decode ", r) for r in DECODE_ROWS]
    for prefix, row in rows:
        if prefix + row.name not in counts:
            continue
        if head_dim:
            row = dataclasses.replace(row, D=head_dim)
        for kind in kinds:
            if prefix and kind != "bf16":
                continue
            fp8 = None if kind == "bf16" else kind
            yield prefix + row.name, row, kind, fp8, (lambda t, row=row, fp8=fp8, d=bool(prefix):
                                                       flashgate_decode(row, t) if d else flashgate_paged(row, t, fp8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("counts", nargs="?", default=None)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--head-dim", type=int, default=None)
    args = ap.parse_args()
    counts, kinds = parse_counts(args.counts), args.kinds.split(",")
    with open(args.out, "w") as f:
        f.write("row\tkind\tslices\tround\tms_flushed\tms_back_to_back\n")
        for label, row, kind, fp8, make_fwd in cases(counts, kinds, args.head_dim):
            t = serving_inputs(row, fp8)
            graphs = {}
            for s in ["0"] + [str(c) for c in counts[label]]:
                splits, _, heads = s.partition("h")
                os.environ["FLASHGATE_NUM_SPLITS"] = splits
                os.environ["FLASHGATE_HEADS_PER_CTA"] = heads or "0"
                graphs[s] = measure.graph_replay(make_fwd(t))
            os.environ.pop("FLASHGATE_NUM_SPLITS")
            os.environ.pop("FLASHGATE_HEADS_PER_CTA")
            for r in range(args.rounds):
                for s, g in graphs.items():
                    ms, b2b = measure.median_ms(g), measure.back_to_back_ms(g)
                    name = f"{label} D{row.D}" if args.head_dim else label
                    f.write(f"{name}\t{kind}\t{s}\t{r}\t{ms:.4f}\t{b2b:.4f}\n")
                    f.flush()
            print(label, kind, "done", flush=True)
            del graphs, t
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
