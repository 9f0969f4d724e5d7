# The session 14 probes' timer: CUDA-graph replays (captured as bench/measure.py captures them) timed by CUDA
# events one by one, each run preceded (untimed) by `before()`, median in us; and the 256 MB buffer the flushes
# zero or read.
import os, sys, torch
import triton
import triton.language as tl

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


def rounds_after(fn, before, rounds=3):
    """fn's median_us after each callable of the dict `before`, rounds alternating: {name: [us per round]}."""
    res = {m: [] for m in before}
    for _ in range(rounds):
        for m, b in before.items():
            res[m].append(median_us(fn, b))
    return res


def capture_under(knobs, settings, make):
    """{setting: (eager output as fp32, CUDA-graph replay)} of make()'s call, each with the environment variables
    `knobs` set to the setting's values (the serving planner reads them at each call), unset afterwards."""
    out = {}
    for setting in settings:
        os.environ.update({k: str(v) for k, v in zip(knobs, setting)})
        fn = make()
        out[setting] = (fn().float(), graphed(fn))
    for k in knobs:
        os.environ.pop(k)
    return out


def header(first, names):
    """A table header: the leading column(s) `first` ("| case | contender"), then one "<name> us" column each."""
    return f"{first} | " + " | ".join(f"{m} us" for m in names) + " |"


def table_row(label, res):
    """One table row: `label` ("case | contender"), then each method's rounds of a rounds_after result."""
    return f"| {label} | " + " | ".join(", ".join(f"{x:.1f}" for x in v) for v in res.values()) + " |"


# A plain read (session 15): a Triton kernel whose programs each sum their share of an int8 buffer and store one
# partial (no atomics, no cross-program reduction): a read that is not a torch reduction, after which flashgate
# pays what other kernels cost it (session 15, probe_s15_reduce.py).
@triton.jit
def _sum_kernel(x_ptr, out_ptr, per_program, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for off in range(0, per_program, BLOCK):
        acc += tl.load(x_ptr + pid * per_program + off + tl.arange(0, BLOCK)).to(tl.int32)
    tl.store(out_ptr + pid, tl.sum(acc))


def plain_read(buf, programs=264, block=4096):
    """A callable that reads (nearly) all of int8 `buf`: programs x a multiple of `block` bytes."""
    partials = torch.empty(programs, dtype=torch.int32, device=buf.device)
    per_program = buf.numel() // programs // block * block
    return lambda: _sum_kernel[(programs,)](buf, partials, per_program, BLOCK=block)
