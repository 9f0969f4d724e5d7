"""Context parallelism over torch.distributed: one sequence split across the ranks of a process group, attended
with gates, sinks, windows and GQA, forward and backward (autograd).

Layout (zigzag): with W ranks a sequence of T tokens (a multiple of 2W) is cut into 2W chunks of T / (2W); rank r
holds chunks r and 2W - 1 - r, one after the other on its time axis, so that every rank has as much causal work.
:func:`shard` and :func:`unshard` move between a whole sequence and this layout.

Mode ``"allgather"``: every rank gathers K, V and g of the whole sequence (under GQA K and V are HQ / H times smaller
than Q), attends each of its query chunks against the key chunks up to it with the slice ops
(``flashgate._C.attention_forward_slice``: its own key chunk first, while the others arrive, then every earlier key
it sees as one run), and merges them by the LSE rule; with a window only the keys the window reaches. The backward
gives every key chunk its shares of dK, dV and of the cumulative gate's gradient, sums them over the ranks
(all-reduce), and makes dg by suffix sums over the whole sequence. The sink goes with the first key chunk
a query chunk attends. Mode ``"ring"``: the same pairs,
with one rank's K, V and G at a time passed to the next rank (point-to-point, under the step's compute), for when the
whole sequence's K and V do not fit; in the backward they travel with their gradient shares, which one more hop
brings to their owner. Packed sequences (``cu_seqlens`` of the whole packed sequence, B = 1, either mode) may span
shards: the pairs are cut at sequence boundaries (all-gather mode also restarts the gate's cumulative sums at each
sequence; the ring's run over the whole packed sequence, whose differences inside one sequence are the same). The
slice ops run on the cpu backend and, for fp16 / bf16 CUDA tensors, on the GPU kernels: the hopper backend's sm_90a
kernels on sm_90, the portable ones elsewhere.
"""

from typing import List, Optional, Tuple

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


def _zigzag_chunks(shards: List[Tensor], dim: int = 1) -> List[Tensor]:
    """Every chunk of the sequence in order, from each rank's shard (its two chunks along `dim`)."""
    world = len(shards)
    chunks = [None] * (2 * world)
    for r, part in enumerate(shards):
        a, b = part.chunk(2, dim=dim)
        chunks[r], chunks[2 * world - 1 - r] = a.contiguous(), b.contiguous()
    return chunks


def unshard(x: Tensor, group=None, dim: int = 1) -> Tensor:
    """The whole-sequence tensor from every rank's zigzag shard ``x`` (an all-gather)."""
    world, _ = _world(group)
    gathered = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(gathered, x.contiguous(), group=group)
    return torch.cat(_zigzag_chunks(gathered, dim), dim=dim)


def _all_gather_chunks(x: Tensor, group, world: int) -> List[Tensor]:
    """Every chunk of the sequence in order, from each rank's two (time axis 1)."""
    gathered = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(gathered, x.contiguous(), group=group)
    return _zigzag_chunks(gathered)


def _owner(b: int, world: int) -> int:
    """The rank that holds chunk b."""
    return b if b < world else 2 * world - 1 - b


def _peer(group, r: int) -> int:
    return dist.get_global_rank(group, r) if group is not None else r


def _host_staged(group, x: Tensor) -> bool:
    """Whether point-to-point transfers of `x` go through host copies: gloo moves host memory only (NCCL moves CUDA
    tensors itself; gloo's collectives stage CUDA tensors on their own)."""
    return x.device.type == "cuda" and dist.get_backend(group) == "gloo"


def _outgoing(t: Tensor, staged: bool) -> Tensor:
    return t.contiguous().cpu() if staged else t.contiguous()


