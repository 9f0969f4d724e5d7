# Session 15 probe (run 3, branch exp-clock's package: FLASHGATE_TIMELINE=file writes per-CTA stamps, 10 per CTA:
# global timer at 0 entry, 1 row block resolved, 2 first stage landed, 3 last stage computed, 4 exit; 5 SM id,
# 6 stages, 7 1 for a CTA with rows, 8 / 9 the SM's clock64 at entry / exit). Runs 1-2 showed flashgate is
# ~8 us faster right after a full run of its own kernel (on any cache) than after any other reading kernel,
# whatever the cache layout. Is the SM clock different? Eager calls (the branch synchronises after each): the
# row's call on cache A right after the same call on A (self), on cache B (opB), or after an 8 MB read (read8).
import os, sys, struct, statistics
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH  # noqa: E402
from rows import PAGED_ROWS, DECODE_ROWS  # noqa: E402
import run as benchrun  # noqa: E402

out = sys.argv[1]


def load(fn):
    b = open(fn, "rb").read()
    n = struct.unpack("<q", b[:8])[0]
    v = struct.unpack("<%dQ" % (n * 10), b[8:8 + n * 80])
    return [v[i * 10:(i + 1) * 10] for i in range(n)]


def summary(fn):
    ctas = [x for x in load(fn) if x[7] == 1 and x[2] > 0 and x[9] > x[8]]
    t0 = min(x[0] for x in ctas)
    span = max(x[4] - t0 for x in ctas) / 1e3
    ghz = [(x[9] - x[8]) / (x[4] - x[0]) for x in ctas]
    first = [(x[2] - x[0]) / 1e3 for x in ctas]
    stream = [(x[3] - x[2]) / 1e3 for x in ctas]
    # CTA placement: CTA index -> SM id; how the CTAs that share an SM relate (index distance)
    all_ctas = load(fn)
    by_sm = {}
    for i, x in enumerate(all_ctas):
        if x[0] > 0:
            by_sm.setdefault(x[5], []).append(i)
    dist = {}
    for v in by_sm.values():
        if len(v) == 2:
            d = abs(v[1] - v[0])
            dist[d] = dist.get(d, 0) + 1
    top = sorted(dist.items(), key=lambda kv: -kv[1])[:3]
    sms = [all_ctas[i][5] for i in range(8)]
    return (span, statistics.median(ghz), min(ghz), max(ghz), statistics.median(first), statistics.median(stream),
            f"SMs of CTAs 0-7 {sms}; pair distances {top}")


rows = [("decode", r) for r in DECODE_ROWS if r.name == "B128 ctx 1024"] + \
       [("paged", r) for r in PAGED_ROWS if r.name == "B128 ctx 1024"]
print("| case | before | span us | SM GHz median (min-max) | entry -> first stage us | stream us (medians) | placement |")
for op, row in rows:
    ta, tb = benchrun.serving_inputs(row, None), benchrun.serving_inputs(row, None)
    fa = benchrun.flashgate_decode(row, ta) if op == "decode" else benchrun.flashgate_paged(row, ta, None)
    fb = benchrun.flashgate_decode(row, tb) if op == "decode" else benchrun.flashgate_paged(row, tb, None)
    before = {"self": fa, "opB": fb, "read8": lambda: FLUSH[:8 << 20].max()}
    res = {m: [] for m in before}
    for i in range(3):
        for m, b in before.items():
            os.environ["FLASHGATE_TIMELINE"] = os.path.join(out, "discard.bin")
            fa()
            b()
            fn = os.path.join(out, f"{op}_{m}_{i}.bin")
            os.environ["FLASHGATE_TIMELINE"] = fn
            fa()
            torch.cuda.synchronize()
            res[m].append(summary(fn))
    for m, xs in res.items():
        for s in xs:
            print(f"| {op} {row.name} | {m} | {s[0]:.1f} | {s[1]:.3f} ({s[2]:.3f}-{s[3]:.3f}) | {s[4]:.1f} | {s[5]:.1f} | {s[6]} |",
                  flush=True)
    del ta, tb
    torch.cuda.empty_cache()
os.environ.pop("FLASHGATE_TIMELINE")
print("done")
