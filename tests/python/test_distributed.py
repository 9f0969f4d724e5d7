"""Context parallelism (flashgate.distributed) for real: 1, 2 and 4 processes on torch.distributed with gloo, both
modes (all-gather, ring), the CPU backend. Each rank attends its zigzag shard of one sequence; its shard of o and
of every gradient (q, k, v, g, sink) must match the single-process op on the whole sequence, in fp64. On a GPU,
two processes share it through gloo with bf16 CUDA tensors (the GPU slice ops, a head-dim pair per case), against
the fp64 reference by SPEC 7's relative RMS; with two GPUs or more, two processes on two GPUs over NCCL, bf16 and
fp16. Every collective runs under a bounded timeout. Skips without torch (with
gloo)."""

import contextlib
import datetime
import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the distributed layer is tested where it is")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

from support import fresh_seed  # noqa: E402

CASES = {
    "plain": {},
    "gqa+gate": {"gate": True},
    "sink": {"sink": True},
    "gate+window1+sink": {"gate": True, "window": 1, "sink": True},
    "window0": {"window": 0},
    "window5+gate": {"window": 5, "gate": True},
    "window1000": {"window": 1000},
}


@contextlib.contextmanager
def process_group(rank, world, port, seconds=60, backend="gloo"):
    """This process as rank `rank` of a `backend` group of `world` on localhost, every collective bounded by
    `seconds`."""
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=seconds))
    try:
        yield
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, world, port, seed, case, mode):
    import flashgate
    from flashgate import distributed as cp

    with process_group(rank, world, port):
        feats = CASES[case]
        gen = torch.Generator().manual_seed(seed)  # the same whole-sequence inputs on every rank
        B, T, HQ, H, K, V = 2, 8 * world, 4, 2, 16, 12
        q = torch.randn(B, T, HQ, K, generator=gen, dtype=torch.float64)
        k = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
        v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, HQ, generator=gen, dtype=torch.float64))
        s = torch.randn(HQ, generator=gen, dtype=torch.float64)
        do = torch.randn(B, T, HQ, V, generator=gen, dtype=torch.float64)
        g = g if feats.get("gate") else None
        s = s if feats.get("sink") else None
        window = feats.get("window")

        # The whole sequence on one process.
        leaves = [t.clone().requires_grad_() for t in (q, k, v, g, s) if t is not None]
        whole = flashgate.parallel_attn(leaves[0], leaves[1], leaves[2], leaves[3] if g is not None else None,
                                        window_size=window, sink_bias=leaves[-1] if s is not None else None,
                                        backend="cpu")
        whole_grads = torch.autograd.grad(whole, leaves, do)

        # This rank's shard through the distributed path.
        local = [cp.shard(t).clone().requires_grad_() if t.dim() > 1 else t.clone().requires_grad_()
                 for t in (q, k, v, g, s) if t is not None]
        o = cp.context_parallel_attn(local[0], local[1], local[2], g=local[3] if g is not None else None,
                                     sink_bias=local[-1] if s is not None else None, window_size=window, mode=mode)
        grads = torch.autograd.grad(o, local, cp.shard(do))

        def check(name, got, want):
            err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
            assert err < 1e-10, f"rank {rank} of {world}, {mode}, {case}: {name} differs by {err:.3g}"

        check("o", o, cp.shard(whole.detach()))
        names = ["dq", "dk", "dv"] + (["dg"] if g is not None else []) + (["dsink"] if s is not None else [])
        for name, got, want in zip(names, grads, whole_grads):
            check(name, got, want if name == "dsink" else cp.shard(want))


