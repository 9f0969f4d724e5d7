# Session 14 probe (run 8, branch exp-timeline's package: FLASHGATE_TIMELINE=file writes the launch's per-CTA
# global-timer stamps, read by docs/benchmarks/2026-11-30-s12-serving-probes/timeline.py): where in the launch
# the ~8 us that flashgate loses after a clean L2 flush go. Eager calls (the branch synchronises after each);
# "none": the row's call right after the same call, "clean": right after reading a 256 MB buffer.
# Writes OUTDIR/<row>_<mode>_<i>.bin (argv[1] = OUTDIR).
import os, sys, torch
from probe_timing import FLUSH
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun

out = sys.argv[1]
rows = [("decode", r) for r in DECODE_ROWS if r.name == "B128 ctx 1024"] + \
       [("paged", r) for r in PAGED_ROWS if r.name in ("B128 ctx 1024", "B1 ctx 131072")]
for op, row in rows:
    t = benchrun.serving_inputs(row, None)
    fn = benchrun.flashgate_decode(row, t) if op == "decode" else benchrun.flashgate_paged(row, t, None)
    tag = f"{op}_{row.name.split()[0]}"
    for i in range(3):
        for mode in ("none", "clean"):
            os.environ["FLASHGATE_TIMELINE"] = os.path.join(out, "discard.bin")
            fn()
            if mode == "clean":
                FLUSH.max()
            os.environ["FLASHGATE_TIMELINE"] = os.path.join(out, f"{tag}_{mode}_{i}.bin")
            fn()
            torch.cuda.synchronize()
    del t
    torch.cuda.empty_cache()
os.remove(os.path.join(out, "discard.bin"))
print("done")
