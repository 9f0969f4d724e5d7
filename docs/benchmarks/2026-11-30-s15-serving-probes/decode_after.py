# What runs 4-6 and 8 share: decode bf16 B128/1024 (flashgate on the packed cache, cuDNN on its contiguous twin)
# timed after each untimed callable of `before`, three rounds alternating (probe_timing.rounds_after).
from probe_timing import graphed, header, rounds_after, table_row
from rows import DECODE_ROWS
import run as benchrun
import peers

ROW = [r for r in DECODE_ROWS if r.name == "B128 ctx 1024"][0]


def print_after(before, t=None):
    """The table of flashgate's and cuDNN's times on the row's inputs `t` (fresh ones when None)."""
    t = benchrun.serving_inputs(ROW, None) if t is None else t
    contenders = {"flashgate": benchrun.flashgate_decode(ROW, t),
                  "cuDNN": peers.sdpa_decode("CUDNN_ATTENTION")(ROW, t)}
    print(header("| contender", before), flush=True)
    for name, f in contenders.items():
        print(table_row(name, rounds_after(graphed(f), before)), flush=True)
