"""Context parallelism over torch.distributed: one sequence split across the ranks of a process group, attended
with gates, sinks, windows and GQA, forward and backward (autograd).

Layout (zigzag): with W ranks a sequence of T tokens (a multiple of 2W) is cut into 2W chunks of T / (2W); rank r
holds chunks r and 2W - 1 - r, one after the other on its time axis, so that every rank has as much causal work.
:func:`shard` and :func:`unshard` move between a whole sequence and this layout.

Mode ``"allgather"``: every rank gathers K and V of the whole sequence (under GQA they are HQ / H times smaller than
Q) and the cumulative gate, attends each of its query chunks against the key chunks up to it with the slice ops
(``flashgate._C.attention_forward_slice``), and merges them by the LSE rule; with a window only the key chunks the
window reaches. The backward gives every key chunk its shares of dK, dV and of the cumulative gate's gradient, sums
them over the ranks (all-reduce), and makes dg by suffix sums over the whole sequence (a reverse exclusive scan of
the chunks' totals). The sink goes with the first key chunk a query chunk attends. The slice ops run on the cpu
backend so far: GPU tensors are refused there.
"""

from typing import List, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from . import _C
from .torch_ops import _companion_dtype, _dl, _empty, _launch


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _chunks_of(rank: int, world: int) -> List[int]:
    """The two chunk numbers a rank holds, in the order of its time axis."""
    return [rank, 2 * world - 1 - rank]


def shard(x: Tensor, group=None, dim: int = 1) -> Tensor:
    """This rank's zigzag shard of the whole-sequence tensor ``x`` (the sequence along ``dim``)."""
    world, rank = _world(group)
    if x.shape[dim] % (2 * world):
        raise ValueError(f"flashgate.distributed.shard: x: the sequence length {x.shape[dim]} must be a multiple "
                         f"of 2 x world size = {2 * world}")
    parts = x.chunk(2 * world, dim=dim)
    return torch.cat([parts[c] for c in _chunks_of(rank, world)], dim=dim).contiguous()


def unshard(x: Tensor, group=None, dim: int = 1) -> Tensor:
    """The whole-sequence tensor from every rank's zigzag shard ``x`` (an all-gather)."""
    world, _ = _world(group)
    gathered = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(gathered, x.contiguous(), group=group)
    chunks = [None] * (2 * world)
    for r, part in enumerate(gathered):
        a, b = part.chunk(2, dim=dim)
        chunks[r], chunks[2 * world - 1 - r] = a, b
    return torch.cat(chunks, dim=dim)


def _all_gather_chunks(x: Tensor, group, world: int) -> List[Tensor]:
    """Every chunk of the sequence in order, from each rank's two (time axis 1)."""
    gathered = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(gathered, x.contiguous(), group=group)
    chunks = [None] * (2 * world)
    for r, part in enumerate(gathered):
        a, b = part.chunk(2, dim=1)
        chunks[r], chunks[2 * world - 1 - r] = a.contiguous(), b.contiguous()
    return chunks


def _slice_forward(q, k, v, gate_q, gate_k, sink, q_start, k_start, scale, window, backend):
    B, Tq, HQ = q.shape[:3]
    o = _empty((B, Tq, HQ, v.shape[-1]), q.dtype, q.device)
    lse = _empty((B, Tq, HQ), _companion_dtype(q.dtype), q.device)
    stream, _, _, device = _launch(q)
    with device:
        _C.attention_forward_slice(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse), gate_q=_dl(gate_q),
                                   gate_k=_dl(gate_k), sink=_dl(sink), q_start=q_start, k_start=k_start,
                                   scale=scale, window=window, backend=backend, stream=stream)
    return o, lse


def _slice_backward(q, k, v, do, lse, D, gate_q, gate_k, sink, q_start, k_start, scale, window, backend):
    fp = _companion_dtype(q.dtype)
    dq, dk, dv = _empty(q.shape, q.dtype, q.device), _empty(k.shape, k.dtype, k.device), _empty(v.shape, v.dtype, v.device)
    dgq = _empty(gate_q.shape, fp, q.device) if gate_q is not None else None
    dgk = _empty(gate_k.shape, fp, q.device) if gate_k is not None else None
    dsink = _empty(sink.shape, fp, q.device) if sink is not None else None
    stream, _, _, device = _launch(q)
    with device:
        _C.attention_backward_slice(_dl(q), _dl(k), _dl(v), _dl(do), _dl(lse), _dl(D), _dl(dq), _dl(dk), _dl(dv),
                                    gate_q=_dl(gate_q), gate_k=_dl(gate_k), sink=_dl(sink), dgate_q=_dl(dgq),
                                    dgate_k=_dl(dgk), dsink=_dl(dsink), q_start=q_start, k_start=k_start,
                                    scale=scale, window=window, backend=backend, stream=stream)
    return dq, dk, dv, dgq, dgk, dsink


