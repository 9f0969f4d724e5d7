"""The numpy path on the CPU backend against the independent fp64 numpy reference (numpy_reference.py):
forward, backward, decode, paged (incl. fp8 per-tensor and per-token scales), and the error contract.
No torch needed."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import flashgate
from flashgate import _C

import numpy_reference as ref
from support import SeededRng, assert_close, fresh_seed, gradient_floors, output_bias

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
DTYPES = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": BF16}
# Outputs are exact fp64 accumulations rounded to the output dtype; low precision uses the SPEC 7 budget.
TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 5e-3, "bfloat16": 5e-3}


@pytest.fixture
def rng():
    return SeededRng(fresh_seed())


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every output the wrappers allocate starts as NaN (or a sentinel for integers), so an element the
    library never writes fails the comparison."""
    def poisoned(shape, dtype):
        a = np.empty(shape, dtype=dtype)
        a[...] = np.nan if np.dtype(dtype).kind == "f" or np.dtype(dtype) in (BF16, FP8) else -7
        return a
    monkeypatch.setattr(flashgate.ops, "_empty", poisoned)


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def log_gate(rng, shape, dtype=np.float32):
    return (-np.logaddexp(0.0, -rng.standard_normal(shape))).astype(dtype)  # logsigmoid(N(0,1))


# ---- forward and backward --------------------------------------------------------------------------------

FEATURES = {
    "plain": {},
    "gate": {"gate": True},
    "sink": {"sink": True},
    "window": {"window": 5},
    "all": {"gate": True, "sink": True, "window": 7},
}
LAYOUTS = {
    # name: (B, T, HQ, H, K, V, cu_seqlens)
    "dense": (2, 23, 4, 2, 16, 24, None),
    "packed": (1, 41, 4, 1, 20, 12, [0, 0, 5, 6, 28, 28, 41]),  # zero-length segments, MQA
}


def attention_case(rng, dtype, layout, feature):
    B, T, HQ, H, K, V, cu = LAYOUTS[layout]
    f = FEATURES[feature]
    c = {
        "q": randn(rng, (B, T, HQ, K), dtype), "k": randn(rng, (B, T, H, K), dtype),
        "v": randn(rng, (B, T, H, V), dtype),
        "g": log_gate(rng, (B, T, HQ)) if f.get("gate") else None,
        "sink_bias": randn(rng, (HQ,), np.float32) if f.get("sink") else None,
        "window_size": f.get("window"),
        "cu_seqlens": np.array(cu, dtype=np.int32) if cu is not None else None,
    }
    if dtype == np.float64:
        for name in ("g", "sink_bias"):
            if c[name] is not None:
                c[name] = c[name].astype(np.float64)
    return c


def reference_forward(c, scale=None):
    return ref.attention(c["q"], c["k"], c["v"], c["g"], c["sink_bias"], scale, c["window_size"], c["cu_seqlens"])


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward(rng, dtype, layout, feature):
    c = attention_case(rng, DTYPES[dtype], layout, feature)
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], c["g"], None, c["window_size"], c["cu_seqlens"],
                                     sink_bias=c["sink_bias"], return_lse=True)
    ro, rlse = reference_forward(c)
    assert o.dtype == DTYPES[dtype] and o.shape == ro.shape
    assert lse.dtype == (np.float64 if dtype == "float64" else np.float32)
    assert_close("o", o, ro, TOL[dtype], rng.seed)
    assert_close("lse", lse, rlse, min(TOL[dtype], 1e-6), rng.seed)


def test_forward_returns_o_only_by_default(rng):
    c = attention_case(rng, np.float32, "dense", "plain")
    o = flashgate.parallel_attn(c["q"], c["k"], c["v"])
    assert isinstance(o, np.ndarray)


def test_forward_explicit_scale_and_window_beyond_T(rng):
    c = attention_case(rng, np.float64, "dense", "gate")
    o = flashgate.parallel_attn(c["q"], c["k"], c["v"], c["g"], 0.37, 1000)
    ro, _ = ref.attention(c["q"], c["k"], c["v"], c["g"], None, 0.37, None)
    assert_close("o", o, ro, 1e-12, rng.seed)


