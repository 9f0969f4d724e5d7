# Session 12 probe 2: does the KV layout (token-major [.., H, D] as vLLM/FLA vs head-major) set the short rows'
# rate? cuDNN on both layouts, flashgate decode and paged on both (strided views, the same bytes).
import sys, torch
sys.path.insert(0, "bench")
from measure import graph_median_ms
from rows import PAGED_ROWS
import run as benchrun
import flashgate
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

def head_major(x, dims):  # same logical tensor, memory ordered with the head dim (index 2 of [*, *, H, D]) outermost
    return x.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)

def timed(label, fn, nbytes):
    try:
        fn(); torch.cuda.synchronize()
        t = graph_median_ms(fn)
        print(f"{label}: {t*1e3:.1f} us {nbytes/t/1e6:.0f} GB/s", flush=True)
        return fn()
    except Exception as e:
        print(f"{label}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)

rows = {r.name: r for r in PAGED_ROWS}
for name in ("B128 ctx 1024", "B1 ctx 131072", "B64 ctx 4096"):
    row = rows[name]
    for fp8 in (None, "per-tensor"):
        t = benchrun.serving_inputs(row, fp8)
        nbytes = row.kv_bytes(2 if fp8 is None else 1)
        tag = f"{name} {'bf16' if fp8 is None else 'fp8'}"
        N, L, H, D = row.batch, row.context, row.H, row.D
        if fp8 is None:
            q4 = t["q_bhld"]
            kt, vt = t["k_real"].transpose(1, 2), t["v_real"].transpose(1, 2)  # [B,H,L,D] views of token-major
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                a = timed(f"{tag} cuDNN head-major", lambda: F.scaled_dot_product_attention(q4, t["k_bhld"], t["v_bhld"], enable_gqa=True), nbytes)
                b = timed(f"{tag} cuDNN token-major", lambda: F.scaled_dot_product_attention(q4, kt, vt, enable_gqa=True), nbytes)
            q = t["q"].view(1, N, row.HQ, D)
            cu = torch.arange(0, N * L + 1, L, device="cuda", dtype=torch.int32)
            kp, vp = t["k_real"].reshape(1, N * L, H, D), t["v_real"].reshape(1, N * L, H, D)
            kh = t["k_real"].reshape(N * L, H, D).permute(1, 0, 2).contiguous().permute(1, 0, 2).unsqueeze(0)
            vh = t["v_real"].reshape(N * L, H, D).permute(1, 0, 2).contiguous().permute(1, 0, 2).unsqueeze(0)
            o1 = timed(f"{tag} flashgate decode token-major", lambda: flashgate.attn_decoding_one_step(q, kp, vp, cu_seqlens=cu)[0], nbytes)
            o2 = timed(f"{tag} flashgate decode head-major", lambda: flashgate.attn_decoding_one_step(q, kh, vh, cu_seqlens=cu)[0], nbytes)
            if o1 is not None and o2 is not None: print("  decode layouts agree:", (o1.float() - o2.float()).abs().max().item())
            del kh, vh
        kc, vc = t["k_cache"], t["v_cache"]
        khc, vhc = head_major(kc, 0), head_major(vc, 0)
        f = lambda k, v: (lambda: flashgate.paged_attention(t["q"], k, v, t["block_table"], t["seq_lens_k"], t["cu_seqlens_q"],
                                                             k_scale=t.get("k_scale"), v_scale=t.get("v_scale")))
        o1 = timed(f"{tag} flashgate paged token-major", f(kc, vc), nbytes)
        o2 = timed(f"{tag} flashgate paged head-major", f(khc, vhc), nbytes)
        if o1 is not None and o2 is not None: print("  paged layouts agree:", (o1.float() - o2.float()).abs().max().item())
        del t, khc, vhc
        torch.cuda.empty_cache()
