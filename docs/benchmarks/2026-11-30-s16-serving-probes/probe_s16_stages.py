# Session 16 probe: does the ring's depth matter to the serving kernel? Run 4 left open whether fp8 lacks
# latency cover. Each setting of FLASHGATE_SERVING_STAGES (0 = the planner's: 3 for fp8 and bf16 D128) is captured
# as its own CUDA graph and timed after do_bench's kind of flush (dirty: zero 256 MB) and back to back (none),
# rounds alternating. fp8 D128 at 4 stages (72.8 KB) runs 3 CTAs per SM, at 2 and 3 stages 4.
#   run 5: python3 probe_s16_stages.py            (fp8 rows; 3, 2, 4 stages)
#   run 6: python3 probe_s16_stages.py all        (every paged fp8 row and the bf16 rows; 3, 2 stages)
#   run 7: python3 probe_s16_stages.py decode     (the decode rows alone, with the bench's correctness check)
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, capture_under, header, rounds_after, table_row  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
import run as benchrun  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
ALL = MODE in ("all", "decode")
SETTINGS = [(0,), (2,)] if ALL else [(0,), (2,), (4,)]
if MODE == "decode":  # run 7: the decode rows alone in a fresh process (run 6 timed decode B64/4096 at ~10 us)
    CASES = [("decode", None, r.name) for r in DECODE_ROWS]
elif ALL:
    CASES = [("paged", m, r.name) for m in ("per-tensor", "per-token") for r in PAGED_ROWS] + \
            [("paged", None, r.name) for r in PAGED_ROWS] + [("decode", None, r.name) for r in DECODE_ROWS]
else:
    CASES = [("paged", "per-tensor", n) for n in ("B64 ctx 4096", "B8 ctx 32768", "B128 ctx 1024", "B1 ctx 131072")] + \
            [("paged", "per-token", "B64 ctx 4096")]
before = {"dirty": lambda: FLUSH.zero_(), "none": lambda: None}
print(header("| case | stages", before), flush=True)
for op, fp8, name in CASES:
    row = [r for r in (DECODE_ROWS if op == "decode" else PAGED_ROWS) if r.name == name][0]
    t = benchrun.serving_inputs(row, fp8)
    make = (lambda: benchrun.flashgate_decode(row, t)) if op == "decode" else (lambda: benchrun.flashgate_paged(row, t, fp8))
    captured = capture_under(("FLASHGATE_SERVING_STAGES",), SETTINGS, make)
    ref = captured[(0,)][0]
    if MODE == "decode":  # the bench's correctness gate on the planner's output
        exact = benchrun.reference.decode_slice(t["q"].view(row.batch, row.q_len, row.HQ, row.D)[:, -1],
                                                t["k_real"], t["v_real"], row.HQ, row.H)
        print(f"{name}: relative RMS of the first sequence against the reference "
              f"{benchrun.measure.relative_rms(ref.reshape(-1, row.HQ, row.D)[0], exact):.3g}", flush=True)
    for st, (out, g) in captured.items():
        diff = float((out - ref).abs().max())
        label = f"{op} {'bf16' if fp8 is None else 'fp8 ' + fp8} {name} | {st[0]} (max diff to planner {diff:.2g})"
        print(table_row(label, rounds_after(g, before)), flush=True)
    t = captured = None
    torch.cuda.empty_cache()