class _Fetch:
    """Mode "allgather" under a window: each rank takes only the key chunks its query chunks reach, from their
    owners by point-to-point transfers, and in the backward hands the gradient shares of those chunks back to their
    owners. `needed[r]`: the chunks rank r reads (every rank knows every rank's, from the layout alone); one
    (sender, receiver) pair's transfers go in chunk order on both sides."""

    def __init__(self, needed: List[List[int]], group, world: int, rank: int):
        self.needed, self.group, self.world, self.rank = needed, group, world, rank

    def _readers(self):
        """(rank r, chunk b) for each chunk of this rank's that another rank r reads, in the transfers' order."""
        return [(r, b) for r in range(self.world) for b in self.needed[r]
                if r != self.rank and _owner(b, self.world) == self.rank]

    def start(self, own) -> Tuple[List[Optional[Tensor]], list]:
        """Starts the transfers of the chunks this rank reads (`own`: its two by number): the list of all 2W
        (None where it reads none; filled once the returned requests are waited for) and the requests."""
        world, rank = self.world, self.rank
        staged = _host_staged(self.group, own[rank])
        out: List[Optional[Tensor]] = [None] * (2 * world)
        ops = [dist.P2POp(dist.isend, _outgoing(own[b], staged), _peer(self.group, r), self.group)
               for r, b in self._readers()]
        for b in self.needed[rank]:
            src = _owner(b, world)
            if src == rank:
                out[b] = own[b]
            else:
                out[b] = torch.empty_like(own[rank], device="cpu" if staged else own[rank].device)
                ops.append(dist.P2POp(dist.irecv, out[b], _peer(self.group, src), self.group))
        return out, dist.batch_isend_irecv(ops) if ops else []

    def return_shares(self, shares: List[Optional[Tensor]]) -> Tensor:
        """This rank's shard of the sums of every rank's shares of its chunks (own share first, then by rank)."""
        world, rank = self.world, self.rank
        staged = _host_staged(self.group, next(x for x in shares if x is not None))
        ops, incoming = [], []
        for b in self.needed[rank]:
            dst = _owner(b, world)
            if dst != rank:
                ops.append(dist.P2POp(dist.isend, _outgoing(shares[b], staged), _peer(self.group, dst), self.group))
        for r, b in self._readers():
            buf = torch.empty_like(shares[b], device="cpu" if staged else shares[b].device)
            ops.append(dist.P2POp(dist.irecv, buf, _peer(self.group, r), self.group))
            incoming.append((b, buf))
        for req in dist.batch_isend_irecv(ops) if ops else []:
            req.wait()
        totals = {b: shares[b].clone() for b in _chunks_of(rank, world)}
        for b, buf in incoming:
            totals[b] += buf.to(totals[b].device)
        return torch.cat([totals[b] for b in _chunks_of(rank, world)], dim=1)


class _Arriving:
    """The key chunks a rank reads, on their way under the compute that follows: the transfers start at
    construction (an all-gather, or _Fetch's point-to-point ones), `own` holds the rank's own two chunks at once, and
    `wait()` gives every chunk it reads (a list of all 2W, None where it reads none)."""

    def __init__(self, x: Tensor, fetch: Optional[_Fetch], group, world: int, rank: int):
        self.own = dict(zip(_chunks_of(rank, world), (p.contiguous() for p in x.chunk(2, dim=1))))
        if fetch is not None:
            self.chunks, self.requests = fetch.start(self.own)
        else:
            self.chunks, self.gathered = None, [torch.empty_like(x) for _ in range(world)]
            self.requests = [dist.all_gather(self.gathered, x.contiguous(), group=group, async_op=True)]

    def wait(self) -> List[Optional[Tensor]]:
        for req in self.requests:
            req.wait()
        if self.chunks is None:
            self.chunks = _zigzag_chunks(self.gathered)
        device = next(iter(self.own.values())).device  # chunks received through host copies come back
        self.chunks = [c if c is None or c.device == device else c.to(device) for c in self.chunks]
        return self.chunks


