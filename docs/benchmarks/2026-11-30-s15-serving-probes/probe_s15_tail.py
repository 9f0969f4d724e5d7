# Session 15 probe (run 9, branch exp-split-tail's package): split rows whose last splits are small
# (FLASHGATE_SPLIT_TAIL=n of FLASHGATE_TAIL_WEIGHT per mille of a big split each, FLASHGATE_NUM_SPLITS in all),
# so that the slots that finish their big split first (the faster SMs, sessions 12 and 14) take the small
# ones. Each setting is captured as its own CUDA graph; timed after do_bench's kind of flush (dirty: zero 256 MB)
# and back to back (none). Settings are (splits, tail, weight); (0, 0, 0) is the planner's plain choice.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, capture_under, median_us  # noqa: E402
from rows import PAGED_ROWS  # noqa: E402
import run as benchrun  # noqa: E402

SETTINGS = {
    ("bf16", "B1 ctx 131072"): [(0, 0, 0), (41, 8, 150), (41, 8, 250), (37, 4, 300), (45, 12, 150), (49, 16, 100),
                               (39, 6, 200)],
    ("per-tensor", "B1 ctx 131072"): [(0, 0, 0), (82, 16, 150), (74, 8, 300), (90, 24, 100)],
    ("bf16", "verify 3 x 4 tokens, ctx 131072"): [(0, 0, 0), (13, 2, 300), (14, 3, 200), (15, 4, 150)],
}
KNOBS = ("FLASHGATE_NUM_SPLITS", "FLASHGATE_SPLIT_TAIL", "FLASHGATE_TAIL_WEIGHT")
print("| case | splits, tail, weight | dirty us | none us |", flush=True)
for (kv, name), settings in SETTINGS.items():
    row = [r for r in PAGED_ROWS if r.name == name][0]
    fp8 = None if kv == "bf16" else kv
    t = benchrun.serving_inputs(row, fp8)
    captured = capture_under(KNOBS, settings, lambda: benchrun.flashgate_paged(row, t, fp8))
    outs = {st: o for st, (o, _) in captured.items()}
    graphs = {st: g for st, (_, g) in captured.items()}
    res = {st: {"dirty": [], "none": []} for st in settings}
    for _ in range(3):
        for st, g in graphs.items():
            res[st]["dirty"].append(median_us(g, lambda: FLUSH.zero_()))
            res[st]["none"].append(median_us(g, lambda: None))
    for st in graphs:
        err = (outs[st] - outs[settings[0]]).abs().max().item()
        print(f"| {kv} {name} | {st} | " + " | ".join(", ".join(f"{x:.1f}" for x in res[st][m]) for m in ("dirty", "none"))
              + f" | max |o - planner's o| {err:.2e} |", flush=True)
    del t, captured, graphs, outs
    torch.cuda.empty_cache()
