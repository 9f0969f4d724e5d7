# Session 15 probe (run 2): run 1 showed the ~8 us that flashgate loses after another reading kernel is not tied
# to its data (the same op on another cache just before: no loss; a plain full read of its own K/V: the loss).
# Is it the cache's access pattern? flashgate streams the token-major cache (a kv head's 256-byte row every
# 2 KB); cuDNN reads head-major [B, H, L, D] (contiguous 256 KB per head). Both run here on both layouts (same
# values, strided views), timed back to back (none), after an 8 MB read (read8) and after a full plain read of
# the K/V they stream (readA). Rounds alternate.
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH, graphed, header, rounds_after, table_row  # noqa: E402
from rows import DECODE_ROWS, PAGED_ROWS  # noqa: E402
import run as benchrun  # noqa: E402
import flashgate  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
import torch.nn.functional as F  # noqa: E402


row = [r for r in DECODE_ROWS if r.name == "B128 ctx 1024"][0]
prow = [r for r in PAGED_ROWS if r.name == "B128 ctx 1024"][0]
N, L, H, D, HQ = row.batch, row.context, row.H, row.D, row.HQ
t = benchrun.serving_inputs(row, None)
k_tm, v_tm = t["k_real"], t["v_real"]                    # [N, L, H, D] token-major
k_hm, v_hm = t["k_bhld"], t["v_bhld"]                    # [N, H, L, D] head-major
q1 = t["q"].view(1, N, HQ, D)
cu = torch.arange(0, N * L + 1, L, device="cuda", dtype=torch.int32)


# head-major packed view [1, N*L, H, D] whose heads are outermost: a [H, N*L, D] buffer permuted
k_hm_flat = k_hm.permute(1, 0, 2, 3).reshape(H, N * L, D).contiguous()
v_hm_flat = v_hm.permute(1, 0, 2, 3).reshape(H, N * L, D).contiguous()


def cudnn(k, v):  # k, v: [N, H, L, D] views
    q = t["q_bhld"]

    def fwd():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return fwd


cases = {
    "flashgate token-major": (lambda: flashgate.attn_decoding_one_step(
        q1, k_tm.reshape(1, N * L, H, D), v_tm.reshape(1, N * L, H, D), cu_seqlens=cu)[0], [k_tm, v_tm]),
    "flashgate head-major": (lambda: flashgate.attn_decoding_one_step(
        q1, k_hm_flat.permute(1, 0, 2)[None], v_hm_flat.permute(1, 0, 2)[None], cu_seqlens=cu)[0],
        [k_hm_flat, v_hm_flat]),
    "cuDNN head-major": (cudnn(k_hm, v_hm), [k_hm, v_hm]),
    "cuDNN token-major": (cudnn(k_tm.transpose(1, 2), v_tm.transpose(1, 2)), [k_tm, v_tm]),
}
# paged, vLLM layout against a head-major cache with the same pages (each kv head's page one 4 KB run)
tp = benchrun.serving_inputs(prow, None)
kc, vc = tp["k_cache"], tp["v_cache"]                   # [NB, BS, H, D]
kc_hm, vc_hm = kc.permute(2, 0, 1, 3).contiguous(), vc.permute(2, 0, 1, 3).contiguous()  # [H, NB, BS, D]


def fg_paged(k, v):
    return lambda: flashgate.paged_attention(tp["q"], k, v, tp["block_table"], tp["seq_lens_k"], tp["cu_seqlens_q"])


cases["paged vLLM layout"] = (fg_paged(kc, vc), [kc, vc])
cases["paged head-major"] = (fg_paged(kc_hm.permute(1, 2, 0, 3), vc_hm.permute(1, 2, 0, 3)), [kc_hm, vc_hm])

methods = ["none", "read8", "readA"]
print(header("| contender", methods), flush=True)
for name, (fn, xs) in cases.items():
    g = graphed(fn)
    rd = [x.reshape(-1).view(torch.uint8) for x in xs if x.is_contiguous()]
    before = {"none": lambda: None, "read8": lambda: FLUSH[:8 << 20].max(),
              "readA": lambda: [x.max() for x in rd]}
    print(table_row(name, rounds_after(g, {m: before[m] for m in methods})), flush=True)