def _slice_runs(mine: List[int], c: int, bounds: List[int], window: Optional[int], ks: _Arriving, vs: _Arriving):
    """The slice ops of this rank's query chunks (_sequence_parts), at most two per chunk and sequence: the rows
    against the keys of their own chunk (the diagonal, first, while the other chunks arrive), then against every
    earlier key they see at once, one contiguous run of keys over the chunks before (fewer, larger kernels and fewer
    merges than a pair per key chunk). Yields (i, a, sink_here, s0, rows, pieces, k, v): query chunk a (the rank's
    i-th), the run's key pieces [(b, keys)] in order and their K and V (contiguous); the sink goes with the run that
    holds the sequence's first key chunk."""
    diagonals, runs = [], []
    for i, a in enumerate(mine):
        for seq_parts in _sequence_parts(a, c, bounds, window):
            s0, rows = seq_parts[0][0], seq_parts[0][1]
            earlier = [(b, keys) for (_, _, b, keys) in seq_parts if b != a]
            diagonal = [(b, keys) for (_, _, b, keys) in seq_parts if b == a]
            if diagonal:
                diagonals.append((i, a, not earlier, s0, rows, diagonal))
            if earlier:
                runs.append((i, a, True, s0, rows, earlier))

    def keys_of(chunks, pieces):
        parts = [chunks[b][:, keys.start - b * c:keys.stop - b * c] for b, keys in pieces]
        return parts[0].contiguous() if len(parts) == 1 else torch.cat(parts, dim=1)

    for run in diagonals:
        yield (*run, keys_of(ks.own, run[-1]), keys_of(vs.own, run[-1]))
    k_chunks, v_chunks = ks.wait(), vs.wait()
    for run in runs:
        yield (*run, keys_of(k_chunks, run[-1]), keys_of(v_chunks, run[-1]))


def _keeps_residual(ctx, q: Tensor) -> bool:
    """Whether the forward keeps o's rounding residual: fp16 / bf16, and a backward will follow."""
    return q.dtype in (torch.float16, torch.bfloat16) and any(ctx.needs_input_grad[:5])


def _residual_value(codes: Tensor, o: Tensor) -> Tensor:
    """o's rounding residual (float32) from its int8 codes: the decoding rule of src/common/o_residual.h."""
    mantissa_bits = 7 if o.dtype == torch.bfloat16 else 10
    bits = o.float().view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127
    # Rounded up onto a power of two (a negative code): the code counts in the binade below.
    on_power_of_two = ((bits >> (23 - mantissa_bits)) & ((1 << mantissa_bits) - 1)) == 0
    k = e - (on_power_of_two & (codes < 0)).to(torch.int32) - mantissa_bits - 8
    value = torch.where(k < -126, torch.zeros_like(bits, dtype=torch.float32), torch.ldexp(codes.float(), k))
    return torch.where(bits < 0, -value, value)


def _slice_forward(q, k, v, gate_q, gate_k, sink, q_start, k_start, scale, window, backend, keep_residual):
    """(o, lse, o's residual codes or None) of one slice pair."""
    B, Tq, HQ = q.shape[:3]
    o = _empty((B, Tq, HQ, v.shape[-1]), q.dtype, q.device)
    lse = _empty((B, Tq, HQ), _companion_dtype(q.dtype), q.device)
    residual = _empty(o.shape, torch.int8, q.device) if keep_residual else None
    stream, _, _, device = _launch(q)
    with device:
        _C.attention_forward_slice(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse), o_residual=_dl(residual),
                                   gate_q=_dl(gate_q), gate_k=_dl(gate_k), sink=_dl(sink), q_start=q_start,
                                   k_start=k_start, scale=scale, window=window, backend=backend, stream=stream)
    return o, lse, residual


def _slice_backward(q, k, v, do, lse, D, gate_q, gate_k, sink, q_start, k_start, scale, window, backend):
    fp = _companion_dtype(q.dtype)
    dq, dk = _empty(q.shape, q.dtype, q.device), _empty(k.shape, k.dtype, k.device)
    dv = _empty(v.shape, v.dtype, v.device)
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


def _merge_into(o_acc: Tensor, lse_acc: Tensor, rows: slice, o: Tensor, lse: Tensor, residual: Optional[Tensor]):
    """The LSE rule for one part covering `rows` of the accumulators (in place; rows that see nothing stay 0); o
    with its residual where the slice kept it."""
    old = lse_acc[:, rows]
    new = torch.logaddexp(old, lse)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    part = o.to(o_acc.dtype) if residual is None else o.to(o_acc.dtype) + _residual_value(residual, o).to(o_acc.dtype)
    acc = o_acc[:, rows]  # a view: the rows' accumulator rescaled and added to in place (no full-size temporaries)
    acc.mul_(torch.exp(old - safe).unsqueeze(-1)).addcmul_(part, torch.exp(lse - safe).unsqueeze(-1))
    lse_acc[:, rows] = new


