# Session 15 probe (run 4): runs 1-3 showed flashgate's decode is ~8 us faster right after a full run of its own
# kernel (any cache) than after any other reading kernel, with the same SM clock, the same CTA placement and
# either cache layout. Which preceding kernels leave the slow state? Decode bf16 B128/1024 on cache A (and cuDNN
# for reference), timed by CUDA events after (untimed):
#   none        nothing (back to back: the op itself ran last)
#   read8       an 8 MB contiguous read (torch max)
#   empty264    a Triton kernel of 264 programs that does nothing (every SM runs some other kernel)
#   spin        a Triton kernel of 264 programs that computes ~100 us and touches no memory
#   short_ours  the same op on 64 keys per sequence (its kernel on every SM, ~10 us)
#   paged_ours  flashgate's paged op on another cache of the same size (another plan of the same kernel family)
#   cudnn       cuDNN's decode on another cache of the same size
#   ours_read8  the same op on cache B, then the 8 MB read
# Rounds alternate.
import os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
import triton
import triton.language as tl
from probe_timing import FLUSH, graphed  # noqa: E402
from decode_after import print_after  # noqa: E402
from rows import PAGED_ROWS, DECODE_ROWS  # noqa: E402
import run as benchrun  # noqa: E402
import peers  # noqa: E402
import flashgate  # noqa: E402


@triton.jit
def spin_kernel(out_ptr, n_iter):
    x = tl.program_id(0).to(tl.float32)
    for _ in range(n_iter):
        x = x * 1.000001 + 0.5
    tl.store(out_ptr + tl.program_id(0), x, mask=x < -1e30)  # never stores: keeps the loop live


sink = torch.empty(264, device="cuda")
empty264 = lambda: spin_kernel[(264,)](sink, 0)
spin = lambda: spin_kernel[(264,)](sink, 40000)

row = [r for r in DECODE_ROWS if r.name == "B128 ctx 1024"][0]
prow = [r for r in PAGED_ROWS if r.name == "B128 ctx 1024"][0]
N, L, H, D, HQ = row.batch, row.context, row.H, row.D, row.HQ
ta, tb = benchrun.serving_inputs(row, None), benchrun.serving_inputs(row, None)
tp = benchrun.serving_inputs(prow, None)
cu64 = torch.arange(0, N * 64 + 1, 64, device="cuda", dtype=torch.int32)
k64 = ta["k_real"][:, :64].reshape(1, N * 64, H, D).contiguous()
v64 = ta["v_real"][:, :64].reshape(1, N * 64, H, D).contiguous()
q1 = ta["q"].view(1, N, HQ, D)
short_ours = lambda: flashgate.attn_decoding_one_step(q1, k64, v64, cu_seqlens=cu64)[0]
fb = benchrun.flashgate_decode(row, tb)
gb = graphed(fb)
before = {"none": lambda: None, "read8": lambda: FLUSH[:8 << 20].max(), "empty264": empty264, "spin": spin,
          "short_ours": graphed(short_ours), "paged_ours": graphed(benchrun.flashgate_paged(prow, tp, None)),
          "cudnn": graphed(peers.sdpa_decode("CUDNN_ATTENTION")(row, tb)),
          "ours_read8": lambda: (gb(), FLUSH[:8 << 20].max())}
torch.cuda.synchronize()
t0 = time.perf_counter()
spin()
torch.cuda.synchronize()
print(f"spin takes ~{(time.perf_counter() - t0) * 1e6:.0f} us (host-timed)")
print_after(before, ta)
