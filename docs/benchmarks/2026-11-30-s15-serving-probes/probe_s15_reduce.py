# Session 15 probe (run 5): run 4 found that only torch reductions (`x.max()`, as every "reading kernel" of the
# session 14 probes was) leave flashgate's decode ~8 us slower; a full cuDNN decode, the op itself, flashgate's
# paged op, Triton kernels that compute or do nothing did not. Which part of a torch reduction? Decode bf16
# B128/1024 on cache A (cuDNN for reference) after (untimed):
#   none         nothing
#   max8         FLUSH[:8 MB].max(): a full reduction (grid-wide partials, semaphores, last CTA finishes)
#   rowmax8      the same 8 MB reduced per row of 1024 bytes (8192 outputs: no cross-CTA reduction)
#   max_tiny     a full max over 1024 bytes (one CTA)
#   copy8        an 8 MB device copy (elementwise read + write)
#   triton_sum8  a Triton kernel: 264 programs read 8 MB and store one partial each (no atomics)
#   triton_atomic 264 programs each atomically add to one word (atomics, no reads)
#   fill8        FLUSH[:8 MB].zero_() (writes: dirty lines, like do_bench's flush at 1/32 of its size)
# Rounds alternate.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
import triton
import triton.language as tl
from probe_timing import FLUSH, plain_read  # noqa: E402
from decode_after import print_after  # noqa: E402


@triton.jit
def atomic_kernel(out_ptr):
    tl.atomic_add(out_ptr, 1)


word = torch.zeros(264, dtype=torch.int32, device="cuda")
buf8 = FLUSH[:8 << 20]
dst8 = torch.empty_like(buf8)
before = {"none": lambda: None, "max8": lambda: buf8.max(), "rowmax8": lambda: buf8.view(8192, 1024).amax(1),
          "max_tiny": lambda: buf8[:1024].max(), "copy8": lambda: dst8.copy_(buf8),
          "triton_sum8": plain_read(buf8),
          "triton_atomic": lambda: atomic_kernel[(264,)](word), "fill8": lambda: buf8.zero_()}
print_after(before)
