"""An fp64 torch reference for the four ops (SPEC 3-6), differentiable through torch.autograd, written
independently of the library: dense score matrices per sequence, all heads at once. Runs on whatever device
its inputs live on; callers pass float64 tensors (the library's inputs upcast, so both see the same values)."""

import torch


def api_scale(scale, K):
    """The scale the library uses: the C++ API carries it as a float32 (default 1/sqrt(K))."""
    return float(torch.tensor(K ** -0.5 if scale is None else scale, dtype=torch.float32))


def segments(B, T, cu_seqlens):
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return [(0, s, e) for s, e in zip(cu[:-1], cu[1:])]


def visible(L_q, L_k, window, q_offset, device):
    """[L_q, L_k]: query i (absolute position q_offset + i) sees key j <= its position, within the window."""
    pos = q_offset + torch.arange(L_q, device=device)[:, None]
    j = torch.arange(L_k, device=device)[None, :]
    mask = j <= pos
    if window is not None:
        mask = mask & ((pos - j) < window)
    return mask


def softmax_with_sink(S, mask, sink):
    """S [..., HQ, Lq, Lk] scores, mask broadcastable to S, sink [HQ] or None -> P like S, lse [..., HQ, Lq].
    Rows with no visible key and no sink get P = 0 and lse = -inf, with zero (not NaN) gradients."""
    S = S.masked_fill(~mask, float("-inf"))
    if sink is None:
        empty = ~mask.any(dim=-1, keepdim=True)
        full = S.masked_fill(empty, 0.0)  # keeps logsumexp finite on empty rows
        lse = torch.logsumexp(full, dim=-1)
        P = torch.exp(S - lse[..., None])
        return P, lse.masked_fill(empty[..., 0], float("-inf"))
    sink_col = sink[:, None, None].expand(*S.shape[:-1], 1)
    lse = torch.logsumexp(torch.cat([S, sink_col], dim=-1), dim=-1)
    return torch.exp(S - lse[..., None]), lse


def attention(q, k, v, g=None, sink=None, scale=None, window=None, cu_seqlens=None):
    """SPEC 3: o [B,T,HQ,V], lse [B,T,HQ]. Every sequence is padded to the longest one and all of them are
    computed as one batch (fast for many short packed sequences too); padding keys are masked and padding
    queries dropped."""
    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    G = HQ // H
    scale = api_scale(scale, K)
    segs = segments(B, T, cu_seqlens)
    lengths = torch.tensor([e - s for _, s, e in segs], device=q.device)
    L = max(int(lengths.max()), 1) if len(segs) else 1
    # Flat time index of each padded slot, and for each flat position its (sequence, offset).
    starts = torch.tensor([b * T + s for b, s, _ in segs], device=q.device)
    offsets = torch.arange(L, device=q.device)
    slot = (starts[:, None] + offsets[None, :]).clamp(max=B * T - 1)  # [N, L]
    key_valid = offsets[None, :] < lengths[:, None]  # [N, L]
    seq_of = torch.repeat_interleave(torch.arange(len(segs), device=q.device), lengths)
    pos_of = torch.arange(B * T, device=q.device) - torch.repeat_interleave(starts, lengths)

    def padded(x):  # [B,T,...] -> [N, L, ...]
        return x.reshape(B * T, *x.shape[2:])[slot]

    qp = padded(q).permute(0, 2, 1, 3)  # [N, HQ, L, K]
    kp = padded(k).repeat_interleave(G, dim=2).permute(0, 2, 1, 3)
    vp = padded(v).repeat_interleave(G, dim=2).permute(0, 2, 1, 3)
    S = scale * qp @ kp.transpose(-1, -2)  # [N, HQ, L, L]
    if g is not None:
        Gc = (padded(g) * key_valid[..., None]).cumsum(dim=1).permute(0, 2, 1)  # [N, HQ, L]
        S = S + Gc[..., :, None] - Gc[..., None, :]
    mask = visible(L, L, window, 0, q.device)[None, None] & key_valid[:, None, None, :]
    P, lse = softmax_with_sink(S, mask, sink)
    o = (P @ vp).permute(0, 2, 1, 3)  # [N, L, HQ, V]
    lse = lse.permute(0, 2, 1)  # [N, L, HQ]
    return o[seq_of, pos_of].reshape(B, T, HQ, V), lse[seq_of, pos_of].reshape(B, T, HQ)


