"""Framework-neutral wrappers over ``flashgate._C``: numpy arrays in, numpy arrays out (the CPU backend).

The signatures are those of the torch ops (see ``flashgate/__init__.py``); the forward has no autograd here,
so the backward is a function of its own (:func:`parallel_attn_backward`). bfloat16 and float8_e4m3fn arrays
are ``ml_dtypes`` arrays. Other frameworks' arrays (cupy, jax) can be passed to ``flashgate._C`` directly,
with outputs the caller allocates; every argument check happens in C++.
"""

from . import _C
from ._required import require_tensors

# Numpy cannot export these through DLPack or the buffer protocol: they travel as raw bytes plus a name.
_BYTE_VIEWS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8"}


def _np():
    import numpy

    return numpy


def _require_numpy(**arrays):
    np = _np()
    for name, a in arrays.items():
        if a is not None and not isinstance(a, np.ndarray):
            raise TypeError(
                f"flashgate.ops: {name}: expected a numpy array, got {type(a).__name__} "
                "(torch tensors go through flashgate.parallel_attn & co.; other frameworks through flashgate._C)"
            )


def _dl(a):
    """What _C takes for a numpy array: the array itself, or (byte view, dtype name) for ml_dtypes types."""
    if a is None:
        return None
    name = a.dtype.name
    if name in _BYTE_VIEWS:
        return (a.view(_BYTE_VIEWS[name]), name)
    return a


def _empty(shape, dtype):
    """Output allocation (one place, so tests can poison it)."""
    return _np().empty(shape, dtype=dtype)


def _workspace(nbytes):
    """Scratch for the C++ call, asked for only when the call needs some."""
    return _np().empty(nbytes, dtype="uint8")


def _companion_dtype(q):
    """dtype of the fp32 companions (lse, g, sink, scales, dg, dsink): float64 in the fp64 reference mode."""
    np = _np()
    return np.float64 if q.dtype == np.float64 else np.float32


def _as_companion(x, q):
    if x is None:
        return None
    np = _np()
    x = np.asarray(x)
    want = _companion_dtype(q)
    return x if x.dtype == want else x.astype(want)


def _scale_tensor(s, q):
    """k_scale / v_scale: None, a Python number (per tensor) or an array."""
    if s is None:
        return None
    np = _np()
    if isinstance(s, (int, float)):
        return np.full((1,), s, dtype=_companion_dtype(q))
    return s


def _gate_for(g, q):
    # g may be fp16/bf16/fp32 (upcast in C++); in the fp64 reference mode it must be fp64.
    np = _np()
    if g is not None and q.dtype == np.float64 and g.dtype != np.float64:
        return g.astype(np.float64)
    return g


def parallel_attn(q, k, v, g=None, scale=None, window_size=None, cu_seqlens=None, *, sink_bias=None,
                  return_lse=False, deterministic=False, backend="auto"):
    """Causal attention (SPEC 3). q [B,T,HQ,K], k [B,T,H,K], v [B,T,H,V]; returns o [B,T,HQ,V], and with
    ``return_lse`` also lse [B,T,HQ] (natural log, float32). ``deterministic`` matters for the backward only."""
    del deterministic
    require_tensors("attention_forward", q=q, k=k, v=v)
    _require_numpy(q=q, k=k, v=v, g=g, cu_seqlens=cu_seqlens)
    g = _gate_for(g, q)
    sink = _as_companion(sink_bias, q)
    B, T, HQ = q.shape[:3]
    o = _empty((B, T, HQ, v.shape[-1]), q.dtype)
    lse = _empty((B, T, HQ), _companion_dtype(q))
    _C.attention_forward(_dl(q), _dl(k), _dl(v), _dl(o), lse=lse, g=_dl(g), sink=sink, cu_seqlens=cu_seqlens,
                         scale=scale, window=window_size, backend=backend, workspace=_workspace)
    return (o, lse) if return_lse else o