def run_packed(rank, world, port, seed, case, mode):
    import flashgate
    from flashgate import distributed as cp

    with process_group(rank, world, port):
        feats = CASES[case]
        gen = torch.Generator().manual_seed(seed)  # the same packed sequence on every rank
        T, HQ, H, K, V = 12 * world, 4, 2, 8, 8
        cuts = sorted(torch.randint(0, T + 1, (3,), generator=gen).tolist())
        cu = torch.tensor([0] + cuts + [T], dtype=torch.int32)  # sequences across chunk edges, maybe empty ones
        q = torch.randn(1, T, HQ, K, generator=gen, dtype=torch.float64)
        k = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64)
        v = torch.randn(1, T, H, V, generator=gen, dtype=torch.float64)
        g = torch.nn.functional.logsigmoid(torch.randn(1, T, HQ, generator=gen, dtype=torch.float64))
        s = torch.randn(HQ, generator=gen, dtype=torch.float64)
        do = torch.randn(1, T, HQ, V, generator=gen, dtype=torch.float64)
        g = g if feats.get("gate") else None
        s = s if feats.get("sink") else None
        window = feats.get("window")

        leaves = [t.clone().requires_grad_() for t in (q, k, v, g, s) if t is not None]
        whole = flashgate.parallel_attn(leaves[0], leaves[1], leaves[2], leaves[3] if g is not None else None,
                                        window_size=window, cu_seqlens=cu, sink_bias=leaves[-1] if s is not None
                                        else None, backend="cpu")
        whole_grads = torch.autograd.grad(whole, leaves, do)
        local = [cp.shard(t).clone().requires_grad_() if t.dim() > 1 else t.clone().requires_grad_()
                 for t in (q, k, v, g, s) if t is not None]
        o = cp.context_parallel_attn(local[0], local[1], local[2], g=local[3] if g is not None else None,
                                     sink_bias=local[-1] if s is not None else None, window_size=window,
                                     cu_seqlens=cu, mode=mode)
        grads = torch.autograd.grad(o, local, cp.shard(do))
        names = ["o", "dq", "dk", "dv"] + (["dg"] if g is not None else []) + (["dsink"] if s is not None else [])
        wants = [cp.shard(whole.detach())] + [w if n == "dsink" else cp.shard(w) for n, w in zip(names[1:], whole_grads)]
        for name, got, want in zip(names, [o] + list(grads), wants):
            err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
            assert err < 1e-10, (f"rank {rank} of {world}, {mode}, packed {cu.tolist()}, {case}: {name} differs by "
                                 f"{err:.3g}")


@pytest.mark.parametrize("mode", ["allgather", "ring"])
@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_packed_sequences_across_shards(world, case, mode):
    mp.start_processes(run_packed, args=(world, free_port(), fresh_seed(), case, mode), nprocs=world, join=True,
                       start_method="spawn")


def run_mismatch(rank, world, port):
    from flashgate import distributed as cp

    with process_group(rank, world, port):
        T = 8 if rank == 0 else 12  # rank 1 holds a longer shard
        q, k, v = torch.randn(1, T, 2, 8), torch.randn(1, T, 1, 8), torch.randn(1, T, 1, 8)
        with pytest.raises(ValueError, match="every rank must pass the same shapes"):
            cp.context_parallel_attn(q, k, v)


def run_compiled(rank, world, port):
    from flashgate import distributed as cp

    with process_group(rank, world, port, seconds=120):
        gen = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(1, 4 * world, h, 8, generator=gen, dtype=torch.float64) for h in (2, 1, 1))
        local = [cp.shard(t).requires_grad_() for t in (q, k, v)]

        def loss(q, k, v):
            return (cp.context_parallel_attn(q, k, v, window_size=3) ** 2).sum()

        eager = loss(*local)
        eager_grads = torch.autograd.grad(eager, local)
        compiled = torch.compile(loss)(*local)
        compiled_grads = torch.autograd.grad(compiled, local)
        assert abs(compiled.item() - eager.item()) <= 1e-12 * abs(eager.item()), f"rank {rank}: compiled loss differs"
        for got, want in zip(compiled_grads, eager_grads):
            assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), f"rank {rank}: compiled gradients differ"


def test_under_torch_compile():
    mp.start_processes(run_compiled, args=(2, free_port()), nprocs=2, join=True, start_method="spawn")


def test_shards_of_unequal_layout_raise_on_every_rank():
    mp.start_processes(run_mismatch, args=(2, free_port()), nprocs=2, join=True, start_method="spawn")


