"""The torch layer on CPU tensors (the CPU backend): custom-op registration (opcheck), autograd against an fp64
torch reference, torch.compile(fullgraph=True), decode and paged (fp8 too), errors. Skips without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch layer is tested where it is")

import flashgate  # noqa: E402
import torch_reference as ref  # noqa: E402
from support import fresh_seed  # noqa: E402

TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 5e-3, torch.float16: 5e-3}


class Seeded:
    """A torch.Generator and the seed it started from (for failure messages)."""

    def __init__(self, seed, device="cpu"):
        self.seed = seed
        self.gen = torch.Generator(device=device).manual_seed(seed)


@pytest.fixture
def gen():
    return Seeded(fresh_seed())


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Outputs the torch ops allocate start as NaN, so an element the library never writes fails."""
    def poisoned(shape, dtype, device):
        # int8 holds o's residual codes (-127..127): -128 is one no kernel writes.
        return torch.full(shape, -128 if dtype == torch.int8 else float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(flashgate.torch_ops, "_empty", poisoned)


def randn(gen, shape, dtype=torch.float32):
    return torch.randn(shape, generator=gen.gen, dtype=torch.float64).to(dtype)


FEATURES = {"plain": {}, "gate": {"gate": True}, "sink": {"sink": True}, "window": {"window": 6},
            "all": {"gate": True, "sink": True, "window": 9}}
LAYOUTS = {"dense": (2, 21, 4, 2, 16, 24, None), "packed": (1, 37, 6, 2, 12, 12, [0, 4, 4, 19, 37])}


def make_case(gen, dtype, layout, feature, gate_dtype=torch.float32):
    B, T, HQ, H, K, V, cu = LAYOUTS[layout]
    f = FEATURES[feature]
    fp = torch.float64 if dtype == torch.float64 else torch.float32
    return {
        "q": randn(gen, (B, T, HQ, K), dtype).requires_grad_(),
        "k": randn(gen, (B, T, H, K), dtype).requires_grad_(),
        "v": randn(gen, (B, T, H, V), dtype).requires_grad_(),
        "g": torch.nn.functional.logsigmoid(randn(gen, (B, T, HQ), fp)).to(
            fp if dtype == torch.float64 else gate_dtype).requires_grad_() if f.get("gate") else None,
        "sink_bias": randn(gen, (HQ,), fp).requires_grad_() if f.get("sink") else None,
        "window_size": f.get("window"),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32) if cu else None,
    }


def reference_grads(c, do, scale=None):
    leaves = {n: c[n].detach().double().requires_grad_() for n in ("q", "k", "v", "g", "sink_bias")
              if c[n] is not None}
    o, lse = ref.attention(leaves["q"], leaves["k"], leaves["v"], leaves.get("g"), leaves.get("sink_bias"), scale,
                           c["window_size"], c["cu_seqlens"])
    o.backward(do.double())
    return o.detach(), lse.detach(), {n: t.grad for n, t in leaves.items()}


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_autograd(gen, dtype, layout, feature):
    c = make_case(gen, dtype, layout, feature)
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], c["g"], None, c["window_size"], c["cu_seqlens"],
                                     sink_bias=c["sink_bias"], return_lse=True)
    assert o.dtype == dtype and not lse.requires_grad
    do = randn(gen, o.shape, dtype)
    o.backward(do)
    ro, rlse, rgrads = reference_grads(c, do)
    ref.assert_close("o", o, ro, TOL[dtype], gen.seed)
    ref.assert_close("lse", lse, rlse, 1e-5 if dtype != torch.float64 else 1e-10, gen.seed)
    for name, want in rgrads.items():
        got = c[name].grad
        assert got.dtype == c[name].dtype, name
        # dg and dsink are fp32 outputs of an fp64 computation: near exact whatever the input dtype.
        tol = TOL[dtype] if name in ("q", "k", "v") else 1e-10 if dtype == torch.float64 else 1e-5
        ref.assert_close("d" + name, got, want, tol, gen.seed)


def test_low_precision_gate_gets_its_gradient_in_its_dtype(gen):
    c = make_case(gen, torch.bfloat16, "packed", "gate", gate_dtype=torch.bfloat16)
    o = flashgate.parallel_attn(c["q"], c["k"], c["v"], c["g"], cu_seqlens=c["cu_seqlens"])
    o.float().sum().backward()  # the expanded gradient of a sum has stride 0 on the head axis
    assert c["g"].grad.dtype == torch.bfloat16
    _, _, rgrads = reference_grads(c, torch.ones_like(o))
    ref.assert_close("dg", c["g"].grad, rgrads["g"], 5e-3, gen.seed)


def test_no_grad_and_plain_forward(gen):
    c = make_case(gen, torch.float32, "dense", "plain")
    with torch.no_grad():
        o = flashgate.parallel_attn(c["q"], c["k"], c["v"], scale=0.2)
    ro, _ = ref.attention(c["q"].double(), c["k"].double(), c["v"].double(), scale=0.2)
    ref.assert_close("o", o, ro, 1e-5, gen.seed)


