"""Timing, ceilings, environment and the correctness gate used by the benchmark."""
import json
import math
import os
import platform
import subprocess

import torch


def median_ms(fn, warmup_ms=25, rep_ms=100):
    """Median time of fn() in ms: CUDA events, L2 flushed between runs (triton's do_bench)."""
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


class GraphReplay:
    """A captured CUDA graph, called to replay it. It holds the captured callable too: the graph reads tensors
    that the callable's closure may own (e.g. index tensors it built), which must outlive every replay."""

    def __init__(self, graph, fn):
        self.graph, self.fn = graph, fn

    def __call__(self):
        self.graph.replay()


def graph_replay(fn):
    """fn() captured in a CUDA graph; returns its replay (a call that launches the whole graph)."""
    fn()  # warm-up outside capture (allocations, autotuning, module load)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return GraphReplay(graph, fn)


def graph_median_ms(fn, rep_ms=100):
    """Median time of one replay of a CUDA graph that captured fn() (for small launches: decode)."""
    return median_ms(graph_replay(fn), rep_ms=rep_ms)


def back_to_back_ms(fn, reps=100, warmup=5):
    """Median time of fn() in ms over calls that run back to back, each timed by its own CUDA events, with no L2
    flush between them. BENCHMARKS.md asks only that inputs which fit the 60 MB L2 be rotated; every serving row's
    are several times it. do_bench's flush, a 256 MB fill, leaves dirty lines whose write-back the next call pays."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in zip(starts, ends))
    return times[len(times) // 2]


def ceilings():
    """bf16 8192^3 matmul TFLOP/s and 2 GiB device-to-device copy GB/s (bytes read + written), this run; the copy
    also timed back to back (the serving rows' second timing)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = median_ms(lambda: a @ b)
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    cp_ms = median_ms(lambda: dst.copy_(src))
    cp_b2b_ms = back_to_back_ms(lambda: dst.copy_(src), reps=20)
    return {"matmul_bf16_tflops": 2 * 8192 ** 3 / (mm_ms * 1e-3) / 1e12,
            "copy_gbps": 2 * src.numel() / (cp_ms * 1e-3) / 1e9,
            "copy_gbps_back_to_back": 2 * src.numel() / (cp_b2b_ms * 1e-3) / 1e9}


def environment(argv):
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:  # noqa: BLE001
            return ""
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = None
    try:
        import flashgate
        fg_version = flashgate.__version__
    except Exception as e:  # noqa: BLE001
        fg_version = f"not importable: {e}"
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name, "sms": props.multi_processor_count,
        "driver": run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cuda": torch.version.cuda, "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "triton": triton_version,
        "flashgate": fg_version, "python": platform.python_version(),
        "git": os.environ.get("FLASHGATE_GIT_REV") or run(["git", "rev-parse", "--short", "HEAD"]),
        "command": recorded_command(argv),
    }


def recorded_command(argv, launcher="python3"):
    """The command line as a record gives it, without machine paths: the script relative to the repository, the
    output folder written as OUT."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [os.path.relpath(os.path.abspath(argv[0]), root)] + list(argv[1:])
    for i, a in enumerate(args[:-1]):
        if a == "--out":
            args[i + 1] = "OUT"
    return " ".join([launcher] + args)


def relative_rms(out, ref):
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30))


def dump_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)
