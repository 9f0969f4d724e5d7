# Session 15 probe (run 7): session 14's probe_s14b with its clean flush redone. probe_s14b read the 256 MB
# buffer with torch's `max()`, and runs 4-6 of this session found that a torch full reduction (even over 1 KB)
# leaves flashgate ~8 us slower, unlike any other kernel tried; so here the clean flush reads the buffer with a
# Triton kernel (264 programs, one partial each, no atomics). Times the same CUDA-graph replays three ways, in
# one process, rounds alternating:
#   dirty: zero a 256 MB buffer before each run (do_bench's flush; the benchmark of record)
#   clean: read a 256 MB buffer before each run with the Triton kernel (the L2 as cold, no dirty lines)
#   none:  runs back to back (BENCHMARKS.md rotates inputs only when they fit in the L2; these do not)
# Prints us per row and method, GB/s, the ratio to the copy ceiling timed the same way, and fp8 / bf16 tokens/s.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, median_us, graphed  # noqa: E402
from triton_read import plain_read  # noqa: E402
from rows import PAGED_ROWS, DECODE_ROWS  # noqa: E402
import run as benchrun  # noqa: E402
import peers  # noqa: E402

METHODS = ("dirty", "clean", "none")
clean_flush = plain_read(FLUSH, block=8192)


def flush(method):
    if method == "dirty":
        FLUSH.zero_()
    elif method == "clean":
        clean_flush()


def times(fn, reps=60, rounds=2):
    out = {m: [] for m in METHODS}
    for _ in range(rounds):
        for m in METHODS:
            out[m].append(median_us(fn, lambda: flush(m), reps))
    return {m: sorted(v)[len(v) // 2] for m, v in out.items()}


src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda").random_()
dst = torch.empty_like(src)
copy = times(lambda: dst.copy_(src), reps=20)
copy_gbps = {m: 2 * src.numel() / copy[m] / 1e3 for m in METHODS}
del src, dst
print("copy 2 GiB GB/s: " + ", ".join(f"{m} {copy_gbps[m]:.0f}" for m in METHODS), flush=True)
for mb in (268, 537, 1074):
    x = torch.randn(mb * 1000 * 1000 // 2, device="cuda", dtype=torch.bfloat16)
    r = times(lambda: x.sum())
    print(f"torch.sum {mb} MB: " + ", ".join(f"{m} {r[m]:.1f} us ({mb * 1e3 / r[m] / copy_gbps[m]:.3f} of copy)"
                                          for m in METHODS), flush=True)
    del x

want = [w for w in os.environ.get("PROBE_ROWS", "").split(";") if w]
cases = [("decode", r, None) for r in DECODE_ROWS] + \
        [("paged", r, m) for m in (None, "per-tensor", "per-token") for r in PAGED_ROWS]
bf16_us = {}
print("| case | contender | " + " | ".join(f"{m} us | {m} of copy" for m in METHODS) + " | fp8/bf16 tokens/s " +
      " / ".join(METHODS) + " |", flush=True)
for op, row, fp8 in cases:
    label = f"{op} {'bf16' if fp8 is None else 'fp8 ' + fp8} {row.name}"
    if want and not any(w in label for w in want):
        continue
    t = benchrun.serving_inputs(row, fp8)
    nbytes = row.kv_bytes(2 if fp8 is None else 1, fp8 == "per-token")
    contenders = {"flashgate": benchrun.flashgate_decode(row, t) if op == "decode"
                  else benchrun.flashgate_paged(row, t, fp8)}
    if fp8 is None and row.q_len == 1 and not (op == "paged" and row.name in ("B64 ctx 4096", "B8 ctx 32768")):
        contenders["cuDNN (contiguous)"] = peers.sdpa_decode("CUDNN_ATTENTION")(row, t)
    for name, fn in contenders.items():
        r = times(graphed(fn))
        if fp8 is None and name == "flashgate":
            bf16_us[(op, row.name)] = r
        ratio = ""
        if fp8 is not None and (op, row.name) in bf16_us:
            ratio = " / ".join(f"{bf16_us[(op, row.name)][m] / r[m]:.2f}x" for m in METHODS)
        print(f"| {label} | {name} | " + " | ".join(f"{r[m]:.1f} | {nbytes / r[m] / 1e3 / copy_gbps[m]:.3f}"
                                                     for m in METHODS) + f" | {ratio} |", flush=True)
    del t, contenders
    torch.cuda.empty_cache()