def _output_and_rest(o_acc: Tensor, dtype: torch.dtype, keep_residual: bool) -> Tuple[Tensor, Optional[Tensor]]:
    """The merged output in its dtype and, where kept, what rounding took off it (in the same dtype: o + rest holds
    o to 8 more bits), for the backward's D."""
    o = o_acc.to(dtype)
    return o, (o_acc - o.to(o_acc.dtype)).to(dtype) if keep_residual else None


def _row_dot(o: Tensor, rest: Optional[Tensor], do: Tensor, fp: torch.dtype) -> Tensor:
    """D = rowsum(o * do) of the merged output (with what its rounding took off, where kept)."""
    full = o.to(fp) if rest is None else o.to(fp) + rest.to(fp)
    return (full * do.to(fp)).sum(-1)


def _gate_prefix(g: Tensor, c: int, mine: List[int], fp, group, world: int) -> Tensor:
    """The cumulative gate over the whole sequence at this rank's positions: each chunk's running sum plus the totals
    of the chunks before it (an exclusive scan of every chunk's total over the ranks)."""
    local = torch.cat([x.to(fp).cumsum(1) for x in g.chunk(2, dim=1)], dim=1)
    totals = _all_gather_chunks(local[:, c - 1::c].contiguous(), group, world)  # [B, 1, HQ] each
    before = torch.cumsum(torch.cat([torch.zeros_like(totals[0])] + totals[:-1], dim=1), dim=1)
    return torch.cat([local[:, :c] + before[:, mine[0]:mine[0] + 1], local[:, c:] + before[:, mine[1]:mine[1] + 1]],
                     dim=1)


def _suffix_sums(dG: Tensor, c: int, mine: List[int], group, world: int) -> Tensor:
    """dg_t = sum of dG_u over u >= t of the whole sequence: within each local chunk a reverse running sum, plus the
    totals of the chunks after it (gathered from every rank)."""
    chunks = [dG[:, :c], dG[:, c:]]
    totals = _all_gather_chunks(torch.cat([x.sum(1, keepdim=True) for x in chunks], dim=1), group, world)
    after = [sum((totals[b] for b in range(a + 1, 2 * world)), torch.zeros_like(totals[0])) for a in mine]
    return torch.cat([x.flip(1).cumsum(1).flip(1) + t for x, t in zip(chunks, after)], dim=1)


class _Ring:
    """Point-to-point passing around the ring of ranks: each step sends what this rank holds to the next rank and
    takes what the previous one held (non-blocking, under the step's compute)."""

    def __init__(self, group, world: int, rank: int):
        self.group, self.world = group, world
        self.send_to = dist.get_global_rank(group, (rank + 1) % world) if group is not None else (rank + 1) % world
        self.recv_from = dist.get_global_rank(group, (rank - 1) % world) if group is not None else (rank - 1) % world

    def start(self, tensors: List[Tensor]):
        device = tensors[0].device
        outgoing = [_outgoing(t, _host_staged(self.group, t)) for t in tensors]
        received = [torch.empty_like(t) for t in outgoing]
        ops = [dist.isend(t, self.send_to, group=self.group) for t in outgoing]
        ops += [dist.irecv(r, self.recv_from, group=self.group) for r in received]
        return ops, received, device

    @staticmethod
    def finish(pending):
        ops, received, device = pending
        for op in ops:
            op.wait()
        return [r.to(device) for r in received]


def _held_pairs(mine: List[int], c: int, bounds: List[int], window: Optional[int], holder: int, world: int):
    """The slice pairs of this rank's query chunks (_sequence_parts) with the key chunks rank `holder` holds: (local
    rows, held keys, j, rows, keys), with the rows in this rank's shard and the keys in the holder's."""
    held = _chunks_of(holder, world)
    for i, a in enumerate(mine):
        for seq_parts in _sequence_parts(a, c, bounds, window):
            for j, (_, rows, b, keys) in enumerate(seq_parts):
                if b in held:
                    h = held.index(b)
                    yield (slice(i * c + rows.start - a * c, i * c + rows.stop - a * c),
                           slice(h * c + keys.start - b * c, h * c + keys.stop - b * c), j, rows, keys)


