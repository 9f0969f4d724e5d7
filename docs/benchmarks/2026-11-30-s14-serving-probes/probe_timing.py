# The session 14 probes' timer: CUDA-graph replays (captured as bench/measure.py captures them) timed by CUDA
# events one by one, each run preceded (untimed) by `before()`, median in us; and the 256 MB buffer the flushes
# zero or read.
import os, sys, torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from measure import graph_replay as graphed  # noqa: E402,F401  (the benchmark's own capture)

FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def median_us(fn, before, reps=60):
    for _ in range(3):
        before(); fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        before()
        a.record(); fn(); b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1e3
