"""fp32 torch reference on a slice of heads: the correctness gate every contender passes before timing."""
import math

import torch


def attention_slice(row, t, batch=0, heads=(0, 1)):
    """o[batch, :, heads, :] in fp32 for a training row (causal, window, gate, sink, packed) -> [T, len(heads), V]."""
    q, k, v = t["q"][batch].float(), t["k"][batch].float(), t["v"][batch].float()
    T = q.shape[0]
    G = row.HQ // row.H
    scale = 1 / math.sqrt(row.K)
    lens = row.packed if row.packed else [T]
    outs = []
    for h in heads:
        o = torch.zeros(T, row.V, device=q.device)
        start = 0
        for L in lens:
            if L == 0:
                continue
            sl = slice(start, start + L)
            s = scale * q[sl, h] @ k[sl, h // G].T
            i = torch.arange(L, device=q.device)
            vis = i[:, None] >= i[None, :]
            if row.window is not None:
                vis &= (i[:, None] - i[None, :]) < row.window
            if "g" in t:
                gc = t["g"][batch, sl, h].float().cumsum(0)
                s = s + gc[:, None] - gc[None, :]
            s = s.masked_fill(~vis, -math.inf)
            if "sink" in t:  # the GPT-OSS way: a sink column joins the softmax, then is dropped
                sink_col = t["sink"][h].float().expand(L, 1)
                p = torch.softmax(torch.cat([s, sink_col], dim=1), dim=1)[:, :-1]
            else:
                p = torch.softmax(s, dim=1)
            o[sl] = p @ v[sl, h // G]
            start += L
        outs.append(o)
    return torch.stack(outs, dim=1)


def decode_slice(q, k_ctx, v_ctx, HQ, H, seq=0):
    """Decode output of sequence `seq` for all heads: q [N,HQ,D], k_ctx/v_ctx [N,L,H,D] -> [HQ, D] fp32."""
    G = HQ // H
    qs = q[seq].float()
    ks = k_ctx[seq].float().repeat_interleave(G, dim=1)  # [L, HQ, D]
    vs = v_ctx[seq].float().repeat_interleave(G, dim=1)
    s = torch.einsum("hd,lhd->hl", qs, ks) / math.sqrt(q.shape[-1])
    return torch.einsum("hl,lhd->hd", torch.softmax(s, dim=1), vs)
