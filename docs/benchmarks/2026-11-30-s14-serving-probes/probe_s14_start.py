# Session 14 probe (runs 3, 4, 6): what the ~8 us that flashgate loses after a clean L2 flush (probe_s14b: "clean"
# against "none"; cuDNN loses < 1 us) is spent on. After reading a 256 MB buffer (the L2 cold, no dirty lines),
# the timed replay is preceded, untimed, by one of these warm-ups (PROBE_WARM, ";"-separated, "+" combines):
#   meta:  reads of the op's small inputs (queries, block table, lengths, offsets) into the L2
#   code:  the same op on a tiny problem (one sequence of 32 keys: the kernel's code and launch path warm)
#   pages: one byte read in every 2 MB of the K and V caches (the address translations warm)
#   grid:  the same op on the same shape with 64 keys per sequence (the same kernel and grid on every SM)
# and compared with back-to-back replays (none) and the bare clean flush. Rounds alternate.
# Run 3: PROBE_WARM="meta;code;meta+code"; run 4: "pages;pages+meta"; run 6: "grid".
import os, torch
from probe_timing import FLUSH, graphed, rounds_after, table_row
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun
import peers
import flashgate


def touch(tensors):
    for x in tensors:
        x.reshape(-1).view(torch.uint8).max()


def touch_pages(tensors):
    for x in tensors:
        x.reshape(-1).view(torch.uint8)[::2 << 20].max()


def tiny(op):
    """The same kernel (bf16, D128, GQA 32/8) on a 1-sequence, 32-key problem."""
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 32, 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cu = torch.tensor([0, 32], device="cuda", dtype=torch.int32)
    if op == "decode":
        return lambda: flashgate.attn_decoding_one_step(q, k, v, cu_seqlens=cu)
    kc, vc = k.view(2, 16, 8, 128), v.view(2, 16, 8, 128)
    bt = torch.tensor([[1, 0]], device="cuda", dtype=torch.int32)
    sl = torch.tensor([32], device="cuda", dtype=torch.int32)
    cuq = torch.tensor([0, 1], device="cuda", dtype=torch.int32)
    return lambda: flashgate.paged_attention(q[0], kc, vc, bt, sl, cuq)


def op_case(op, row, t):
    """flashgate's call on the row, and its warm-ups by name."""
    N, L, H, D = row.batch, row.context, row.H, row.D
    if op == "decode":
        kp, vp = t["k_real"].reshape(1, N * L, H, D), t["v_real"].reshape(1, N * L, H, D)
        q = t["q"].view(1, N, row.HQ, D)
        cu = torch.arange(0, N * L + 1, L, device="cuda", dtype=torch.int32)
        cu64 = torch.arange(0, N * 64 + 1, 64, device="cuda", dtype=torch.int32)
        k64, v64 = kp[:, :N * 64].contiguous(), vp[:, :N * 64].contiguous()
        fn = lambda: flashgate.attn_decoding_one_step(q, kp, vp, cu_seqlens=cu)[0]
        meta, pages = [q, cu], [kp, vp]
        grid = lambda: flashgate.attn_decoding_one_step(q, k64, v64, cu_seqlens=cu64)
    else:
        fn = benchrun.flashgate_paged(row, t, None)
        meta, pages = [t["q"], t["block_table"], t["seq_lens_k"], t["cu_seqlens_q"]], [t["k_cache"], t["v_cache"]]
        sl64 = torch.full_like(t["seq_lens_k"], 64)
        grid = lambda: flashgate.paged_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], sl64,
                                                 t["cu_seqlens_q"])
    return fn, {"meta": lambda: touch(meta), "code": tiny(op), "pages": lambda: touch_pages(pages), "grid": grid}


def cudnn_case(row, t):
    return peers.sdpa_decode("CUDNN_ATTENTION")(row, t), {
        "meta": lambda: touch([t["q_bhld"]]), "code": lambda: None,
        "pages": lambda: touch_pages([t["k_bhld"], t["v_bhld"]]), "grid": lambda: None}


warm = [w for w in os.environ.get("PROBE_WARM", "meta;code;meta+code").split(";") if w]
methods = ["none", "clean"] + [f"clean+{w}" for w in warm]
rows = [("decode", r) for r in DECODE_ROWS if r.name in ("B128 ctx 1024", "B8 ctx 32768")] + \
       [("paged", r) for r in PAGED_ROWS if r.name in ("B128 ctx 1024", "B1 ctx 131072", "B64 ctx 4096")]
print("| case | contender | " + " | ".join(f"{m} us" for m in methods) + " |", flush=True)
for op, row in rows:
    t = benchrun.serving_inputs(row, None)
    contenders = {"flashgate": op_case(op, row, t)}
    if row.name == "B128 ctx 1024" and op == "decode":
        contenders["cuDNN"] = cudnn_case(row, t)
    for name, (f, warmups) in contenders.items():
        g = graphed(f)

        def before(m, warmups=warmups):
            if m == "none":
                return
            FLUSH.max()
            for w in m.split("+")[1:]:
                warmups[w]()
        res = rounds_after(g, {m: (lambda m=m: before(m)) for m in methods})
        print(table_row(f"{op} bf16 {row.name} | {name}", res), flush=True)
    del t, contenders
    torch.cuda.empty_cache()