def _key_chunks(a: int, c: int, window: Optional[int]) -> List[int]:
    """The key chunks query chunk `a` (chunks of c tokens) sees: those up to it that reach into its rows' window.
    The first of them carries the sink for every row of the chunk, so one is kept even where none is seen."""
    first_key = a * c - window + 1 if window is not None else 0
    seen = [b for b in range(a + 1) if (b + 1) * c - 1 >= first_key]
    return seen or [a]


def _merge(os: List[Tensor], lses: List[Tensor]):
    """The LSE rule: lse = log sum exp(lse_s), o = sum exp(lse_s - lse) o_s (rows that see nothing stay 0)."""
    lse = torch.logsumexp(torch.stack(lses), dim=0)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    o = sum(torch.exp(l - safe).unsqueeze(-1) * x.to(l.dtype) for x, l in zip(os, lses))
    return o.to(os[0].dtype), lse


class _ContextParallelAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, sink, scale, window, group, backend):
        world, rank = _world(group)
        c = q.shape[1] // 2
        mine = _chunks_of(rank, world)
        fp = _companion_dtype(q.dtype)
        # The cumulative gate over the whole sequence: each chunk's running sum plus the totals of the chunks
        # before it (an exclusive scan of every chunk's total).
        G = None
        if g is not None:
            local = torch.cat([x.to(fp).cumsum(1) for x in g.chunk(2, dim=1)], dim=1)
            totals = _all_gather_chunks(local[:, c - 1::c].contiguous(), group, world)  # [B, 1, HQ] each
            before = torch.cumsum(torch.cat([torch.zeros_like(totals[0])] + totals[:-1], dim=1), dim=1)
            G = torch.cat([local[:, :c] + before[:, mine[0]:mine[0] + 1], local[:, c:] + before[:, mine[1]:mine[1] + 1]],
                          dim=1)
        ks, vs = _all_gather_chunks(k, group, world), _all_gather_chunks(v, group, world)
        Gs = _all_gather_chunks(G, group, world) if G is not None else [None] * (2 * world)
        outs, lses = [], []
        for i, a in enumerate(mine):
            qa = q[:, i * c:(i + 1) * c].contiguous()
            Ga = G[:, i * c:(i + 1) * c].contiguous() if G is not None else None
            seen = _key_chunks(a, c, window)
            parts = [_slice_forward(qa, ks[b], vs[b], Ga, Gs[b], sink if b == seen[0] else None, a * c, b * c, scale,
                                    window, backend) for b in seen]
            o, lse = _merge([p[0] for p in parts], [p[1] for p in parts])
            outs.append(o), lses.append(lse)
        o, lse = torch.cat(outs, dim=1), torch.cat(lses, dim=1)
        ctx.save_for_backward(q, o, lse, G, sink, *ks, *vs, *([x for x in Gs] if G is not None else []))
        ctx.layout = (world, rank, c, g is not None, g.dtype if g is not None else None)
        ctx.scale, ctx.window, ctx.group, ctx.backend = scale, window, group, backend
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        del dlse
        world, rank, c, gated, g_dtype = ctx.layout
        saved = ctx.saved_tensors
        q, o, lse, G, sink = saved[:5]
        n = 2 * world
        ks, vs = list(saved[5:5 + n]), list(saved[5 + n:5 + 2 * n])
        Gs = list(saved[5 + 2 * n:5 + 3 * n]) if gated else [None] * n
        mine = _chunks_of(rank, world)
        fp = _companion_dtype(q.dtype)
        do = do.contiguous()
        D = (o.to(fp) * do.to(fp)).sum(-1)
        dq = torch.zeros_like(q, dtype=fp)
        dks = [torch.zeros_like(x, dtype=fp) for x in ks]
        dvs = [torch.zeros_like(x, dtype=fp) for x in vs]
        dGs = [torch.zeros_like(x, dtype=fp) for x in Gs] if gated else None
        dGq = torch.zeros_like(G) if gated else None
        dsink = torch.zeros_like(sink, dtype=fp) if sink is not None else None
        for i, a in enumerate(mine):
            rows = slice(i * c, (i + 1) * c)
            qa, doa = q[:, rows].contiguous(), do[:, rows].contiguous()
            la, Da = lse[:, rows].contiguous(), D[:, rows].contiguous()
            Ga = G[:, rows].contiguous() if gated else None
            seen = _key_chunks(a, c, ctx.window)
            for b in seen:
                sq, sk, sv, sgq, sgk, ss = _slice_backward(qa, ks[b], vs[b], doa, la, Da, Ga, Gs[b],
                                                           sink if b == seen[0] else None, a * c, b * c, ctx.scale,
                                                           ctx.window, ctx.backend)
                dq[:, rows] += sq.to(fp)
                dks[b] += sk.to(fp)
                dvs[b] += sv.to(fp)
                if gated:
                    dGq[:, rows] += sgq
                    dGs[b] += sgk
                if ss is not None:
                    dsink += ss
        # Every rank's shares of every key chunk, summed; each rank keeps its own two chunks.
        flat = torch.cat([x.flatten() for x in dks + dvs + (dGs if gated else [])])
        dist.all_reduce(flat, group=ctx.group)
        pieces = list(flat.split([x.numel() for x in dks + dvs + (dGs if gated else [])]))
        dks = [p.view(x.shape) for p, x in zip(pieces[:n], dks)]
        dvs = [p.view(x.shape) for p, x in zip(pieces[n:2 * n], dvs)]
        dk = torch.cat([dks[a] for a in mine], dim=1).to(q.dtype)
        dv = torch.cat([dvs[a] for a in mine], dim=1).to(q.dtype)
        dg = None
        if gated:
            dGs = [p.view(x.shape) for p, x in zip(pieces[2 * n:], dGs)]
            dG = dGq + torch.cat([dGs[a] for a in mine], dim=1)
            # dg_t = sum of dG_u over u >= t of the whole sequence: within each chunk a reverse running sum, plus the
            # totals of the chunks after it.
            chunk_dG = [dG[:, :c], dG[:, c:]]
            totals = _all_gather_chunks(torch.cat([x.sum(1, keepdim=True) for x in chunk_dG], dim=1), group=ctx.group,
                                        world=world)
            after = [sum((totals[b] for b in range(a + 1, n)), torch.zeros_like(totals[0])) for a in mine]
            dg = torch.cat([x.flip(1).cumsum(1).flip(1) + t for x, t in zip(chunk_dG, after)], dim=1).to(g_dtype)
        if dsink is not None:
            dist.all_reduce(dsink, group=ctx.group)
        return dq.to(q.dtype), dk, dv, dg, dsink, None, None, None, None