def parallel_attn_backward(do, q, k, v, o, lse, g=None, scale=None, window_size=None, cu_seqlens=None, *,
                           sink_bias=None, deterministic=False, backend="auto"):
    """Gradients of :func:`parallel_attn` (SPEC 4) given the output gradient ``do``, the forward's o and lse.
    Returns (dq, dk, dv, dg, dsink): dq/dk/dv in the input dtype, dg and dsink float32 (None when g / sink
    is None)."""
    require_tensors("attention_backward", do=do, q=q, k=k, v=v, o=o, lse=lse)
    _require_numpy(do=do, q=q, k=k, v=v, o=o, lse=lse, g=g, cu_seqlens=cu_seqlens)
    g = _gate_for(g, q)
    sink = _as_companion(sink_bias, q)
    fp = _companion_dtype(q)
    dq = _empty(q.shape, q.dtype)
    dk = _empty(k.shape, k.dtype)
    dv = _empty(v.shape, v.dtype)
    dg = _empty(q.shape[:3], fp) if g is not None else None
    dsink = _empty(sink.shape, fp) if sink is not None else None
    _C.attention_backward(_dl(q), _dl(k), _dl(v), _dl(o), lse, _dl(do), _dl(dq), _dl(dk), _dl(dv), dg=dg,
                          dsink=dsink, g=_dl(g), sink=sink, cu_seqlens=cu_seqlens, scale=scale,
                          window=window_size, deterministic=deterministic, backend=backend, workspace=_workspace)
    return dq, dk, dv, dg, dsink


def _drop_batch(a, rank):
    """FLA's decode tensors carry a leading batch axis of 1 ([1,N,HQ,K]); the C++ op takes them without it.
    Anything else passes unchanged, and C++ explains what is wrong with it."""
    if a is not None and a.ndim == rank + 1 and a.shape[0] == 1:
        return a[0]
    return a


def attn_decoding_one_step(q, k, v, g=None, scale=None, cu_seqlens=None, do_gate_scale=False, *, sink_bias=None,
                           window_size=None, backend="auto"):
    """One query per packed sequence (SPEC 5), FLA's decode signature: q [1,N,HQ,K], k [1,T,H,K],
    v [1,T,H,V], g [1,T,HQ], cu_seqlens [N+1]; returns o [1,N,HQ,V] (or the same without the leading 1 when
    q came without it)."""
    require_tensors("decode", q=q, k=k, v=v)
    _require_numpy(q=q, k=k, v=v, g=g, cu_seqlens=cu_seqlens)
    batched = q.ndim == 4
    q3, k3, v3, g2 = _drop_batch(q, 3), _drop_batch(k, 3), _drop_batch(v, 3), _drop_batch(_gate_for(g, q), 2)
    o = _empty(tuple(q3.shape[:-1]) + (v3.shape[-1],), q.dtype)
    _C.decode(_dl(q3), _dl(k3), _dl(v3), cu_seqlens, _dl(o), g=_dl(g2), sink=_as_companion(sink_bias, q),
              scale=scale, window=window_size, gate_scale=do_gate_scale, backend=backend, workspace=_workspace)
    return o[None] if batched else o


def paged_attention(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, *, scale=None, window_size=None,
                    sink_bias=None, k_scale=None, v_scale=None, max_seqlen_q=None, out=None, backend="auto"):
    """Packed queries over a paged KV cache (SPEC 6), vLLM layout: q [total_q,HQ,K],
    k_cache [num_blocks,block_size,H,K], v_cache [num_blocks,block_size,H,V], block_table [N,max_blocks]
    int32, seq_lens_k [N] int32, cu_seqlens_q [N+1]. float8_e4m3fn caches take float32 scales, per tensor
    (a number or a one-element array) or per token [num_blocks,H,block_size]. ``max_seqlen_q``: optional bound
    on every sequence's query tokens (checked here). Writes into ``out`` when given. Returns o [total_q,HQ,V]."""
    require_tensors("paged_attention", q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                    seq_lens_k=seq_lens_k, cu_seqlens_q=cu_seqlens_q)
    _require_numpy(q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens_k=seq_lens_k,
                   cu_seqlens_q=cu_seqlens_q, out=out)
    o = out if out is not None else _empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],), q.dtype)
    _C.paged_attention(_dl(q), _dl(k_cache), _dl(v_cache), block_table, seq_lens_k, cu_seqlens_q, _dl(o),
                       sink=_as_companion(sink_bias, q), k_scale=_dl(_scale_tensor(k_scale, q)),
                       v_scale=_dl(_scale_tensor(v_scale, q)), scale=scale, window=window_size,
                       max_seqlen_q=max_seqlen_q, backend=backend, workspace=_workspace)
    return o
