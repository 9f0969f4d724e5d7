# Reads the per-CTA stamps of branch exp-timeline (FLASHGATE_TIMELINE=file; run10_timeline*.bin: an int64 CTA
# count, then 8 uint64 per CTA: 0 entry, 1 row block resolved, 2 first stage landed, 3 last stage computed,
# 4 exit (global timer, ns); 5 SM id, 6 stages, 7 1 for a CTA with rows) and prints each phase's spread, the
# number of CTAs streaming over time and the stream time by SM.
import struct
import sys


def load(fn):
    b = open(fn, "rb").read()
    n = struct.unpack("<q", b[:8])[0]
    v = struct.unpack("<%dQ" % (n * 8), b[8:8 + n * 64])
    return [v[i * 8:(i + 1) * 8] for i in range(n)]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]


for fn in sys.argv[1:]:
    ctas = load(fn)
    t0 = min(x[0] for x in ctas if x[0] > 0)
    live = [x for x in ctas if x[7] == 1 and x[2] > 0]
    span = max(x[4] - t0 for x in live) / 1e3
    print(f"{fn}: {len(live)} CTAs with rows, {sum(1 for x in ctas if x[7] == 0 and x[0] > 0)} without; span {span:.1f} us")
    for name, f in (("entry", lambda x: (x[0] - t0) / 1e3), ("entry -> resolved", lambda x: (x[1] - x[0]) / 1e3),
                    ("entry -> first stage", lambda x: (x[2] - x[0]) / 1e3),
                    ("first -> last stage", lambda x: (x[3] - x[2]) / 1e3), ("last stage -> exit", lambda x: (x[4] - x[3]) / 1e3),
                    ("exit", lambda x: (x[4] - t0) / 1e3)):
        xs = [f(x) for x in live]
        print(f"  {name:22s} min {min(xs):6.1f} p10 {pct(xs, .1):6.1f} median {pct(xs, .5):6.1f} p90 {pct(xs, .9):6.1f} max {max(xs):6.1f}")
    steps = [t0 + int(span * 1e3 * i / 20) for i in range(21)]
    print("  CTAs between first and last stage, every 5% of the span:",
          [sum(1 for x in live if x[2] <= t < x[3]) for t in steps])
    by_sm = {}
    for x in live:
        by_sm.setdefault(x[5] // 16, []).append((x[3] - x[2]) / 1e3)
    print("  median stream time by SM id / 16:", [(k, round(pct(v, .5), 1)) for k, v in sorted(by_sm.items())])
