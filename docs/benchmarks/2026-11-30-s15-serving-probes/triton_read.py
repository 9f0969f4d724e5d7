# The session 15 probes' plain read: a Triton kernel whose 264 programs each sum their share of an int8 buffer
# and store one partial (no atomics, no cross-program reduction), i.e. a read of the buffer that is not a torch
# reduction (see probe_s15_reduce.py for why that matters).
import torch
import triton
import triton.language as tl


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
