"""Does the page order cost the paged bf16 rows? One package, one process, on the benchmark's bf16 one-pass rows:

    PYTHONPATH=<flashgate package> python page_order.py OUT.tsv [ROUNDS]

paged_attention over the benchmark's cache with its shuffled block table (random page order, as bench/run.py
builds it) and over the same cache with pages in order (block table = arange), and decode over the contiguous copy
(no block table at all), each captured in a CUDA graph and timed as the benchmark times it (after do_bench's
flush, and back to back), interleaved over ROUNDS rounds. One line per (row, variant, round)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../bench"))
import measure  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
from run import flashgate_decode, flashgate_paged, serving_inputs  # noqa: E402

ROWS = ["B128 ctx 1024", "B1 ctx 131072", "B64 ctx 4096"]


def inputs(row, shuffled):
    if shuffled:
        return serving_inputs(row, None)
    randperm = torch.randperm
    torch.randperm = lambda n, **kw: torch.arange(n, device=kw.get("device"), dtype=kw.get("dtype"))
    try:
        return serving_inputs(row, None)
    finally:
        torch.randperm = randperm


def main():
    out, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    decode_rows = {r.name: r for r in DECODE_ROWS}
    with open(out, "w") as f:
        f.write("row\tvariant\tround\tms_flushed\tms_back_to_back\n")
        for row in PAGED_ROWS:
            if row.name not in ROWS:
                continue
            shuffled, in_order = inputs(row, True), inputs(row, False)
            graphs = {"paged shuffled": measure.graph_replay(flashgate_paged(row, shuffled, None)),
                      "paged in order": measure.graph_replay(flashgate_paged(row, in_order, None))}
            if row.name in decode_rows:
                graphs["decode contiguous"] = measure.graph_replay(flashgate_decode(decode_rows[row.name], shuffled))
            for r in range(rounds):
                for name, g in graphs.items():
                    f.write(f"{row.name}\t{name}\t{r}\t{measure.median_ms(g):.4f}\t{measure.back_to_back_ms(g):.4f}\n")
                    f.flush()
            print(row.name, "done", flush=True)
            del graphs, shuffled, in_order
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
