"""Key slices (split-KV) swept on the benchmark's split rows, every kind, in one process:

    PYTHONPATH=<flashgate package> python sweep_slices.py OUT.tsv [ROUNDS] [short]

For each split row (bench/rows.txt) and cache kind, the inputs are built once; each slice count (FLASHGATE_NUM_SPLITS,
read by the planner on every call; 0: the planner's own) is captured in a CUDA graph and timed as the benchmark
times it (after do_bench's flush, and back to back), the counts interleaved over ROUNDS rounds so that drift hits
all of them alike; `short`: the planner's count and a few near the best of run 1. One line per (row, kind, slices,
round): ms flushed, ms back to back. Outputs are not checked (variants that skip work are timed too)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../bench"))
import measure  # noqa: E402
from rows import PAGED_ROWS  # noqa: E402
from run import flashgate_paged, serving_inputs  # noqa: E402

# Row name -> slice counts to try (CTAs of one slice: 8 kv heads x sequences; 132 SMs).
COUNTS = {
    "B8 ctx 32768": [2, 3, 4, 5, 6, 8, 12],
    "B1 ctx 131072": [8, 12, 16, 17, 22, 24, 33, 44, 50, 66],
    "verify 3 x 4 tokens, ctx 32768": [4, 5, 6, 8, 11, 12, 16, 22],
    "verify 3 x 4 tokens, ctx 131072": [4, 6, 8, 11, 12, 16, 22, 33],
}
SHORT = {"B8 ctx 32768": [6], "B1 ctx 131072": [16, 33, 44], "verify 3 x 4 tokens, ctx 32768": [16],
         "verify 3 x 4 tokens, ctx 131072": [16]}


def main():
    out, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    counts = SHORT if sys.argv[3:] == ["short"] else COUNTS
    with open(out, "w") as f:
        f.write("row\tkind\tslices\tround\tms_flushed\tms_back_to_back\n")
        for row in PAGED_ROWS:
            if row.name not in counts:
                continue
            for fp8 in (None, "per-tensor", "per-token"):
                kind = "bf16" if fp8 is None else fp8
                t = serving_inputs(row, fp8)
                graphs = {}
                for s in [0] + counts[row.name]:
                    os.environ["FLASHGATE_NUM_SPLITS"] = str(s)
                    graphs[s] = measure.graph_replay(flashgate_paged(row, t, fp8))
                os.environ.pop("FLASHGATE_NUM_SPLITS")
                for r in range(rounds):
                    for s, g in graphs.items():
                        ms, b2b = measure.median_ms(g), measure.back_to_back_ms(g)
                        f.write(f"{row.name}\t{kind}\t{s}\t{r}\t{ms:.4f}\t{b2b:.4f}\n")
                        f.flush()
                print(row.name, kind, "done", flush=True)
                del graphs, t
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
