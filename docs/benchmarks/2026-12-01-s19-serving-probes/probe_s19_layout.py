"""Session 19 probe: the paged rows of the benchmark with the same cache in vLLM's layout ([blocks, slots, H, D]: a
kv head's row is one 128-byte (fp8) or 256-byte (bf16) run every H rows) and head-major through strides ([blocks, H,
slots, D] viewed as [blocks, slots, H, D]: a head's page is one run). Tells whether the fp8 decode kernel, its compute
now hidden under its loads (the 8-row tile), is held by the short runs of vLLM's layout. Run from the repository root
with the package on PYTHONPATH; prints ms after do_bench's flush / back to back, and whether the outputs agree."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench"))
import measure  # noqa: E402
import run  # noqa: E402
from rows import PAGED_ROWS  # noqa: E402

import flashgate  # noqa: E402


def head_major(cache):
    return cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # same shape, a head's page contiguous


for row in [r for r in PAGED_ROWS if r.q_len == 1]:
    for fp8 in (None, "per-tensor", "per-token"):
        t = run.serving_inputs(row, fp8)
        outs, line = {}, []
        for layout in ("vllm", "head-major"):
            k, v = (t["k_cache"], t["v_cache"]) if layout == "vllm" else (head_major(t["k_cache"]), head_major(t["v_cache"]))

            def fwd(k=k, v=v):
                return flashgate.paged_attention(t["q"], k, v, t["block_table"], t["seq_lens_k"], t["cu_seqlens_q"],
                                                 k_scale=t.get("k_scale"), v_scale=t.get("v_scale"), max_seqlen_q=1)
            outs[layout] = fwd()
            replay = measure.graph_replay(fwd)
            line.append(f"{layout} {measure.median_ms(replay):.4f} / {measure.back_to_back_ms(replay):.4f}")
        same = torch.equal(outs["vllm"], outs["head-major"])
        print(f"{row.name:16s} {fp8 or 'bf16':10s} " + "  ".join(line) + f"  outputs equal: {same}", flush=True)
        del t, outs
        torch.cuda.empty_cache()
