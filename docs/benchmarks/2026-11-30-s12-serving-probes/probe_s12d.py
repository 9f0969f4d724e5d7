# Session 12 probe 3: which property of the paged cache sets paged bf16 B128/1024's rate: the pages' random
# placement (identity table, or each sequence's pages sorted by address), or the head layout (head-major).
import os, sys, torch
sys.path.insert(0, "bench")
from measure import graph_median_ms
from rows import PAGED_ROWS
import run as benchrun
import flashgate

def head_major(x):
    return x.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)

rows = {r.name: r for r in PAGED_ROWS}
for name in ("B128 ctx 1024", "B1 ctx 131072"):
    row = rows[name]
    for fp8 in (None, "per-tensor"):
        t = benchrun.serving_inputs(row, fp8)
        nbytes = row.kv_bytes(2 if fp8 is None else 1)
        tag = f"{name} {'bf16' if fp8 is None else 'fp8'}"
        N = row.batch
        bt_random = t["block_table"]
        blocks = bt_random.shape[1]
        bt_sorted = torch.sort(bt_random, dim=1).values.contiguous()
        # identity placement: sequence n's pages are n*blocks .. (n+1)*blocks-1 (cache rewritten to match)
        perm = bt_random.reshape(-1).long()
        kc, vc = t["k_cache"], t["v_cache"]
        k_id, v_id = kc[perm].contiguous(), vc[perm].contiguous()
        bt_id = torch.arange(N * blocks, device="cuda", dtype=torch.int32).view(N, blocks)
        cases = [("random", kc, vc, bt_random), ("sorted per sequence", kc, vc, bt_sorted),
                 ("identity", k_id, v_id, bt_id), ("head-major random", head_major(kc), head_major(vc), bt_random)]
        ref = None
        for label, k, v, bt in cases:
            for mode in ("1", "0") if fp8 is None else ("1",):
                os.environ["FLASHGATE_HEADS_AT_ONCE"] = mode
                fn = lambda: flashgate.paged_attention(t["q"], k, v, bt, t["seq_lens_k"], t["cu_seqlens_q"],
                                                       k_scale=t.get("k_scale"), v_scale=t.get("v_scale"))
                o = fn(); torch.cuda.synchronize()
                tm = graph_median_ms(fn)
                ref = o if ref is None else ref
                diff = (o.float() - ref.float()).abs().max().item()
                print(f"{tag} {label} at_once={mode}: {tm*1e3:.1f} us {nbytes/tm/1e6:.0f} GB/s (max diff {diff:.2e})", flush=True)
        del t, k_id, v_id
        torch.cuda.empty_cache()
