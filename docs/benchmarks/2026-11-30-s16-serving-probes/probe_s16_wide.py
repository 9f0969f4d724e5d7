# Session 16 probe (run 10): does a shallow ring help the wider fp8 tiles too? fp8 D128 streams faster at 2 stages
# than 3 (runs 5-6); here fp8 K = V = 256 (GQA 32/8, B16 ctx 4096, 268 MB) and K576 / V512 (MLA-like: 16 query heads
# on 1 kv head, B64 ctx 4096, 285 MB), per tensor and per token, pages of 16, shuffled block table, at the
# planner's depth and forced 2, 3 and 4 stages (FLASHGATE_SERVING_STAGES), CUDA-graph replays after do_bench's kind
# of flush (dirty) and back to back (none). The planner's depths: see the first column (0).
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, capture_under, header, rounds_after, table_row  # noqa: E402
import flashgate  # noqa: E402


def inputs(N, L, HQ, H, K, V, mode, BS=16):
    """A shuffled fp8 paged cache with per-tensor or per-token scales ([num_blocks, H, BS])."""
    blocks = L // BS
    perm = torch.randperm(N * blocks, device="cuda", dtype=torch.int32)
    t = {"q": torch.randn(N, HQ, K, device="cuda", dtype=torch.bfloat16),
         "block_table": perm.view(N, blocks).contiguous(),
         "seq_lens_k": torch.full((N,), L, device="cuda", dtype=torch.int32),
         "cu_seqlens_q": torch.arange(0, N + 1, device="cuda", dtype=torch.int32)}
    for name, D in (("k", K), ("v", V)):
        x = torch.randn(N * blocks, BS, H, D, device="cuda", dtype=torch.bfloat16)
        if mode == "per-tensor":
            s = x.float().abs().amax() / 448
            t[name + "_scale"] = s.reshape(1)
        else:
            s = x.float().abs().amax(-1, keepdim=True) / 448  # [NB, BS, H, 1]
            t[name + "_scale"] = s[..., 0].transpose(1, 2).contiguous()
        t[name + "_cache"] = (x.float() / s).to(torch.float8_e4m3fn)
        del x
    return t


SETTINGS = [(0,), (2,), (3,), (4,)]
before = {"dirty": lambda: FLUSH.zero_(), "none": lambda: None}
print(header("| case | stages", before), flush=True)
for label, shape in (("K256 V256, GQA 32/8, B16 ctx 4096", (16, 4096, 32, 8, 256, 256)),
                     ("K576 V512, 16 q heads / 1 kv head, B64 ctx 4096", (64, 4096, 16, 1, 576, 512))):
    for mode in ("per-tensor", "per-token"):
        t = inputs(*shape, mode)

        def make():
            return lambda: flashgate.paged_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"],
                                                     t["seq_lens_k"], t["cu_seqlens_q"], k_scale=t["k_scale"],
                                                     v_scale=t["v_scale"])
        captured = capture_under(("FLASHGATE_SERVING_STAGES",), SETTINGS, make)
        ref = captured[(0,)][0]
        for st, (out, g) in captured.items():
            diff = float((out - ref).abs().max())
            print(table_row(f"fp8 {mode} {label} | {st[0]} (max diff to planner {diff:.2g})", rounds_after(g, before)),
                  flush=True)
        t = captured = None
        torch.cuda.empty_cache()
