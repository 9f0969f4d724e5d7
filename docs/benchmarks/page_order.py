"""Does the page order cost the paged rows? One package, one process, on the benchmark's B128/1024, B1/131072 and
B64/4096 rows:

    PYTHONPATH=<flashgate package> python page_order.py OUT.tsv [ROUNDS] [--kinds bf16,per-tensor,per-token]

paged_attention over the benchmark's cache with its shuffled block table (random page order, as bench/run.py
builds it) and over the same cache with pages in order (block table = arange), and for bf16 decode over the
contiguous copy (no block table at all), each captured in a CUDA graph and timed as the benchmark times it (after
do_bench's flush, and back to back), interleaved over ROUNDS rounds. One line per (row, kind, variant, round).
Session 21 ran it for bf16 (then in its probes directory), session 22 for fp8."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench"))
import measure  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
from run import flashgate_decode, flashgate_paged, serving_inputs  # noqa: E402

ROWS = ["B128 ctx 1024", "B1 ctx 131072", "B64 ctx 4096"]


def inputs(row, fp8, shuffled):
    if shuffled:
        return serving_inputs(row, fp8)
    randperm = torch.randperm
    torch.randperm = lambda n, **kw: torch.arange(n, device=kw.get("device"), dtype=kw.get("dtype"))
    try:
        return serving_inputs(row, fp8)
    finally:
        torch.randperm = randperm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("--kinds", default="bf16")
    args = ap.parse_args()
    decode_rows = {r.name: r for r in DECODE_ROWS}
    with open(args.out, "w") as f:
        f.write("row\tkind\tvariant\tround\tms_flushed\tms_back_to_back\n")
        for row in PAGED_ROWS:
            if row.name not in ROWS:
                continue
            for kind in args.kinds.split(","):
                fp8 = None if kind == "bf16" else kind
                shuffled, in_order = inputs(row, fp8, True), inputs(row, fp8, False)
                graphs = {"paged shuffled": measure.graph_replay(flashgate_paged(row, shuffled, fp8)),
                          "paged in order": measure.graph_replay(flashgate_paged(row, in_order, fp8))}
                if fp8 is None and row.name in decode_rows:
                    graphs["decode contiguous"] = measure.graph_replay(flashgate_decode(decode_rows[row.name], shuffled))
                for r in range(args.rounds):
                    for name, g in graphs.items():
                        f.write(f"{row.name}\t{kind}\t{name}\t{r}\t{measure.median_ms(g):.4f}\t"
                                f"{measure.back_to_back_ms(g):.4f}\n")
                        f.flush()
                print(row.name, kind, "done", flush=True)
                del graphs, shuffled, in_order
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