@pytest.mark.parametrize("with_sink", [False, True])
def test_forward_window_zero_rows_are_empty(rng, with_sink):
    c = attention_case(rng, np.float32, "packed", "sink" if with_sink else "plain")
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], window_size=0, cu_seqlens=c["cu_seqlens"],
                                     sink_bias=c["sink_bias"], return_lse=True)
    assert np.all(o == 0)
    expected = np.broadcast_to(c["sink_bias"], lse.shape) if with_sink else np.full(lse.shape, -np.inf)
    assert np.array_equal(lse, expected)


@pytest.mark.parametrize("feature", ["plain", "gate", "sink", "all"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_backward(rng, dtype, layout, feature):
    c = attention_case(rng, DTYPES[dtype], layout, feature)
    q, k, v = c["q"], c["k"], c["v"]
    o, lse = flashgate.parallel_attn(q, k, v, c["g"], None, c["window_size"], c["cu_seqlens"],
                                     sink_bias=c["sink_bias"], return_lse=True)
    do = randn(rng, o.shape, o.dtype)
    dq, dk, dv, dg, dsink = flashgate.ops.parallel_attn_backward(
        do, q, k, v, o, lse, c["g"], None, c["window_size"], c["cu_seqlens"], sink_bias=c["sink_bias"])
    expected = ref.attention_backward(do, q, k, v, c["g"], c["sink_bias"], None, c["window_size"],
                                      c["cu_seqlens"])
    fp = np.float64 if dtype == "float64" else np.float32
    for name, got, want, want_dtype in zip(("dq", "dk", "dv", "dg", "dsink"), (dq, dk, dv, dg, dsink), expected,
                                           (q.dtype, k.dtype, v.dtype, fp, fp)):
        if want is None:
            assert got is None, name
            continue
        assert got.dtype == want_dtype, name
        # fp64 accumulation rounded to the output dtype: fp32 outputs (dg, dsink too) are near exact.
        tol = 1e-10 if dtype == "float64" else 1e-5 if got.dtype == np.float32 else TOL[dtype]
        assert_close(name, got, want, tol, rng.seed)


# Scores far from zero (the same sweep as the GPU tests): every score shifted by `offset` through one extra
# dimension, one key per sequence `DOMINANT` above the rest through a second; softmax is shift-invariant.
SCORE_OFFSETS = [0, -8, -16, -24, -40, -80, 40]
DOMINANT = 8.0


@pytest.mark.parametrize("feature", ["plain", "all", "w1_sink"])
@pytest.mark.parametrize("scale", [None, 1.0])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("offset", SCORE_OFFSETS)
def test_scores_far_from_zero(rng, offset, dtype, scale, feature):
    layout = "packed" if feature == "all" else "dense"
    c = attention_case(rng, np.float32, layout, "sink" if feature == "w1_sink" else feature)
    if feature == "w1_sink":
        c["window_size"] = 1
    q, k = c["q"], c["k"]
    s = ref.api_scale(scale, q.shape[-1])
    q[..., 0], k[..., 0] = offset / s, 1.0
    q[..., 1], k[..., 1] = DOMINANT / s, 0.0
    starts = c["cu_seqlens"][:-1] if c["cu_seqlens"] is not None else [0]
    for j in starts:
        if j + 2 < k.shape[1]:
            k[:, j + 2, :, 1] = 1.0
    q, k, v = (x.astype(DTYPES[dtype]) for x in (q, k, c["v"]))
    args = (c["g"], scale, c["window_size"], c["cu_seqlens"])
    o, lse = flashgate.parallel_attn(q, k, v, *args, sink_bias=c["sink_bias"], return_lse=True)
    ro, rlse = ref.attention(q, k, v, c["g"], c["sink_bias"], scale, c["window_size"], c["cu_seqlens"])
    assert_close("o", o, ro, TOL[dtype], rng.seed)
    assert_close("lse", lse, rlse, 1e-6, rng.seed)
    do = randn(rng, o.shape, o.dtype)
    got = flashgate.ops.parallel_attn_backward(do, q, k, v, o, lse, *args, sink_bias=c["sink_bias"])
    want = ref.attention_backward(do, q, k, v, c["g"], c["sink_bias"], scale, c["window_size"], c["cu_seqlens"])
    floors = gradient_floors(ref.api_scale(scale, q.shape[-1]), do, q, k, v)
    for name, g_, w in zip(("dq", "dk", "dv", "dg", "dsink"), got, want):
        if w is not None:
            tol = TOL[dtype] if g_.dtype == DTYPES[dtype] else 1e-5
            assert_close(name, g_, w, tol, rng.seed, floors.get(name, 0.0))


def test_backward_deterministic_flag_repeats_bitwise(rng):
    c = attention_case(rng, np.float32, "packed", "all")
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], c["g"], None, c["window_size"], c["cu_seqlens"],
                                     sink_bias=c["sink_bias"], return_lse=True)
    do = randn(rng, o.shape, o.dtype)
    runs = [flashgate.ops.parallel_attn_backward(do, c["q"], c["k"], c["v"], o, lse, c["g"], None, c["window_size"],
                                                 c["cu_seqlens"], sink_bias=c["sink_bias"], deterministic=True)
            for _ in range(2)]
    for a, b in zip(*runs):
        assert np.array_equal(a, b)