@pytest.mark.parametrize("mode", ["allgather", "ring"])
@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_context_parallel_matches_the_whole_sequence(world, case, mode):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(run_rank, args=(world, free_port(), fresh_seed(), case, mode), nprocs=world, join=True,
                       start_method="spawn")


# The GPU cases' head dims (K, V): one per kernel family of the slice ops on sm_90 (the narrow Hopper buckets 64 and
# 128, the wide 192 / 128 and 256 ones).
GPU_DIMS = {"plain": (64, 64), "gqa+gate": (128, 128), "sink": (128, 128), "window5+gate": (256, 256),
            "window1000": (192, 128)}


def run_rank_gpu(rank, world, port, seed, case, mode, backend="gloo", dtype="bf16"):
    """gloo: the ranks share one GPU; nccl: rank r on GPU r."""
    from flashgate import distributed as cp

    import torch_reference as ref

    if backend == "nccl":
        torch.cuda.set_device(rank)
    with process_group(rank, world, port, backend=backend):
        feats = CASES[case]
        low = torch.bfloat16 if dtype == "bf16" else torch.float16
        gen = torch.Generator().manual_seed(seed)  # the same whole-sequence inputs on every rank
        B, T, HQ, H = 1, 256 * world, 4, 2
        K, V = GPU_DIMS[case]
        x = [torch.randn(*shape, generator=gen, dtype=torch.float64)
             for shape in ((B, T, HQ, K), (B, T, H, K), (B, T, H, V), (B, T, HQ, V))]
        q, k, v, do = (t.to(low).double() for t in x)  # what the low-precision inputs hold
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, HQ, generator=gen, dtype=torch.float64))
        s = torch.randn(HQ, generator=gen, dtype=torch.float64)
        g = g if feats.get("gate") else None
        s = s if feats.get("sink") else None
        window = feats.get("window")

        leaves = [t.clone().requires_grad_() for t in (q, k, v, g, s) if t is not None]
        whole, _ = ref.attention(leaves[0], leaves[1], leaves[2], g=leaves[3] if g is not None else None,
                                 sink=leaves[-1] if s is not None else None, window=window)
        whole_grads = torch.autograd.grad(whole, leaves, do)

        dev = torch.device("cuda", torch.cuda.current_device())
        local = [(cp.shard(t) if t.dim() > 1 else t).to(dev, low if t.dim() == 4 else torch.float32)
                 .requires_grad_() for t in (q, k, v, g, s) if t is not None]
        o = cp.context_parallel_attn(local[0], local[1], local[2], g=local[3] if g is not None else None,
                                     sink_bias=local[-1] if s is not None else None, window_size=window, mode=mode)
        grads = torch.autograd.grad(o, local, cp.shard(do).to(dev, low))

        def check(name, got, want, tol):
            got, want = got.double().cpu(), want.double()
            err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
            assert err <= tol, (f"rank {rank} of {world}, {backend}, {dtype}, {mode}, {case}: {name} relative RMS "
                                f"{err:.3g} > {tol}")

        check("o", o, cp.shard(whole.detach()), 0.005)
        names = ["dq", "dk", "dv"] + (["dg"] if g is not None else []) + (["dsink"] if s is not None else [])
        for name, got, want in zip(names, grads, whole_grads):
            check(name, got, want if name == "dsink" else cp.shard(want), 0.005)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU run of context parallelism skipped")
@pytest.mark.parametrize("mode", ["allgather", "ring"])
@pytest.mark.parametrize("case", ["plain", "gqa+gate", "sink", "window5+gate", "window1000"])
def test_context_parallel_on_the_gpu(case, mode):
    mp.start_processes(run_rank_gpu, args=(2, free_port(), fresh_seed(), case, mode), nprocs=2, join=True,
                       start_method="spawn")


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2 or not dist.is_nccl_available(),
                    reason="fewer than two CUDA devices (or no NCCL): context parallelism across GPUs skipped")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mode", ["allgather", "ring"])