_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _same_on_every_rank(q, k, v, g, sink_bias, window, scale, group):
    """Every rank must call with the same layout and options: one small all-gather compares them, so that a
    mismatch raises the same error on every rank instead of hanging in a collective of unequal sizes."""
    world, rank = _world(group)
    desc = torch.tensor([*q.shape, *k.shape, *v.shape, *(g.shape if g is not None else (-1, -1, -1)),
                         -1 if sink_bias is None else sink_bias.numel(), -1 if window is None else window,
                         float("nan") if scale is None else scale,
                         _DTYPES.index(q.dtype) if q.dtype in _DTYPES else -1], dtype=torch.float64)
    if q.device.type == "cuda" and dist.get_backend(group) == "nccl":
        desc = desc.to(q.device)
    everyone = [torch.empty_like(desc) for _ in range(world)]
    dist.all_gather(everyone, desc, group=group)
    for r, d in enumerate(everyone):
        if not torch.equal(torch.nan_to_num(d, nan=-2.0), torch.nan_to_num(desc, nan=-2.0)):
            raise ValueError(f"flashgate.distributed.context_parallel_attn: q, k, v, g, sink_bias, window_size, scale: "
                             f"every rank must pass the same shapes, dtype and options; rank {r} differs from rank "
                             f"{rank} (shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} here)")


def context_parallel_attn(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor] = None,
                          sink_bias: Optional[Tensor] = None, window_size: Optional[int] = None,
                          scale: Optional[float] = None, cu_seqlens: Optional[Tensor] = None, group=None,
                          mode: str = "allgather", backend: str = "auto") -> Tensor:
    """Causal attention of one sequence split over the ranks of ``group`` in the zigzag layout (see the module):
    q [B, T_local, HQ, K], k [B, T_local, H, K], v [B, T_local, H, V], g [B, T_local, HQ] this rank's shards
    (T_local = T / W, even); sink_bias [HQ] the same on every rank. Returns this rank's shard of o; gradients reach
    q, k, v, g and sink_bias. Every rank must call it with the same shapes and options."""
    if mode != "allgather":
        raise NotImplementedError(f"flashgate.distributed.context_parallel_attn: mode: only 'allgather' so far, got {mode!r}")
    if cu_seqlens is not None:
        raise NotImplementedError("flashgate.distributed.context_parallel_attn: cu_seqlens: packed sequences are not "
                                  "supported yet")
    if q.shape[1] % 2:
        raise ValueError(f"flashgate.distributed.context_parallel_attn: q: a zigzag shard holds two equal chunks, "
                         f"got {q.shape[1]} tokens")
    _same_on_every_rank(q, k, v, g, sink_bias, window_size, scale, group)
    if sink_bias is not None and sink_bias.dtype != _companion_dtype(q.dtype):
        sink_bias = sink_bias.to(_companion_dtype(q.dtype))
    o, _ = _ContextParallelAttn.apply(q, k, v, g, sink_bias, scale, window_size, group, backend)
    return o
