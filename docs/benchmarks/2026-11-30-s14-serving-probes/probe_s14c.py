# Session 14 probe: what the ~8-9 us that flashgate loses after a clean L2 flush (probe_s14b: "clean" against
# "none", cuDNN loses < 1 us) is spent on. After reading a 256 MB buffer (the L2 cold, no dirty lines), the
# timed replay is preceded, untimed, by:
#   meta: reads of the op's small inputs (queries, block table, lengths, offsets) into the L2
#   code: the same op on a tiny problem (the kernel's code, parameters and launch path warm)
#   both: both
# and compared with back-to-back replays (none) and the bare clean flush. Rounds alternate.
import os, sys, torch
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun
import peers
import flashgate

FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def touch(tensors):
    for x in tensors:
        x.reshape(-1).view(torch.uint8).max()


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


def graphed(fn):
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


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


rows = [("decode", r) for r in DECODE_ROWS if r.name in ("B128 ctx 1024", "B8 ctx 32768")] + \
       [("paged", r) for r in PAGED_ROWS if r.name in ("B128 ctx 1024", "B1 ctx 131072", "B64 ctx 4096")]
methods = ("none", "clean", "clean+meta", "clean+code", "clean+both")
print("| case | contender | " + " | ".join(f"{m} us" for m in methods) + " |", flush=True)
for op, row in rows:
    t = benchrun.serving_inputs(row, None)
    N, L, H, D = row.batch, row.context, row.H, row.D
    if op == "decode":
        kp, vp = t["k_real"].reshape(1, N * L, H, D), t["v_real"].reshape(1, N * L, H, D)
        q = t["q"].view(1, N, row.HQ, D)
        cu = torch.arange(0, N * L + 1, L, device="cuda", dtype=torch.int32)
        fn = lambda: flashgate.attn_decoding_one_step(q, kp, vp, cu_seqlens=cu)[0]
        meta = [q, cu]
    else:
        fn = benchrun.flashgate_paged(row, t, None)
        meta = [t["q"], t["block_table"], t["seq_lens_k"], t["cu_seqlens_q"]]
    warm = tiny(op)
    contenders = {"flashgate": (fn, meta, warm)}
    if row.name == "B128 ctx 1024" and op == "decode":
        cq = t["q_bhld"]
        contenders["cuDNN"] = (peers.sdpa_decode("CUDNN_ATTENTION")(row, t), [cq], lambda: None)
    for name, (f, meta_t, warm_fn) in contenders.items():
        g = graphed(f)
        before = {"none": lambda: None,
                  "clean": lambda: FLUSH.max(),
                  "clean+meta": lambda: (FLUSH.max(), touch(meta_t)),
                  "clean+code": lambda: (FLUSH.max(), warm_fn()),
                  "clean+both": lambda: (FLUSH.max(), touch(meta_t), warm_fn())}
        res = {m: [] for m in methods}
        for _ in range(3):
            for m in methods:
                res[m].append(median_us(g, before[m]))
        print(f"| {op} bf16 {row.name} | {name} | " +
              " | ".join(", ".join(f"{x:.1f}" for x in res[m]) for m in methods) + " |", flush=True)
    del t, contenders
    torch.cuda.empty_cache()
