# Session 12 probe: read floors in the benchmark's harness, and cuDNN's decode kernels' shape.
import sys, torch
sys.path.insert(0, "bench")
from measure import graph_median_ms, ceilings
which = sys.argv[1] if len(sys.argv) > 1 else "all"
if which == "all":
    c = ceilings(); print("copy GB/s", round(c["copy_gbps"]))
for mb in ((268, 537, 1074) if which == "all" else ()):
    n = mb * 1000 * 1000 // 4 // 4096 * 4096
    x = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    t = graph_median_ms(lambda: x.sum())
    t2 = graph_median_ms(lambda: torch.amax(x.view(-1, 1024), dim=1))
    print(f"read {n*4/1e6:.0f} MB: sum {t*1e3:.1f} us ({n*4/t/1e6:.0f} GB/s), row amax {t2*1e3:.1f} us ({n*4/t2/1e6:.0f} GB/s)")
    del x
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
for B, L in ((128, 1024), (1, 131072), (8, 32768)):
    q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, 8, L, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    f = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        if which == "all":
            t = graph_median_ms(f)
            print(f"cudnn B{B}/{L}: {t*1e3:.1f} us {2*k.numel()*2/t/1e6:.0f} GB/s")
        f()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"cudnn{B}")
        for _ in range(3): f()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    del q, k, v