def _saved_forward(ctx, o_acc: Tensor, lse_acc: Tensor, keep: bool, tensors, layout, options):
    """Both modes' end of the forward: o (and its rounding residual where a backward follows) from the fp32
    accumulator, what the backward reads kept on ctx; returns (o, lse). `tensors`: q, k, v, the cumulative gate (or
    None) and sink; `layout`: world, rank, chunk length, g (or None), bounds, kept with g's dtype in g's place;
    `options`: scale, window, group, backend."""
    q, k, v, G, sink = tensors
    world, rank, c, g, bounds = layout
    (o, rest), lse = _output_and_rest(o_acc, q.dtype, keep), lse_acc
    ctx.save_for_backward(q, k, v, o, rest, lse, G, sink)
    ctx.layout = (world, rank, c, g.dtype if g is not None else None, bounds)
    ctx.scale, ctx.window, ctx.group, ctx.backend = options
    ctx.mark_non_differentiable(lse)
    return o, lse


def _saved_backward(ctx, do: Tensor):
    """Both modes' start of the backward: (layout, (q, k, v, lse, G, sink), do, D, fp) with do contiguous, D the rows'
    o . do (o from its rounding residual where kept) and fp the accumulators' dtype."""
    q, k, v, o, rest, lse, G, sink = ctx.saved_tensors
    fp = _companion_dtype(q.dtype)
    do = do.contiguous()
    return ctx.layout, (q, k, v, lse, G, sink), do, _row_dot(o, rest, do, fp), fp


class _RingAttn(torch.autograd.Function):
    """Mode "ring": the key chunks of one rank at a time, passed around the ring (forward: K, V, G; backward: K, V, G
    with their gradient shares, which end at their owner). Pairs are cut at the sequence boundaries `bounds` like the
    all-gather mode's; the cumulative gate runs over the whole (packed) sequence, whose differences inside one
    sequence are the sequence's own, and the suffix sums of its gradient need no restart either: a sequence's dG sums
    to 0 (every dS enters one row and one key of it with opposite signs)."""

    @staticmethod
    def forward(ctx, q, k, v, g, sink, scale, window, group, backend, bounds):
        world, rank = _world(group)
        c = q.shape[1] // 2
        mine = _chunks_of(rank, world)
        fp = _companion_dtype(q.dtype)
        G = _gate_prefix(g, c, mine, fp, group, world) if g is not None else None
        keep = _keeps_residual(ctx, q)
        o_acc = torch.zeros(tuple(q.shape[:3]) + (v.shape[-1],), dtype=fp, device=q.device)
        lse_acc = torch.full(tuple(q.shape[:3]), float("-inf"), dtype=fp, device=q.device)

        def attend(holder: int, kh: Tensor, vh: Tensor, Gh: Optional[Tensor]):
            """Every local query chunk against the key chunks of rank `holder` (its shards kh, vh, Gh) it sees."""
            for local, kl, j, rows, keys in _held_pairs(mine, c, bounds, window, holder, world):
                o, lse, residual = _slice_forward(
                    q[:, local].contiguous(), kh[:, kl].contiguous(), vh[:, kl].contiguous(),
                    G[:, local].contiguous() if G is not None else None,
                    Gh[:, kl].contiguous() if Gh is not None else None,
                    sink if j == 0 else None, rows.start, keys.start, scale, window, backend, keep)
                _merge_into(o_acc, lse_acc, local, o, lse, residual)

        ring, held, holder = _Ring(group, world, rank), [k, v] + ([G] if G is not None else []), rank
        for step in range(world):
            pending = ring.start(held) if step + 1 < world else None
            attend(holder, held[0], held[1], held[2] if G is not None else None)
            if pending is not None:
                held, holder = _Ring.finish(pending), (holder - 1) % world
        return _saved_forward(ctx, o_acc, lse_acc, keep, (q, k, v, G, sink), (world, rank, c, g, bounds),
                              (scale, window, group, backend))

    @staticmethod
    def backward(ctx, do, dlse):
        del dlse
        (world, rank, c, g_dtype, bounds), (q, k, v, lse, G, sink), do, D, fp = _saved_backward(ctx, do)
        gated = G is not None
        mine = _chunks_of(rank, world)
        dq = torch.zeros_like(q, dtype=fp)
        dGq = torch.zeros_like(G) if gated else None
        dsink = torch.zeros_like(sink, dtype=fp) if sink is not None else None

        def grads(holder: int, kh, vh, Gh, dk_acc, dv_acc, dG_acc):
            """This rank's query chunks' shares against the key chunks of rank `holder`, added into the holder's
            gradient accumulators (and into dq, dGq, dsink)."""
            nonlocal dsink
            for local, kl, j, rows, keys in _held_pairs(mine, c, bounds, ctx.window, holder, world):
                sq, sk, sv, sgq, sgk, ss = _slice_backward(
                    q[:, local].contiguous(), kh[:, kl].contiguous(), vh[:, kl].contiguous(),
                    do[:, local].contiguous(), lse[:, local].contiguous(), D[:, local].contiguous(),
                    G[:, local].contiguous() if gated else None, Gh[:, kl].contiguous() if gated else None,
                    sink if j == 0 else None, rows.start, keys.start, ctx.scale, ctx.window, ctx.backend)
                dq[:, local] += sq.to(fp)
                dk_acc[:, kl] += sk.to(fp)
                dv_acc[:, kl] += sv.to(fp)
                if gated:
                    dGq[:, local] += sgq
                    dG_acc[:, kl] += sgk
                if ss is not None:
                    dsink += ss

        # K, V, G of one rank travel with their gradient shares; after the last step the shares take one more hop,
        # which brings every rank's own back to it.
        zeros = [torch.zeros_like(k, dtype=fp), torch.zeros_like(v, dtype=fp)]
        zeros += [torch.zeros_like(G)] if gated else []
        ring, holder = _Ring(ctx.group, world, rank), rank
        held = [k, v] + ([G] if gated else []) + zeros
        n = len(held) // 2
        for step in range(world):
            grads(holder, held[0], held[1], held[2] if gated else None, *held[n:n + 2], held[n + 2] if gated else None)
            if step + 1 < world:
                held, holder = _Ring.finish(ring.start(held)), (holder - 1) % world
        own = _Ring.finish(ring.start(held[n:])) if world > 1 else held[n:]
        dk, dv = own[0].to(q.dtype), own[1].to(q.dtype)
        dg = _suffix_sums(dGq + own[2], c, mine, ctx.group, world).to(g_dtype) if gated else None
        if dsink is not None:
            dist.all_reduce(dsink, group=ctx.group)
        return dq.to(q.dtype), dk, dv, dg, dsink, None, None, None, None, None


