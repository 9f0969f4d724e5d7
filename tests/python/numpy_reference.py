"""An fp64 numpy reference for the four ops, written from SPEC 3-6 independently of the C++ library: dense
score matrices per (sequence, head), nothing blocked or online. Inputs are converted to float64 first, so the
reference sees exactly the rounded values the library sees."""

import numpy as np


def f64(a):
    return None if a is None else np.asarray(a).astype(np.float64)


def api_scale(scale, K):
    """The scale the library uses: the C++ API carries it as a float32 (default 1/sqrt(K))."""
    return float(np.float32(K ** -0.5 if scale is None else scale))


def segments(B, T, cu_seqlens):
    """(batch index, start, end) of every sequence."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu_seqlens]
    return [(0, s, e) for s, e in zip(cu[:-1], cu[1:])]


def _visible(L_q, L_k, window, q_offset):
    """Mask [L_q, L_k]: query i (absolute position q_offset + i) sees key j <= position, within the window."""
    pos = q_offset + np.arange(L_q)[:, None]
    j = np.arange(L_k)[None, :]
    mask = j <= pos
    if window is not None:
        mask &= (pos - j) < window
    return mask


def _softmax_rows(S, mask, sink):
    """P, lse for score rows S (masked by `mask`), with an optional sink logit adding mass to the denominator.
    Rows with no visible key and no sink: P = 0, lse = -inf."""
    S = np.where(mask, S, -np.inf)
    cols = [S] if sink is None else [S, np.full((S.shape[0], 1), sink)]
    full = np.concatenate(cols, axis=1)
    m = full.max(axis=1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    Z = np.exp(full - m).sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(Z))
    P = np.where(mask & ~empty, np.exp(S - np.where(empty, 0.0, lse)), 0.0)
    return P, lse[:, 0]


def _scores(qs, ks, scale, gq=None, gk=None):
    S = scale * qs @ ks.T
    if gq is not None:
        S = S + gq[:, None] - gk[None, :]
    return S


def attention(q, k, v, g=None, sink=None, scale=None, window=None, cu_seqlens=None):
    """SPEC 3. Returns o [B,T,HQ,V], lse [B,T,HQ] in float64."""
    q, k, v, g, sink = f64(q), f64(k), f64(v), f64(g), f64(sink)
    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    G = HQ // H
    scale = api_scale(scale, K)
    o = np.zeros((B, T, HQ, V))
    lse = np.full((B, T, HQ), -np.inf)
    for b, s, e in segments(B, T, cu_seqlens):
        L = e - s
        if L == 0:
            continue
        mask = _visible(L, L, window, 0)
        for h in range(HQ):
            Gc = np.cumsum(g[b, s:e, h]) if g is not None else None
            S = _scores(q[b, s:e, h], k[b, s:e, h // G], scale, Gc, Gc)
            P, lse[b, s:e, h] = _softmax_rows(S, mask, None if sink is None else sink[h])
            o[b, s:e, h] = P @ v[b, s:e, h // G]
    return o, lse


def attention_backward(do, q, k, v, g=None, sink=None, scale=None, window=None, cu_seqlens=None):
    """SPEC 4, recomputed from scratch. Returns dq, dk, dv, dg (or None), dsink (or None) in float64."""
    do, q, k, v, g, sink = f64(do), f64(q), f64(k), f64(v), f64(g), f64(sink)
    B, T, HQ, K = q.shape
    H = k.shape[2]
    G = HQ // H
    scale = api_scale(scale, K)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dg = np.zeros((B, T, HQ)) if g is not None else None
    dsink = np.zeros(HQ) if sink is not None else None
    for b, s, e in segments(B, T, cu_seqlens):
        L = e - s
        if L == 0:
            continue
        mask = _visible(L, L, window, 0)
        for h in range(HQ):
            qs, ks, vs, dos = q[b, s:e, h], k[b, s:e, h // G], v[b, s:e, h // G], do[b, s:e, h]
            Gc = np.cumsum(g[b, s:e, h]) if g is not None else None
            S = _scores(qs, ks, scale, Gc, Gc)
            P, lse = _softmax_rows(S, mask, None if sink is None else sink[h])
            dP = dos @ vs.T
            D = (P * dP).sum(axis=1)
            dS = P * (dP - D[:, None])
            dq[b, s:e, h] = scale * dS @ ks
            dk[b, s:e, h // G] += scale * dS.T @ qs
            dv[b, s:e, h // G] += P.T @ dos
            if g is not None:
                dGc = dS.sum(axis=1) - dS.sum(axis=0)
                dg[b, s:e, h] = np.cumsum(dGc[::-1])[::-1]
            if sink is not None:
                dsink[h] -= (np.exp(sink[h] - lse) * D).sum()
    return dq, dk, dv, dg, dsink


def decode(q, k, v, cu_seqlens, g=None, sink=None, scale=None, window=None, gate_scale=False):
    """SPEC 5. q [N,HQ,K], k [T,H,K], v [T,H,V]; returns o [N,HQ,V] float64."""
    q, k, v, g, sink = f64(q), f64(k), f64(v), f64(g), f64(sink)
    N, HQ, K = q.shape
    H, V = k.shape[1], v.shape[2]
    G = HQ // H
    scale = api_scale(scale, K)
    o = np.zeros((N, HQ, V))
    cu = [int(c) for c in cu_seqlens]
    for n in range(N):
        s, e = cu[n], cu[n + 1]
        L = e - s
        if L == 0:
            continue
        mask = _visible(1, L, window, L - 1)
        for h in range(HQ):
            S = scale * (k[s:e, h // G] @ q[n, h])[None, :]
            if g is not None:
                Gc = np.cumsum(g[s:e, h])
                S = S + (Gc[-1] - Gc[None, :]) * (scale if gate_scale else 1.0)
            P, _ = _softmax_rows(S, mask, None if sink is None else sink[h])
            o[n, h] = (P @ v[s:e, h // G])[0]
    return o


def gather_paged(cache, block_table, n, length, scale=None):
    """The first `length` cached tokens of sequence n as [length, H, D] float64, dequantized by a per-tensor
    (size-1) or per-token [num_blocks, H, block_size] scale."""
    cache = f64(cache)
    bs = cache.shape[1]
    j = np.arange(length)
    blocks = np.asarray(block_table)[n, j // bs]
    slots = j % bs
    out = cache[blocks, slots]
    if scale is not None:
        scale = f64(scale)
        if scale.size == 1:
            out = out * scale.reshape(())
        else:
            out = out * scale[blocks, :, slots][:, :, None]
    return out


def paged(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink=None, scale=None, window=None,
          k_scale=None, v_scale=None):
    """SPEC 6. Returns o [total_q,HQ,V] float64."""
    q, sink = f64(q), f64(sink)
    total_q, HQ, K = q.shape
    H, V = k_cache.shape[2], v_cache.shape[3]
    G = HQ // H
    scale = api_scale(scale, K)
    o = np.zeros((total_q, HQ, V))
    cu = [int(c) for c in cu_seqlens_q]
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        Lq, Lk = e - s, int(seq_lens_k[n])
        if Lq == 0:
            continue
        ks = gather_paged(k_cache, block_table, n, Lk, k_scale)
        vs = gather_paged(v_cache, block_table, n, Lk, v_scale)
        mask = _visible(Lq, Lk, window, Lk - Lq)
        for h in range(HQ):
            S = scale * q[s:e, h] @ ks[:, h // G].T
            P, _ = _softmax_rows(S, mask, None if sink is None else sink[h])
            o[s:e, h] = P @ vs[:, h // G]
    return o
