# Session 15 probe (run 6): run 5 found that even a one-CTA torch reduction (max over 1 KB) leaves flashgate's
# decode ~8 us slower, while Triton kernels, cuDNN, torch copies and flashgate itself do not. Do the kernels
# that precede attention in a model do it? Decode bf16 B128/1024 on cache A (cuDNN for reference) after (untimed):
#   none        nothing
#   max_tiny    torch max over 1 KB (run 5's trigger)
#   sum_tiny    torch sum over 1 KB (another reduction)
#   gemm        a bf16 GEMM [128 x 4096] x [4096 x 6144] (cuBLAS; a QKV projection of the batch)
#   rms_norm    F.rms_norm over [128, 4096] bf16
#   layer_norm  F.layer_norm over [128, 4096] bf16
#   softmax     softmax over [128, 4096] fp32
#   rope_like   an elementwise multiply-add over [128, 40, 128] bf16 (as rotary embeddings are)
# Rounds alternate.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
import torch.nn.functional as F
from probe_timing import FLUSH  # noqa: E402
from decode_after import print_after  # noqa: E402

x = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 6144, device="cuda", dtype=torch.bfloat16)
g = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
xf = torch.randn(128, 4096, device="cuda")
r = torch.randn(128, 40, 128, device="cuda", dtype=torch.bfloat16)
c = torch.randn_like(r)
before = {"none": lambda: None, "max_tiny": lambda: FLUSH[:1024].max(), "sum_tiny": lambda: FLUSH[:1024].sum(),
          "gemm": lambda: x @ w, "rms_norm": lambda: F.rms_norm(x, (4096,), g),
          "layer_norm": lambda: F.layer_norm(x, (4096,)), "softmax": lambda: xf.softmax(-1),
          "rope_like": lambda: r * c + r}
print_after(before)