def test_strided_inputs(gen):
    B, T, HQ, H, D = 2, 13, 4, 2, 16
    qkv = randn(gen, (B, T, HQ + 2 * H, D + 8)).requires_grad_()
    q, k, v = qkv[..., :HQ, :D], qkv[..., HQ:HQ + H, 4:D + 4], qkv[..., HQ + H:, 8:]
    o = flashgate.parallel_attn(q, k, v)
    do = randn(gen, o.shape)
    o.backward(do)
    leaf = qkv.detach().double().requires_grad_()
    ro, _ = ref.attention(leaf[..., :HQ, :D], leaf[..., HQ:HQ + H, 4:D + 4], leaf[..., HQ + H:, 8:])
    ro.backward(do.double())
    ref.assert_close("o", o, ro, 1e-5, gen.seed)
    ref.assert_close("dqkv", qkv.grad, leaf.grad, 1e-5, gen.seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_forward_and_backward(gen, dtype):
    c = make_case(gen, dtype, "packed", "all")
    args = (c["q"], c["k"], c["v"], c["g"], c["sink_bias"], c["cu_seqlens"], None, c["window_size"], False, "auto",
            True)
    torch.library.opcheck(torch.ops.flashgate.attention_forward.default, args)
    o, lse, residual = torch.ops.flashgate.attention_forward(*args)
    assert residual.dtype == torch.int8
    assert residual.shape == (o.shape if dtype == torch.bfloat16 else (0,))
    do = randn(gen, o.shape).to(dtype)
    detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    bargs = (do, *detached[:3], o.detach(), lse, residual, *detached[3:6], None, c["window_size"], False, "auto")
    torch.library.opcheck(torch.ops.flashgate.attention_backward.default, bargs)


def test_torch_compile_fullgraph(gen):
    c = make_case(gen, torch.float32, "packed", "all")

    def step(q, k, v, g, sink):
        o, lse = flashgate.parallel_attn(q, k, v, g, None, c["window_size"], c["cu_seqlens"], sink_bias=sink,
                                         return_lse=True)
        return (o * o).sum(), lse

    eager_loss, eager_lse = step(c["q"], c["k"], c["v"], c["g"], c["sink_bias"])
    eager = torch.autograd.grad(eager_loss, [c[n] for n in ("q", "k", "v", "g", "sink_bias")])
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss, lse = compiled(c["q"], c["k"], c["v"], c["g"], c["sink_bias"])
    grads = torch.autograd.grad(loss, [c[n] for n in ("q", "k", "v", "g", "sink_bias")])
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(lse, eager_lse)
    for a, b in zip(grads, eager):
        torch.testing.assert_close(a, b)


# ---- decode and paged --------------------------------------------------------------------------------------

@pytest.mark.parametrize("feature", ["plain", "all"])
def test_decode(gen, feature):
    cu = torch.tensor([0, 7, 7, 30], dtype=torch.int64)
    N, T, HQ, H, K, V = 3, 30, 8, 2, 16, 8
    q, k, v = randn(gen, (1, N, HQ, K)), randn(gen, (1, T, H, K)), randn(gen, (1, T, H, V))
    full = feature == "all"
    g = torch.nn.functional.logsigmoid(randn(gen, (1, T, HQ))) if full else None
    sink = randn(gen, (HQ,)) if full else None
    o = flashgate.attn_decoding_one_step(q, k, v, g, None, cu, full, sink_bias=sink, window_size=5 if full else None)
    assert o.shape == (1, N, HQ, V)
    want = ref.decode(q[0].double(), k[0].double(), v[0].double(), cu, None if g is None else g[0].double(),
                      None if sink is None else sink.double(), None, 5 if full else None, full)
    ref.assert_close("o", o[0], want, 1e-5, gen.seed)


def paged_case(gen, dtype, block_size=16, query_lens=(1, 3, 8), context_lens=(40, 19, 8), HQ=8, H=2, K=32, V=16):
    N = len(query_lens)
    max_blocks = max(-(-c // block_size) for c in context_lens)
    num_blocks = N * max_blocks + 2
    table = torch.randperm(num_blocks, generator=gen.gen)[: N * max_blocks].reshape(N, max_blocks).int()
    cu_q = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    return dict(q=randn(gen, (int(cu_q[-1]), HQ, K), dtype), k_cache=randn(gen, (num_blocks, block_size, H, K)),
                v_cache=randn(gen, (num_blocks, block_size, H, V)), block_table=table,
                seq_lens_k=torch.tensor(context_lens, dtype=torch.int32), cu_seqlens_q=cu_q)


def test_paged_bf16_with_sink_window_and_out(gen):
    c = paged_case(gen, torch.bfloat16)
    c["k_cache"], c["v_cache"] = c["k_cache"].bfloat16(), c["v_cache"].bfloat16()
    sink = randn(gen, (8,))
    out = torch.full((12, 8, 16), float("nan"), dtype=torch.bfloat16)
    o = flashgate.paged_attention(**c, sink_bias=sink, window_size=7, max_seqlen_q=8, out=out)
    assert o is out
    want = ref.paged(**c, sink=sink, window=7)
    ref.assert_close("o", out, want, 5e-3, gen.seed)


@pytest.mark.parametrize("mode", ["per_tensor", "per_token"])
def test_paged_fp8(gen, mode):
    c = paged_case(gen, torch.bfloat16)
    scales = {}
    for name in ("k", "v"):
        cache = c[f"{name}_cache"]
        if mode == "per_token":
            s = cache.abs().amax(dim=-1).clamp_min(1e-6) / 448.0  # [num_blocks, block_size, H]
            c[f"{name}_cache"] = (cache / s[..., None]).to(torch.float8_e4m3fn)
            scales[f"{name}_scale"] = s.transpose(1, 2).contiguous()
        else:
            c[f"{name}_cache"] = (cache / 0.05).to(torch.float8_e4m3fn)
            scales[f"{name}_scale"] = 0.05
    o = flashgate.paged_attention(**c, **scales)
    as_tensor = {n: torch.tensor([s]) if isinstance(s, float) else s for n, s in scales.items()}
    want = ref.paged(**c, **as_tensor)
    ref.assert_close("o", o, want, 5e-3, gen.seed)


# ---- errors ------------------------------------------------------------------------------------------------

def test_errors_arrive_as_python_exceptions(gen):
    q, k = randn(gen, (1, 8, 4, 16)), randn(gen, (1, 8, 2, 16))
    with pytest.raises(ValueError, match=r"attention_forward: v: expected shape"):
        flashgate.parallel_attn(q, k, k[..., :1, :])
    with pytest.raises(TypeError, match=r"k: dtype must match q"):
        flashgate.parallel_attn(q, k.double(), k.double())
    with pytest.raises(ValueError, match=r"cu_seqlens: packed sequences need batch size B == 1"):
        flashgate.parallel_attn(q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1),
                                cu_seqlens=torch.tensor([0, 8], dtype=torch.int32))
    with pytest.raises(NotImplementedError, match=r"backend 'cuda'"):
        flashgate.parallel_attn(q, k, k, backend="cuda")
    with pytest.raises(ValueError, match=r"window: must be >= 0"):
        flashgate.parallel_attn(q, k, k, window_size=-3)


def test_missing_required_tensor_is_a_type_error_naming_it(gen):
    q, k = randn(gen, (1, 8, 4, 16)), randn(gen, (1, 8, 2, 16))
    with pytest.raises(TypeError, match=r"attention_forward: k: is required, got None"):
        flashgate.parallel_attn(q, None, k)
    with pytest.raises(TypeError, match=r"decode: v: is required, got None"):
        flashgate.attn_decoding_one_step(q[:, :1], k, None, cu_seqlens=torch.tensor([0, 8], dtype=torch.int32))


def test_empty_time_gives_empty_outputs(gen):
    q, k = torch.zeros(2, 0, 4, 16, requires_grad=True), torch.zeros(2, 0, 2, 16, requires_grad=True)
    o, lse = flashgate.parallel_attn(q, k, k, return_lse=True)
    assert o.shape == (2, 0, 4, 16) and lse.shape == (2, 0, 4)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_residual_codes_decode_in_python_as_in_cpp(gen, dtype):
    """flashgate.distributed merges slices with o's residual decoded in torch: that mirror of o_residual.h's rule
    puts the CPU op's o within a unit (2^-8 of o's ulp, one more where a code saturates) of the fp64 output."""
    from flashgate.distributed import _residual_value
    B, T, HQ, H, K, V = 2, 40, 4, 2, 16, 24
    q, k, v = randn(gen, (B, T, HQ, K), dtype), randn(gen, (B, T, H, K), dtype), randn(gen, (B, T, H, V), dtype)
    q = q * 4  # peaked rows too
    o, _, codes = torch.ops.flashgate.attention_forward(q, k, v, None, None, None, None, None, False, "cpu", True)
    exact, _ = ref.attention(q.double(), k.double(), v.double())
    assert codes.shape == o.shape and int(codes.min()) >= -127
    fixed = o.double() + _residual_value(codes, o).double()
    mantissa = 7 if dtype == torch.bfloat16 else 10
    _, e = torch.frexp(exact)
    unit = torch.ldexp(torch.ones_like(exact), e - 1 - mantissa - 8)
    normal = exact.abs() >= (2.0 ** -14 if dtype == torch.float16 else 2.0 ** -110)
    bound = unit * torch.where(codes.abs() == 127, 1.0, 0.5) + exact.abs() * 2.0 ** -24
    assert bool(((fixed - exact).abs() <= bound)[normal].all())
    assert (fixed - exact).abs()[normal].max() < (o.double() - exact).abs()[normal].max() / 50