def decode(q, k, v, cu_seqlens, g=None, sink=None, scale=None, window=None, gate_scale=False):
    """SPEC 5: q [N,HQ,K], k [T,H,K], v [T,H,V] -> o [N,HQ,V]."""
    N, HQ, K = q.shape
    H = k.shape[1]
    G = HQ // H
    scale = api_scale(scale, K)
    cu = [int(c) for c in cu_seqlens.tolist()]
    out = []
    for n in range(N):
        s, e = cu[n], cu[n + 1]
        L = e - s
        if L == 0:
            out.append(q.new_zeros(HQ, v.shape[-1]))
            continue
        ks = k[s:e].repeat_interleave(G, dim=1).transpose(0, 1)  # [HQ, L, K]
        vs = v[s:e].repeat_interleave(G, dim=1).transpose(0, 1)
        S = scale * (ks @ q[n][:, :, None]).transpose(1, 2)  # [HQ, 1, L]
        if g is not None:
            Gc = g[s:e].cumsum(0).transpose(0, 1)  # [HQ, L]
            S = S + ((Gc[:, -1:] - Gc) * (scale if gate_scale else 1.0))[:, None, :]
        P, _ = softmax_with_sink(S, visible(1, L, window, L - 1, q.device), sink)
        out.append((P @ vs)[:, 0])
    return torch.stack(out)


def gather_paged(cache, block_table, n, length, scale=None):
    """The first `length` tokens of sequence n from a paged cache, as float64 [length, H, D], dequantized by a
    per-tensor (one element) or per-token [num_blocks, H, block_size] scale."""
    bs = cache.shape[1]
    j = torch.arange(length, device=cache.device)
    blocks = block_table[n, j // bs].long()
    slots = j % bs
    out = cache[blocks, slots].double()
    if scale is not None:
        if scale.numel() == 1:
            out = out * scale.double().reshape(())
        else:
            out = out * scale.double()[blocks, :, slots][:, :, None]
    return out


def paged(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink=None, scale=None, window=None,
          k_scale=None, v_scale=None):
    """SPEC 6 -> o [total_q,HQ,V] float64."""
    total_q, HQ, K = q.shape
    H = k_cache.shape[2]
    G = HQ // H
    scale = api_scale(scale, K)
    cu = [int(c) for c in cu_seqlens_q.tolist()]
    lens = [int(c) for c in seq_lens_k.tolist()]
    o = torch.zeros(total_q, HQ, v_cache.shape[-1], dtype=torch.float64, device=q.device)
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        Lq, Lk = e - s, lens[n]
        if Lq == 0:
            continue
        ks = gather_paged(k_cache, block_table, n, Lk, k_scale).repeat_interleave(G, dim=1).transpose(0, 1)
        vs = gather_paged(v_cache, block_table, n, Lk, v_scale).repeat_interleave(G, dim=1).transpose(0, 1)
        S = scale * q[s:e].double().transpose(0, 1) @ ks.transpose(1, 2)  # [HQ, Lq, Lk]
        P, _ = softmax_with_sink(S, visible(Lq, Lk, window, Lk - Lq, q.device),
                                 None if sink is None else sink.double())
        o[s:e] = (P @ vs).transpose(0, 1)
    return o


def relative_rms(out, ref, floor=0.0):
    """SPEC 7 metric in float64 over the finite reference entries, the denominator floored at `floor`; inf when
    out has a NaN."""
    out, ref = out.detach().double(), ref.detach().double()
    if torch.isnan(out).any():
        return float("inf")
    finite = torch.isfinite(ref)  # infinite entries (-inf lse of empty rows) are compared exactly elsewhere
    if not finite.any():
        return 0.0
    num = float((out - ref)[finite].pow(2).mean().sqrt())
    den = max(float(ref[finite].pow(2).mean().sqrt()), floor)
    return num / den if den > 0 else num


def subnormal_slack(dtype, ref):
    """SPEC 7: where the output dtype cannot represent the reference (fp16 subnormals), the error counts beyond
    twice the reference's own rounding to that dtype (relative to rms(ref), over the finite entries)."""
    ref = ref.detach().double()
    finite = torch.isfinite(ref)
    if dtype != torch.float16 or not finite.any():
        return 0.0
    r = ref[finite]
    tiny = r.abs() < torch.finfo(torch.float16).tiny
    rounding = torch.where(tiny, r.half().double() - r, torch.zeros_like(r))
    den = r.pow(2).mean().sqrt()
    return float(2 * rounding.pow(2).mean().sqrt() / den) if den > 0 else 0.0


def assert_close(name, out, ref, tol, seed=None, floor=0.0):
    """SPEC 7's relative RMS within `tol` (denominator floored at `floor`, fp16 subnormals allowed for)."""
    assert tuple(out.shape) == tuple(ref.shape), f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(out).any(), f"{name}: NaN in output (seed {seed})"
    inf_ref = ~torch.isfinite(ref.detach())
    assert torch.equal(out.detach().double()[inf_ref], ref.detach().double()[inf_ref]), \
        f"{name}: infinite entries differ (seed {seed})"
    err = relative_rms(out, ref, floor)
    slack = subnormal_slack(out.dtype, ref)
    assert err <= tol + slack, f"{name}: relative RMS {err:.3g} > {tol} + {slack:.3g} (fp16 subnormals) (seed {seed})"