def _segmented(x: Tensor, bounds: List[int], reverse: bool) -> Tensor:
    """Running sums of x [1, T, HQ] along time that restart at every sequence of `bounds` (cu_seqlens); `reverse`:
    from each sequence's end (suffix sums)."""
    out = torch.zeros_like(x)
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        seg = x[:, s0:s1]
        out[:, s0:s1] = seg.flip(1).cumsum(1).flip(1) if reverse else seg.cumsum(1)
    return out


def _sequence_parts(a: int, c: int, bounds: List[int], window: Optional[int]):
    """The slice pairs of query chunk `a` (chunks of c tokens) cut at sequence boundaries: (s0, rows, b, keys) for each
    sequence [s0, s1) it holds rows of and each key chunk b with keys of that sequence the rows can see (positions
    are global: rows and keys are ranges). The first pair of each sequence carries the sink (the diagonal one where
    the window leaves the rows no key: it is never empty)."""
    parts = []
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        r0, r1 = max(a * c, s0), min((a + 1) * c, s1)
        if r0 >= r1:
            continue
        first_key = max(s0, r0 - window + 1) if window is not None else s0
        seq_parts = []
        for b in range(a + 1):
            k0, k1 = max(b * c, first_key), min((b + 1) * c, s1, r1)
            if k0 < k1:
                seq_parts.append((s0, range(r0, r1), b, range(k0, k1)))
        parts.append(seq_parts or [(s0, range(r0, r1), a, range(max(a * c, s0), r1))])
    return parts