def test_reference_backward_matches_finite_differences(rng):
    """The numpy reference's gradients are themselves checked, so the backward test stands on its own."""
    B, T, HQ, H, K, V = 1, 7, 2, 1, 3, 2
    q, k, v = (rng.standard_normal(s) for s in ((B, T, HQ, K), (B, T, H, K), (B, T, H, V)))
    g, sink = -np.abs(rng.standard_normal((B, T, HQ))), rng.standard_normal(HQ)
    cu = np.array([0, 3, 7])
    do = rng.standard_normal((B, T, HQ, V))

    def loss(q_, k_, v_, g_, s_):
        return (ref.attention(q_, k_, v_, g_, s_, 0.7, 2, cu)[0] * do).sum()

    grads = ref.attention_backward(do, q, k, v, g, sink, 0.7, 2, cu)
    args = [q, k, v, g, sink]
    eps = 1e-6
    for i, grad in enumerate(grads):
        num = np.zeros_like(args[i])
        for idx in np.ndindex(args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            num[idx] = (loss(*plus) - loss(*minus)) / (2 * eps)
        np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


def test_inputs_with_strides(rng):
    """Any strides with a unit-stride head axis: slices of a fused qkv buffer, no copies."""
    B, T, HQ, H, D = 2, 19, 4, 2, 8
    qkv = rng.standard_normal((B, T, HQ + 2 * H, D + 3)).astype(np.float32)
    q, k, v = qkv[:, :, :HQ, :D], qkv[:, :, HQ:HQ + H, :D], qkv[:, :, HQ + H:, 1:D + 1]
    o = flashgate.parallel_attn(q, k, v)
    assert_close("o", o, ref.attention(q, k, v)[0], TOL["float32"], rng.seed)


# ---- decode ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("feature", ["plain", "gate", "gate_scale", "sink", "window", "all"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_decode(rng, dtype, feature):
    dt = DTYPES[dtype]
    cu = np.array([0, 9, 9, 10, 40, 63], dtype=np.int64)  # an empty sequence, a single key
    N, T, HQ, H, K, V = len(cu) - 1, int(cu[-1]), 6, 2, 24, 40
    q, k, v = randn(rng, (1, N, HQ, K), dt), randn(rng, (1, T, H, K), dt), randn(rng, (1, T, H, V), dt)
    fp = np.float64 if dtype == "float64" else np.float32
    g = log_gate(rng, (1, T, HQ), fp) if feature in ("gate", "gate_scale", "all") else None
    sink = randn(rng, (HQ,), fp) if feature in ("sink", "all") else None
    window = 4 if feature in ("window", "all") else None
    gate_scale = feature in ("gate_scale", "all")
    o = flashgate.attn_decoding_one_step(q, k, v, g, 0.3, cu, gate_scale, sink_bias=sink, window_size=window)
    assert o.shape == (1, N, HQ, V) and o.dtype == dt
    want = ref.decode(q[0], k[0], v[0], cu, None if g is None else g[0], sink, 0.3, window, gate_scale)
    assert_close("o", o[0], want, TOL[dtype], rng.seed)
    assert np.all(o[0, 1] == 0)  # the empty sequence


def test_decode_without_batch_axis_and_equal_to_last_forward_row(rng):
    T, HQ, H, D = 17, 4, 4, 16
    q, k, v = (randn(rng, (1, T, n, D), np.float64) for n in (HQ, H, H))
    g, sink = log_gate(rng, (1, T, HQ), np.float64), randn(rng, (HQ,), np.float64)
    o_full = flashgate.parallel_attn(q, k, v, g, window_size=6, sink_bias=sink)
    cu = np.array([0, T], dtype=np.int32)
    o = flashgate.attn_decoding_one_step(q[0, -1:], k[0], v[0], g[0], None, cu, sink_bias=sink, window_size=6)
    assert o.shape == (1, HQ, D)
    assert_close("o", o[0], o_full[0, -1], 1e-12, rng.seed)


# ---- paged attention -------------------------------------------------------------------------------------

def paged_case(rng, dtype, cache_dtype, block_size, query_lens, context_lens, HQ=8, H=2, K=32, V=24,
               nan_unused=True):
    N = len(query_lens)
    max_blocks = max(-(-c // block_size) for c in context_lens) + 1
    num_blocks = N * max_blocks + 3
    table = rng.permutation(num_blocks)[: N * max_blocks].reshape(N, max_blocks).astype(np.int32)
    k_cache = randn(rng, (num_blocks, block_size, H, K), np.float32)
    v_cache = randn(rng, (num_blocks, block_size, H, V), np.float32)
    # Token magnitudes that differ by up to 20x, so per-token scales matter.
    k_cache *= rng.uniform(0.05, 1.0, (num_blocks, block_size, H, 1)).astype(np.float32)
    v_cache *= rng.uniform(0.05, 1.0, (num_blocks, block_size, H, 1)).astype(np.float32)
    if nan_unused:
        for n, length in enumerate(context_lens):
            for j in range(length, max_blocks * block_size):
                b = table[n, j // block_size]
                k_cache[b, j % block_size] = np.nan
                v_cache[b, j % block_size] = np.nan
        for n, length in enumerate(context_lens):
            table[n, -(-length // block_size):] = -1  # unused table entries may hold anything
    cu_q = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    q = randn(rng, (int(cu_q[-1]), HQ, K), dtype)
    return dict(q=q, k_cache=k_cache.astype(cache_dtype), v_cache=v_cache.astype(cache_dtype), block_table=table,
                seq_lens_k=np.array(context_lens, dtype=np.int32), cu_seqlens_q=cu_q)


def per_token_scales(rng, c):
    """Per-token fp8 quantisation of the caches: scale = amax / 448 per (block, head, slot)."""
    out = {}
    for name in ("k", "v"):
        cache = c[f"{name}_cache"].astype(np.float32)
        amax = np.abs(cache).max(axis=-1)  # [num_blocks, block_size, H]; NaN in unused slots stays NaN
        scale = np.maximum(amax, 1e-6) / 448.0
        c[f"{name}_cache"] = (cache / scale[..., None]).astype(FP8)
        out[f"{name}_scale"] = np.ascontiguousarray(scale.transpose(0, 2, 1)).astype(np.float32)
    return out


@pytest.mark.parametrize("feature", ["plain", "sink", "window", "all"])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_paged(rng, dtype, block_size, feature):
    dt = DTYPES[dtype]
    # decode, speculative verify (4 tokens ending inside a page), a prefill chunk, a fresh prefill.
    c = paged_case(rng, dt, dt, block_size, [1, 4, 9, 21], [50, 35, 17, 21])
    sink = randn(rng, (8,), np.float32) if feature in ("sink", "all") else None
    window = 11 if feature in ("window", "all") else None
    o = flashgate.paged_attention(**c, sink_bias=sink, window_size=window)
    want = ref.paged(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens_k"], c["cu_seqlens_q"],
                     sink, None, window)
    assert o.dtype == dt
    assert_close("o", o, want, TOL[dtype], rng.seed)


@pytest.mark.parametrize("mode", ["per_tensor_number", "per_tensor_array", "per_token"])
def test_paged_fp8(rng, mode):
    c = paged_case(rng, BF16, np.float32, 16, [1, 3, 12], [80, 19, 12], HQ=16, H=2, K=64, V=64)
    if mode == "per_token":
        scales = per_token_scales(rng, c)
    else:
        c["k_cache"], c["v_cache"] = (c["k_cache"] / 0.02).astype(FP8), (c["v_cache"] / 0.03).astype(FP8)
        as_array = mode == "per_tensor_array"
        scales = {"k_scale": np.array([0.02], np.float32) if as_array else 0.02,
                  "v_scale": np.array([0.03], np.float32) if as_array else 0.03}
    o = flashgate.paged_attention(**c, **scales)
    want = ref.paged(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens_k"], c["cu_seqlens_q"],
                     k_scale=scales["k_scale"], v_scale=scales["v_scale"])
    assert_close("o", o, want, 5e-3, rng.seed)
    bias = output_bias(o, want) - output_bias(want.astype(o.dtype), want)  # beyond the output's own rounding
    assert abs(bias) <= 5e-4, f"output bias {bias} (seed {rng.seed})"


def test_paged_writes_into_out(rng):
    c = paged_case(rng, np.float32, np.float32, 16, [2, 1], [20, 33])
    out = np.full((3, 8, 24), np.nan, dtype=np.float32)
    o = flashgate.paged_attention(**c, out=out)
    assert o is out
    want = ref.paged(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens_k"], c["cu_seqlens_q"])
    assert_close("o", out, want, TOL["float32"], rng.seed)


def test_paged_equals_decode_on_the_same_keys(rng):
    lens = [5, 16, 40]
    c = paged_case(rng, np.float64, np.float64, 16, [1, 1, 1], lens, HQ=4, H=2, K=8, V=8, nan_unused=False)
    # The same keys, packed for decode.
    k = np.concatenate([ref.gather_paged(c["k_cache"], c["block_table"], n, L) for n, L in enumerate(lens)])
    v = np.concatenate([ref.gather_paged(c["v_cache"], c["block_table"], n, L) for n, L in enumerate(lens)])
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    o_paged = flashgate.paged_attention(**c)
    o_decode = flashgate.attn_decoding_one_step(c["q"], k, v, cu_seqlens=cu)
    assert_close("o", o_paged, o_decode, 1e-12, rng.seed)


# ---- module-level API --------------------------------------------------------------------------------------

def test_module_info():
    assert flashgate.__version__ == _C.version()
    assert isinstance(flashgate.cuda_available(), bool)
    assert isinstance(flashgate.built_with_cuda(), bool)


def test_import_without_torch():
    """flashgate imports and runs its numpy path where torch cannot be imported."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, flashgate\n"
            "assert flashgate._torch is None\n"
            "q = np.ones((1, 3, 1, 4), np.float32)\n"
            "print(flashgate.parallel_attn(q, q, q).shape)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 3, 1, 4)"


def test_dlpack_capsules_and_workspace_queries(rng):
    q, k, v = (randn(rng, (1, 9, 2, 8), np.float32) for _ in range(3))
    o = np.full((1, 9, 2, 8), np.nan, np.float32)
    assert isinstance(_C.attention_forward_workspace_size(q, k, v, o), int)
    _C.attention_forward(q.__dlpack__(), k.__dlpack__(), v.__dlpack__(), o.__dlpack__(), backend="cpu",
                         workspace=lambda n: np.empty(n, np.uint8))
    assert_close("o", o, ref.attention(q, k, v)[0], TOL["float32"], rng.seed)


# ---- errors: type, message, and nothing written ------------------------------------------------------------

def _forward_args(rng, **over):
    c = {"q": randn(rng, (1, 12, 4, 8), np.float32), "k": randn(rng, (1, 12, 2, 8), np.float32),
         "v": randn(rng, (1, 12, 2, 8), np.float32)}
    c.update(over)
    return c


@pytest.mark.parametrize("case, error, message", [
    ({"k": "shape"}, ValueError, r"attention_forward: k: expected shape \[B,T,H,K\]"),
    ({"k": "dtype"}, TypeError, r"k: dtype must match q \(float32\), got float16"),
    ({"k": "heads"}, ValueError, r"HQ % H == 0"),
    ({"window_size": -1}, ValueError, r"window: must be >= 0"),
    ({"cu_seqlens": [0, 5, 11]}, ValueError, r"cu_seqlens: must end at the total length 12, got 11"),
    ({"cu_seqlens": [0, 7, 5, 12]}, ValueError, r"cu_seqlens: must not decrease"),
    ({"cu_seqlens": [1, 12]}, ValueError, r"cu_seqlens: must start at 0"),
    ({"cu_seqlens_float": True}, TypeError, r"cu_seqlens: dtype must be one of \{int32, int64\}"),
    ({"q": "head_stride"}, ValueError, r"q: .*must be contiguous"),
    ({"q": "list"}, TypeError, r"q: expected a numpy array"),
    ({"q": "int16"}, TypeError, r"q: unsupported dtype int16"),
    ({"g": "shape"}, ValueError, r"g: expected shape \[B,T,HQ\]"),
    ({"sink_bias": "shape"}, ValueError, r"sink: expected shape \[HQ\]"),
    ({"backend": "tpu"}, ValueError, r"unknown backend 'tpu'"),
    ({"backend": "cuda"}, NotImplementedError, r"backend 'cuda'"),
    ({"k": "batch"}, ValueError, r"k: expected shape"),
])
def test_forward_errors(rng, case, error, message):
    c = _forward_args(rng)
    kwargs = {}
    key, val = next(iter(case.items()))
    if key == "k":
        c["k"] = {"shape": c["k"][..., :4], "dtype": c["k"].astype(np.float16), "heads": randn(rng, (1, 12, 3, 8),
                  np.float32), "batch": randn(rng, (2, 12, 2, 8), np.float32)}[val]
        if val == "heads":
            c["v"] = randn(rng, (1, 12, 3, 8), np.float32)
    elif key == "q":
        c["q"] = {"head_stride": np.asfortranarray(c["q"]), "list": c["q"].tolist(),
                  "int16": c["q"].astype(np.int16)}[val]
    elif key == "cu_seqlens":
        kwargs["cu_seqlens"] = np.array(val, dtype=np.int32)
    elif key == "cu_seqlens_float":
        kwargs["cu_seqlens"] = np.array([0, 12], dtype=np.float32)
    elif key == "g":
        kwargs["g"] = log_gate(rng, (1, 12, 2))
    elif key == "sink_bias":
        kwargs["sink_bias"] = np.zeros(3, np.float32)
    else:
        kwargs[key] = val
    with pytest.raises(error, match=message):
        flashgate.parallel_attn(c["q"], c["k"], c["v"], **kwargs)


def test_error_writes_nothing(rng):
    c = _forward_args(rng)
    o = np.full((1, 12, 4, 8), 3.0, np.float32)
    with pytest.raises(ValueError):
        _C.attention_forward(c["q"], c["k"], c["v"], o, window=-2)
    assert np.all(o == 3.0)


def test_read_only_output_is_refused(rng):
    c = _forward_args(rng)
    o = np.zeros((1, 12, 4, 8), np.float32)
    o.setflags(write=False)
    with pytest.raises(ValueError, match=r"o: is an output and must be writable"):
        _C.attention_forward(c["q"], c["k"], c["v"], o)


def test_dtype_override_needs_equal_element_size(rng):
    c = _forward_args(rng)
    o = np.zeros((1, 12, 4, 8), np.float32)
    with pytest.raises(TypeError, match=r"cannot read float32 elements as float8_e4m3fn"):
        _C.attention_forward((c["q"], "float8_e4m3fn"), c["k"], c["v"], o)
    with pytest.raises(TypeError, match=r"unknown dtype name 'float4'"):
        _C.attention_forward((c["q"], "float4"), c["k"], c["v"], o)


def test_backward_errors(rng):
    c = _forward_args(rng)
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], return_lse=True)
    with pytest.raises(ValueError, match=r"attention_backward: dout: expected shape \[B,T,HQ,V\]"):
        flashgate.ops.parallel_attn_backward(o[:, :5], c["q"], c["k"], c["v"], o, lse)
    with pytest.raises(ValueError, match=r"attention_backward: lse: "):
        flashgate.ops.parallel_attn_backward(o, c["q"], c["k"], c["v"], o, lse[..., :2])


def test_decode_errors(rng):
    q, k, v = randn(rng, (1, 2, 4, 8), np.float32), randn(rng, (1, 10, 2, 8), np.float32), randn(rng, (1, 10, 2, 8),
                                                                                                 np.float32)
    with pytest.raises(ValueError, match=r"decode: cu_seqlens: is required"):
        flashgate.attn_decoding_one_step(q, k, v)
    with pytest.raises(ValueError, match=r"decode: cu_seqlens: expected shape \[N\+1\]"):
        flashgate.attn_decoding_one_step(q, k, v, cu_seqlens=np.array([0, 10], np.int32))
    with pytest.raises(ValueError, match=r"decode: cu_seqlens: must end at the total length 10"):
        flashgate.attn_decoding_one_step(q, k, v, cu_seqlens=np.array([0, 4, 9], np.int32))


def test_paged_errors(rng):
    c = paged_case(rng, np.float32, np.float32, 16, [1, 2], [20, 30])
    bad_table = c["block_table"].copy()
    bad_table[0, 0] = 10_000
    with pytest.raises(ValueError, match=r"block_table: entry 10000 at \[0,0\] is out of range"):
        flashgate.paged_attention(**{**c, "block_table": bad_table})
    with pytest.raises(ValueError, match=r"seq_lens_k: is larger than the block table holds"):
        flashgate.paged_attention(**{**c, "seq_lens_k": np.array([20, 1000], np.int32)})
    with pytest.raises(ValueError, match=r"cu_seqlens_q: gives more query tokens \(2\) than seq_lens_k \(1\)"):
        flashgate.paged_attention(**{**c, "seq_lens_k": np.array([20, 1], np.int32)})
    with pytest.raises(ValueError, match=r"k_scale: is given but the caches are not float8_e4m3fn"):
        flashgate.paged_attention(**c, k_scale=0.5)
    with pytest.raises(TypeError, match=r"block_table: dtype must be .*int32"):
        flashgate.paged_attention(**{**c, "block_table": c["block_table"].astype(np.int64)})
    with pytest.raises(ValueError, match=r"k_cache: block_size \(axis 1\) must be a multiple of 16"):
        flashgate.paged_attention(**{**c, "k_cache": c["k_cache"][:, :8], "v_cache": c["v_cache"][:, :8]})
    with pytest.raises(ValueError, match=r"max_seqlen_q: must be >= 1"):
        flashgate.paged_attention(**c, max_seqlen_q=0)
    with pytest.raises(ValueError, match=r"max_seqlen_q: is smaller than the query tokens \(2\) for sequence 1"):
        flashgate.paged_attention(**c, max_seqlen_q=1)


def test_paged_max_seqlen_q_changes_nothing_on_the_cpu(rng):
    c = paged_case(rng, np.float32, np.float32, 16, [1, 4, 9], [50, 35, 17])
    want = flashgate.paged_attention(**c)
    for bound in (9, 100):
        np.testing.assert_array_equal(flashgate.paged_attention(**c, max_seqlen_q=bound), want)


def test_numpy_wrappers_refuse_other_types(rng):
    q = randn(rng, (1, 4, 1, 8), np.float32)
    with pytest.raises(TypeError, match=r"flashgate.ops: k: expected a numpy array, got list"):
        flashgate.ops.parallel_attn(q, q.tolist(), q)


# ---- required tensors and empty problems -----------------------------------------------------------------

def _required_calls(rng):
    """(call, its required tensor arguments by name) for every op, on small valid numpy inputs."""
    c = _forward_args(rng)
    o, lse = flashgate.parallel_attn(c["q"], c["k"], c["v"], return_lse=True)
    decode = {"q": randn(rng, (1, 2, 4, 8), np.float32), "k": randn(rng, (1, 10, 2, 8), np.float32),
              "v": randn(rng, (1, 10, 2, 8), np.float32)}
    paged = paged_case(rng, np.float32, np.float32, 16, [1, 2], [20, 30])
    return [
        (lambda a: flashgate.parallel_attn(a["q"], a["k"], a["v"]), c),
        (lambda a: flashgate.ops.parallel_attn_backward(a["do"], a["q"], a["k"], a["v"], a["o"], a["lse"]),
         {"do": o, **c, "o": o, "lse": lse}),
        (lambda a: flashgate.attn_decoding_one_step(a["q"], a["k"], a["v"], cu_seqlens=np.array([0, 4, 10], np.int32)),
         decode),
        (lambda a: flashgate.paged_attention(**a), paged),
    ]


def test_missing_required_tensor_is_a_type_error_naming_it(rng):
    # None where a tensor is required used to fail inside the wrapper with AttributeError ('NoneType' has no
    # attribute 'shape'); it is a TypeError naming the argument, whichever argument it is.
    for call, args in _required_calls(rng):
        call(args)  # valid as given
        for name in args:
            with pytest.raises(TypeError, match=rf": {name}: is required, got None"):
                call({**args, name: None})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_empty_time_gives_empty_outputs(rng, dtype):
    # numpy exports empty arrays with strides 0 on every axis: with no elements there is no layout to refuse.
    dt = DTYPES[dtype]
    B, HQ, H, K, V = 2, 4, 2, 8, 6
    q, k, v = np.zeros((B, 0, HQ, K), dt), np.zeros((B, 0, H, K), dt), np.zeros((B, 0, H, V), dt)
    g, sink = np.zeros((B, 0, HQ), np.float32), randn(rng, (HQ,), np.float32)
    o, lse = flashgate.parallel_attn(q, k, v, g, sink_bias=sink, return_lse=True)
    assert o.shape == (B, 0, HQ, V) and o.dtype == dt and lse.shape == (B, 0, HQ)
    dq, dk, dv, dg, dsink = flashgate.ops.parallel_attn_backward(o, q, k, v, o, lse, g, sink_bias=sink)
    assert (dq.shape, dk.shape, dv.shape, dg.shape) == (q.shape, k.shape, v.shape, g.shape)
    np.testing.assert_array_equal(dsink, np.zeros(HQ, np.float32))  # no query: no sink gradient


def test_empty_packed_batch_and_zero_queries(rng):
    q = np.zeros((1, 0, 4, 8), np.float32)
    o = flashgate.parallel_attn(q, np.zeros((1, 0, 2, 8), np.float32), np.zeros((1, 0, 2, 8), np.float32),
                                cu_seqlens=np.array([0, 0, 0], np.int32))
    assert o.shape == (1, 0, 4, 8)
    o = flashgate.attn_decoding_one_step(np.zeros((1, 0, 4, 8), np.float32), np.zeros((1, 0, 2, 8), np.float32),
                                         np.zeros((1, 0, 2, 8), np.float32), cu_seqlens=np.array([0], np.int32))
    assert o.shape == (1, 0, 4, 8)
    c = paged_case(rng, np.float32, np.float32, 16, [0, 0], [20, 0])
    assert c["q"].shape == (0, 8, 32)
    assert flashgate.paged_attention(**c).shape == (0, 8, 24)


def test_every_wrapper_checks_its_required_tensors_first():
    # The torch wrappers cannot run here (no torch): check by their source that every public wrapper, numpy and
    # torch, begins with require_tensors over exactly its parameters without a default.
    import ast
    import inspect
    import pathlib

    package = pathlib.Path(inspect.getfile(flashgate)).parent
    for module in ("ops.py", "torch_ops.py"):
        tree = ast.parse((package / module).read_text())
        wrappers = [f for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
        assert len(wrappers) >= 3, module
        for f in wrappers:
            params = [a.arg for a in f.args.args]
            required = params[:len(params) - len(f.args.defaults)]
            calls = [n for n in ast.walk(f)
                     if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "require_tensors"]
            assert calls, f"{module}: {f.name} does not call require_tensors"
            assert [kw.arg for kw in calls[0].keywords] == required, f"{module}: {f.name}"
            body = [s for s in f.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                    and not isinstance(s, ast.Delete)]
            assert body[0].value is calls[0], f"{module}: {f.name} reads its arguments before checking them"
