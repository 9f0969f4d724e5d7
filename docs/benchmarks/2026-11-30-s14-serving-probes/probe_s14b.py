# Session 14 probe: how the L2 flush between timed runs moves the serving rows and the copy ceiling.
# triton's do_bench (the benchmark's timer) flushes the L2 by zeroing a 256 MB buffer before each run, which
# leaves the L2 (~50-60 MB) full of dirty lines: the timed kernel then writes them back while it reads. This
# times the same CUDA-graph replays three ways, in one process, rounds alternating:
#   dirty: zero a 256 MB buffer before each run (do_bench's flush; the benchmark of record)
#   clean: read a 256 MB buffer before each run (the L2 is as cold, but holds no dirty lines): with torch's
#          max() (session 14's runs), or with PROBE_CLEAN=triton a plain Triton read (session 15 run 7: torch's
#          reduce kernel itself leaves flashgate's next launch ~8 us slower, docs/perf-notes.md "Session 15")
#   none:  runs back to back (BENCHMARKS.md rotates inputs only when they fit in the L2; these do not)
# Prints us per row and method, GB/s, the ratio to the copy ceiling timed the same way, and fp8 / bf16 tokens/s.
import os
import torch
from probe_timing import FLUSH, median_us, graphed, plain_read
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun
import peers

METHODS = ("dirty", "clean", "none")
clean_read = plain_read(FLUSH, block=8192) if os.environ.get("PROBE_CLEAN") == "triton" else FLUSH.max


def flush(method):
    if method == "dirty":
        FLUSH.zero_()
    elif method == "clean":
        clean_read()


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
