# Session 15 probe (run 1): session 14 found flashgate ~8 us slower after any other reading kernel (even an 8 MB
# read) than back to back after itself, cuDNN < 1 us. Is that state tied to the data the op reads (its
# addresses: translations, DRAM, L2) or to the op's kernel having run? The timed replay on cache A is preceded,
# untimed, by:
#   none     nothing (back to back)
#   read8    an 8 MB contiguous read of another buffer (session 14's read8)
#   opB      the same op on cache B (same shape, other buffers)
#   readA    a full read of A's K and V (what the op reads, with a plain reduction)
#   readB    the same for B's K and V
#   touchA   one byte in every 64 KB of A's K and V (small-page address translations; session 14 touched every 2 MB)
#   touchB   the same for B
# Rounds alternate.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, graphed, header, rounds_after, table_row  # noqa: E402
from rows import PAGED_ROWS, DECODE_ROWS  # noqa: E402
import run as benchrun  # noqa: E402
import peers  # noqa: E402


def read(tensors):
    return lambda: [x.reshape(-1).view(torch.uint8).max() for x in tensors]


def touch(tensors, step=64 << 10):
    return lambda: [x.reshape(-1).view(torch.uint8)[::step].max() for x in tensors]


def case(op, contender, row, t):
    """The callable and the tensors it streams."""
    if contender == "cuDNN":
        return peers.sdpa_decode("CUDNN_ATTENTION")(row, t), [t["k_bhld"], t["v_bhld"]]
    if op == "decode":
        return benchrun.flashgate_decode(row, t), [t["k_real"], t["v_real"]]
    return benchrun.flashgate_paged(row, t, None), [t["k_cache"], t["v_cache"]]


rows = [("decode", "flashgate", r) for r in DECODE_ROWS if r.name == "B128 ctx 1024"] + \
       [("decode", "cuDNN", r) for r in DECODE_ROWS if r.name == "B128 ctx 1024"] + \
       [("paged", "flashgate", r) for r in PAGED_ROWS if r.name == "B128 ctx 1024"]
methods = ["none", "read8", "opB", "readA", "readB", "touchA", "touchB"]
print(header("| case | contender", methods), flush=True)
for op, name, row in rows:
    ta, tb = benchrun.serving_inputs(row, None), benchrun.serving_inputs(row, None)
    fa, xa = case(op, name, row, ta)
    fb, xb = case(op, name, row, tb)
    ga, gb = graphed(fa), graphed(fb)
    before = {"none": lambda: None, "read8": lambda: FLUSH[:8 << 20].max(), "opB": gb,
              "readA": read(xa), "readB": read(xb), "touchA": touch(xa), "touchB": touch(xb)}
    print(table_row(f"{op} bf16 {row.name} | {name}", rounds_after(ga, {m: before[m] for m in methods})), flush=True)
    del ta, tb, fa, fb, ga, gb, xa, xb, before
    torch.cuda.empty_cache()