def _key_fetch(world: int, rank: int, c: int, bounds: List[int], window: Optional[int], group) -> Optional[_Fetch]:
    """Under a window, the point-to-point fetch of the key chunks each rank's query chunks reach (None: every rank
    gathers every chunk)."""
    if window is None:
        return None
    needed = [sorted({b for a in _chunks_of(r, world) for seq_parts in _sequence_parts(a, c, bounds, window)
                      for (_, _, b, _) in seq_parts}) for r in range(world)]
    return _Fetch(needed, group, world, rank)


class _AllGatherAttn(torch.autograd.Function):
    """Mode "allgather": every rank's K and V (and g) gathered, each query chunk against the key chunks it sees, cut
    at the sequence boundaries `bounds` (cu_seqlens of a packed sequence, or [0, T] for each dense batch row) with
    each sequence's positions counted from its start; the gate's cumulative sums restart at each sequence. Under a
    window K and V come only from the chunks a rank's rows reach (_Fetch), and their gradient shares go back the
    same way."""

    @staticmethod
    def forward(ctx, q, k, v, g, sink, scale, window, group, backend, bounds):
        world, rank = _world(group)
        c = q.shape[1] // 2
        mine = _chunks_of(rank, world)
        fp = _companion_dtype(q.dtype)
        fetch = _key_fetch(world, rank, c, bounds, window, group)
        G_all = _segmented(torch.cat(_all_gather_chunks(g.to(fp), group, world), dim=1), bounds, False) \
            if g is not None else None
        ka, va = _Arriving(k, fetch, group, world, rank), _Arriving(v, fetch, group, world, rank)
        keep = _keeps_residual(ctx, q)
        o_acc = torch.zeros(tuple(q.shape[:3]) + (v.shape[-1],), dtype=fp, device=q.device)
        lse_acc = torch.full(tuple(q.shape[:3]), float("-inf"), dtype=fp, device=q.device)
        for i, a, sink_here, s0, rows, pieces, kr, vr in _slice_runs(mine, c, bounds, window, ka, va):
            local = slice(i * c + rows.start - a * c, i * c + rows.stop - a * c)
            k0, k1 = pieces[0][1].start, pieces[-1][1].stop
            o, lse, residual = _slice_forward(
                q[:, local].contiguous(), kr, vr,
                G_all[:, rows.start:rows.stop].contiguous() if g is not None else None,
                G_all[:, k0:k1].contiguous() if g is not None else None,
                sink if sink_here else None, rows.start - s0, k0 - s0, scale, window, backend, keep)
            _merge_into(o_acc, lse_acc, local, o, lse, residual)
        return _saved_forward(ctx, o_acc, lse_acc, keep, (q, k, v, G_all, sink), (world, rank, c, g, bounds),
                              (scale, window, group, backend))

    @staticmethod
    def backward(ctx, do, dlse):
        del dlse
        (world, rank, c, g_dtype, bounds), (q, k, v, lse, G_all, sink), do, D, fp = _saved_backward(ctx, do)
        gated = G_all is not None
        mine = _chunks_of(rank, world)
        fetch = _key_fetch(world, rank, c, bounds, ctx.window, ctx.group)
        ka, va = _Arriving(k, fetch, ctx.group, world, rank), _Arriving(v, fetch, ctx.group, world, rank)
        read = fetch.needed[rank] if fetch is not None else range(2 * world)  # the chunks with gradient shares here
        dq = torch.zeros_like(q, dtype=fp)
        dks, dvs = [None] * (2 * world), [None] * (2 * world)
        for b in read:
            dks[b], dvs[b] = torch.zeros_like(ka.own[rank], dtype=fp), torch.zeros_like(va.own[rank], dtype=fp)
        dG = torch.zeros_like(G_all) if gated else None
        dsink = torch.zeros_like(sink, dtype=fp) if sink is not None else None
        for i, a, sink_here, s0, rows, pieces, kr, vr in _slice_runs(mine, c, bounds, ctx.window, ka, va):
            local = slice(i * c + rows.start - a * c, i * c + rows.stop - a * c)
            k0, k1 = pieces[0][1].start, pieces[-1][1].stop
            sq, sk, sv, sgq, sgk, ss = _slice_backward(
                q[:, local].contiguous(), kr, vr,
                do[:, local].contiguous(), lse[:, local].contiguous(), D[:, local].contiguous(),
                G_all[:, rows.start:rows.stop].contiguous() if gated else None,
                G_all[:, k0:k1].contiguous() if gated else None,
                sink if sink_here else None, rows.start - s0, k0 - s0, ctx.scale, ctx.window, ctx.backend)
            dq[:, local] += sq.to(fp)
            for b, keys in pieces:  # the run's shares back to their key chunks
                kl, at = slice(keys.start - b * c, keys.stop - b * c), slice(keys.start - k0, keys.stop - k0)
                dks[b][:, kl] += sk[:, at].to(fp)
                dvs[b][:, kl] += sv[:, at].to(fp)
            if gated:
                dG[:, rows.start:rows.stop] += sgq
                dG[:, k0:k1] += sgk
            if ss is not None:
                dsink += ss
        if fetch is not None:
            dk, dv = fetch.return_shares(dks).to(q.dtype), fetch.return_shares(dvs).to(q.dtype)
            if gated:
                dist.all_reduce(dG, group=ctx.group)
        else:
            flat = torch.cat([x.flatten() for x in dks + dvs + ([dG] if gated else [])])
            dist.all_reduce(flat, group=ctx.group)
            pieces = flat.split([x.numel() for x in dks + dvs + ([dG] if gated else [])])
            n = 2 * world
            dks = [p.view(x.shape) for p, x in zip(pieces[:n], dks)]
            dvs = [p.view(x.shape) for p, x in zip(pieces[n:2 * n], dvs)]
            dk = torch.cat([dks[a] for a in mine], dim=1).to(q.dtype)
            dv = torch.cat([dvs[a] for a in mine], dim=1).to(q.dtype)
            if gated:
                dG = pieces[2 * n].view(dG.shape)
        dg = None
        if gated:
            dg_all = _segmented(dG, bounds, True)
            dg = torch.cat([dg_all[:, a * c:(a + 1) * c] for a in mine], dim=1).to(g_dtype)
        if dsink is not None:
            dist.all_reduce(dsink, group=ctx.group)
        return dq.to(q.dtype), dk, dv, dg, dsink, None, None, None, None, None


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
    (T_local = T / W, even); sink_bias [HQ] the same on every rank; cu_seqlens (packed, B = 1) the offsets of the
    whole packed sequence, the same on every rank. Returns this rank's shard of o; gradients reach q, k, v, g and
    sink_bias. Every rank must call it with the same shapes and options."""
    if mode not in ("allgather", "ring"):
        raise ValueError(f"flashgate.distributed.context_parallel_attn: mode: 'allgather' or 'ring', got {mode!r}")
    if cu_seqlens is not None and q.shape[0] != 1:
        raise ValueError("flashgate.distributed.context_parallel_attn: cu_seqlens: packed sequences take B == 1, got "
                         f"B={q.shape[0]}")
    if q.shape[1] % 2:
        raise ValueError(f"flashgate.distributed.context_parallel_attn: q: a zigzag shard holds two equal chunks, "
                         f"got {q.shape[1]} tokens")
    world, _ = _world(group)
    if world == 1:  # the one shard is the whole sequence in order (chunks 0 and 1): the op itself, no collective
        from . import parallel_attn
        return parallel_attn(q, k, v, g, scale, window_size, cu_seqlens, sink_bias=sink_bias, backend=backend)
    _same_on_every_rank(q, k, v, g, sink_bias, window_size, scale, group)
    if sink_bias is not None and sink_bias.dtype != _companion_dtype(q.dtype):
        sink_bias = sink_bias.to(_companion_dtype(q.dtype))
    bounds = [0, q.shape[1] * world]  # dense: each batch row one sequence
    if cu_seqlens is not None:
        bounds = [int(x) for x in cu_seqlens.tolist()]
        if bounds[0] != 0 or bounds[-1] != q.shape[1] * world or any(x > y for x, y in zip(bounds, bounds[1:])):
            raise ValueError("flashgate.distributed.context_parallel_attn: cu_seqlens: must rise from 0 to the whole "
                             f"packed length {q.shape[1] * world}, got {bounds}")
    attn = _RingAttn if mode == "ring" else _AllGatherAttn
    o, _ = attn.apply(q, k, v, g, sink_bias, scale, window_size, group, backend, bounds)
    return o