@pytest.mark.parametrize("case", ["plain", "gqa+gate", "sink", "window5+gate", "window1000"])
def test_context_parallel_across_gpus_over_nccl(case, mode, dtype):
    mp.start_processes(run_rank_gpu, args=(2, free_port(), fresh_seed(), case, mode, "nccl", dtype), nprocs=2,
                       join=True, start_method="spawn")


def run_dominant_key(rank, world, port, seed, mode):
    """bf16 on the CPU backend, a key 8 above the rest: every later row's mass sits on it, where D from the merged o
    rounded to bf16 misses SPEC 7 (dS = P (dP - D) cancels to D's error); with the slices' residuals merged and the
    merged o's rest kept, D is the fp32 merge's. The rows are peaked (a score 8 above the rest), SPEC 7's bf16 bound
    there is 0.01: each slice pair's dk share comes back rounded to bf16 before the fp32 sum, which costs the dominant
    key's dk (a cancellation) up to 0.006 where the unsplit op gets 0.001-0.003; without the residuals dq is at
    0.02-0.03."""
    from flashgate import distributed as cp

    import torch_reference as ref

    with process_group(rank, world, port):
        gen = torch.Generator().manual_seed(seed)
        B, T, HQ, H, K, V = 1, 64 * world, 4, 2, 32, 32
        q, k, v, do = (torch.randn(*shape, generator=gen, dtype=torch.float64)
                       for shape in ((B, T, HQ, K), (B, T, H, K), (B, T, H, V), (B, T, HQ, V)))
        q[..., 0], k[..., 0], k[:, 3, :, 0] = 8.0 * K ** 0.5, 0.0, 1.0  # key 3: a score 8 above the rest
        q, k, v, do = (t.to(torch.bfloat16).double() for t in (q, k, v, do))
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        whole, _ = ref.attention(*leaves)
        whole_grads = torch.autograd.grad(whole, leaves, do)
        local = [cp.shard(t).to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
        o = cp.context_parallel_attn(*local, mode=mode, backend="cpu")
        grads = torch.autograd.grad(o, local, cp.shard(do).to(torch.bfloat16))
        for name, got, want in zip(["dq", "dk", "dv"], grads, whole_grads):
            want = cp.shard(want)
            err = ((got.double() - want).norm() / want.norm()).item()
            assert err <= 0.01, f"rank {rank} of {world}, {mode}: {name} relative RMS {err:.3g}"


@pytest.mark.parametrize("mode", ["allgather", "ring"])
def test_dominant_key_gradients_in_bf16(mode):
    mp.start_processes(run_dominant_key, args=(2, free_port(), fresh_seed(), mode), nprocs=2, join=True,
                       start_method="spawn")


def test_world_size_one_is_the_op_itself(monkeypatch):
    """One rank holds the whole sequence in order: context_parallel_attn is parallel_attn itself (bit for bit,
    gradients too), with no collective at all."""
    import flashgate
    from flashgate import distributed as cp

    with process_group(0, 1, free_port()):
        def no_collective(*args, **kwargs):
            raise AssertionError("a collective ran at world size 1")
        for name in ("all_gather", "all_gather_object", "all_reduce", "broadcast", "isend", "irecv",
                     "batch_isend_irecv"):
            monkeypatch.setattr(dist, name, no_collective)
        gen = torch.Generator().manual_seed(fresh_seed())
        T, HQ, H, K, V = 24, 4, 2, 16, 8
        cu = torch.tensor([0, 5, 5, 24], dtype=torch.int32)
        for mode, packed in (("allgather", False), ("ring", False), ("allgather", True), ("ring", True)):
            B = 1 if packed else 2
            q, k = torch.randn(B, T, HQ, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
            v, do = torch.randn(B, T, H, V, generator=gen), torch.randn(B, T, HQ, V, generator=gen)
            g = torch.nn.functional.logsigmoid(torch.randn(B, T, HQ, generator=gen))
            s = torch.randn(HQ, generator=gen)
            runs = []
            for op in ("cp", "whole"):
                leaves = [t.clone().requires_grad_() for t in (q, k, v, g, s)]
                args = dict(g=leaves[3], sink_bias=leaves[4], window_size=7, cu_seqlens=cu if packed else None)
                if op == "cp":
                    o = cp.context_parallel_attn(*leaves[:3], mode=mode, **args)
                else:
                    o = flashgate.parallel_attn(*leaves[:3], args["g"], None, 7, args["cu_seqlens"],
                                                sink_bias=args["sink_bias"])
                runs.append([o.detach(), *torch.autograd.grad(o, leaves, do)])
            for name, a, b in zip(["o", "dq", "dk", "dv", "dg", "dsink"], *runs):
                assert torch.equal(a, b), f"{mode}, packed {packed}: {name} differs from the op"


def test_allgather_attends_a_query_chunk_with_at_most_two_slice_ops():
    """Mode allgather's plan (_slice_runs): per query chunk and sequence its diagonal (first, with the rank's own
    keys) and one run over every earlier key it sees, which together cover exactly the key chunks' pairs, the sink
    with the run holding the sequence's first key chunk. World 4, chunks of 8 tokens, dense and packed, windows."""
    from flashgate import distributed as cp

    class Keys:  # the chunks a rank reads: a number per position is enough to check what each run holds
        def __init__(self, rank, world, c):
            chunk = lambda b: torch.arange(b * c, (b + 1) * c).view(1, c, 1, 1)  # noqa: E731
            self.own = {b: chunk(b) for b in cp._chunks_of(rank, world)}
            self.chunks = [chunk(b) for b in range(2 * world)]

        def wait(self):
            return self.chunks

    world, c = 4, 8
    for bounds in ([0, 64], [0, 5, 5, 30, 64]):
        for window in (None, 5, 10, 40):
            for rank in range(world):
                mine = cp._chunks_of(rank, world)
                keys = Keys(rank, world, c)
                runs = list(cp._slice_runs(mine, c, bounds, window, keys, keys))
                for i, a in enumerate(mine):
                    for seq_parts in cp._sequence_parts(a, c, bounds, window):
                        s0, rows = seq_parts[0][0], seq_parts[0][1]
                        want = [k for (_, _, _, ks) in seq_parts for k in ks]
                        mine_runs = [r for r in runs if r[0] == i and r[3] == s0 and r[4] == rows]
                        assert 1 <= len(mine_runs) <= 2, (bounds, window, rank, a)
                        got = [int(x) for r in mine_runs for x in r[6].flatten()]
                        assert sorted(got) == want, (bounds, window, rank, a, got, want)
                        assert sum(r[2] for r in mine_runs) == 1, "the sink goes with exactly one op"
                diagonal = [all(b == r[1] for b, _ in r[5]) for r in runs]  # the rank's own keys only: first
                assert diagonal == sorted(diagonal, reverse=True), "a diagonal after the ops that wait for the others"


def test_a_window_fetches_only_the_chunks_it_reaches():
    """Mode allgather under a window: the key chunks each rank reads (the rest never travel). World 4, chunks of 8
    tokens, a window of 5: each query chunk reaches its own chunk and the one before."""
    from flashgate import distributed as cp

    assert cp._key_fetch(4, 0, 8, [0, 64], None, None) is None  # no window: every chunk (all-gather)
    assert cp._key_fetch(4, 0, 8, [0, 64], 5, None).needed == [[0, 6, 7], [0, 1, 5, 6], [1, 2, 4, 5], [2, 3, 4]]
    assert cp._key_fetch(4, 0, 8, [0, 64], 10, None).needed[1] == [0, 1, 4, 5, 6]  # 10 reaches into two back
    # Packed: a sequence that starts where chunk 6 does keeps rank 1's rows there from reaching chunk 5.
    assert cp._key_fetch(4, 0, 8, [0, 48, 64], 5, None).needed[1] == [0, 1, 6]
    assert cp._key_fetch(4, 0, 8, [0, 50, 64], 5, None).needed[1] == [0, 1, 5, 6]
