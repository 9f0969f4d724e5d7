# Session 15 probe (run 10): kv heads per CTA and pipeline depth on the one-pass short rows, now that the CTA start
# under load is known to cost a loaded round trip per dependent step (sessions 12-14): fewer stages in flight
# mean shorter loaded round trips, more CTAs mean more starts. decode and paged bf16 B128/1024, each setting
# captured as its own CUDA graph (FLASHGATE_HEADS_PER_CTA, FLASHGATE_SERVING_STAGES; 0 = the planner's: 4 heads,
# 3 stages), timed after do_bench's kind of flush (dirty: zero 256 MB) and back to back (none), rounds alternating.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, capture_under, header, rounds_after, table_row  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
import run as benchrun  # noqa: E402

SETTINGS = [(0, 0), (1, 3), (1, 2), (2, 3), (2, 2), (4, 2), (8, 3)]  # (heads per CTA, stages)
KNOBS = ("FLASHGATE_HEADS_PER_CTA", "FLASHGATE_SERVING_STAGES")
before = {"dirty": lambda: FLUSH.zero_(), "none": lambda: None}
print(header("| case | heads, stages", before), flush=True)
for op, rows in (("decode", DECODE_ROWS), ("paged", PAGED_ROWS)):
    row = [r for r in rows if r.name == "B128 ctx 1024"][0]
    t = benchrun.serving_inputs(row, None)
    captured = capture_under(KNOBS, SETTINGS, lambda: benchrun.flashgate_decode(row, t) if op == "decode"
                             else benchrun.flashgate_paged(row, t, None))
    for st, (_, g) in captured.items():
        print(table_row(f"{op} bf16 {row.name} | {st}", rounds_after(g, before)), flush=True)
    del t, captured
    torch.cuda.empty_cache()
