"""PyTorch operators: torch.library custom ops with fake (meta) kernels and autograd, so they run under
``torch.compile(fullgraph=True)`` and inside CUDA graphs. Outside compilation the training op runs the same
implementation through a plain ``torch.autograd.Function``, which costs a fraction of the custom op's dispatch.

Each op allocates its outputs and workspace with torch on the inputs' device, passes torch's current CUDA
stream, and validates GPU index tensors (a host synchronisation) only when the stream is not being captured.
Tensors reach the C++ library as DLPack capsules from ``torch.utils.dlpack.to_dlpack``, which involves no
stream synchronisation (``Tensor.__dlpack__`` would sync with the default stream, which is illegal while a
graph is being captured).
"""

import contextlib
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from . import _C
from ._required import require_tensors

_FP8 = getattr(torch, "float8_e4m3fn", None)


# ---- handing tensors to the C++ library -----------------------------------------------------------------

def _dl(t: Optional[Tensor]):
    """A DLPack capsule of ``t`` (None stays None). float8 travels as its bytes plus the dtype name, since
    DLPack exports of float8 are not available in every torch version."""
    if t is None:
        return None
    if t.requires_grad:
        t = t.detach()
    if t.dtype == _FP8:
        return (to_dlpack(t.view(torch.uint8)), "float8_e4m3fn")
    return to_dlpack(t)


def _empty(shape, dtype, device) -> Tensor:
    """Output allocation (one place, so tests can poison it)."""
    return torch.empty(shape, dtype=dtype, device=device)


# The current stream's handle without building a torch.cuda.Stream object (the one torch's own compiled code
# uses: about 1 us against 5-8 for torch.cuda.current_stream(device).cuda_stream).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _launch(t: Tensor):
    """(stream, validate, workspace allocator, device context) for a call on ``t``'s device."""
    device = t.device

    def allocate(nbytes):
        return to_dlpack(torch.empty(nbytes, dtype=torch.uint8, device=device))

    if device.type != "cuda":
        return 0, True, allocate, contextlib.nullcontext()
    current = torch.cuda.current_device()
    index = current if device.index is None else device.index
    stream = _raw_stream(index) if _raw_stream else torch.cuda.current_stream(device).cuda_stream
    validate = not torch.cuda.is_current_stream_capturing()
    return stream, validate, allocate, contextlib.nullcontext() if index == current else torch.cuda.device(device)


def _companion_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of lse, dg, dsink, sink and scales: float32, or float64 in the fp64 reference mode."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---- forward -----------------------------------------------------------------------------------------

def _residual_shape(q: Tensor, v: Tensor, keep_residual: bool) -> Tuple[int, ...]:
    """o_residual's shape: o's where kept (fp16 / bf16 outputs the backward will see), else empty."""
    keep = keep_residual and q.dtype in (torch.float16, torch.bfloat16)
    return (*q.shape[:3], v.shape[-1]) if keep else (0,)


def _forward_impl(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], sink: Optional[Tensor],
                  cu_seqlens: Optional[Tensor], scale: Optional[float], window: Optional[int],
                  deterministic: bool, backend: str, keep_residual: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Returns (o, lse, o_residual): o's rounding residual (int8, for the backward's D) where `keep_residual`."""
    B, T, HQ = q.shape[:3]
    o = _empty((B, T, HQ, v.shape[-1]), q.dtype, q.device)
    lse = _empty((B, T, HQ), _companion_dtype(q.dtype), q.device)
    residual = _empty(_residual_shape(q, v, keep_residual), torch.int8, q.device)
    stream, validate, allocate, device = _launch(q)
    with device:
        _C.attention_forward(_dl(q), _dl(k), _dl(v), _dl(o), lse=_dl(lse),
                             o_residual=_dl(residual) if residual.numel() else None, g=_dl(g), sink=_dl(sink),
                             cu_seqlens=_dl(cu_seqlens), scale=scale, window=window, validate=validate,
                             backend=backend, stream=stream, workspace=allocate)
    return o, lse, residual


_attention_forward = torch.library.custom_op("flashgate::attention_forward", mutates_args=())(_forward_impl)


@_attention_forward.register_fake
def _(q, k, v, g, sink, cu_seqlens, scale, window, deterministic, backend, keep_residual):
    B, T, HQ = q.shape[:3]
    return (q.new_empty((B, T, HQ, v.shape[-1])), q.new_empty((B, T, HQ), dtype=_companion_dtype(q.dtype)),
            q.new_empty(_residual_shape(q, v, keep_residual), dtype=torch.int8))


# ---- backward ----------------------------------------------------------------------------------------

def _backward_impl(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, o_residual: Tensor,
                   g: Optional[Tensor], sink: Optional[Tensor], cu_seqlens: Optional[Tensor], scale: Optional[float],
                   window: Optional[int], deterministic: bool, backend: str, checked: bool = False) -> List[Tensor]:
    """Returns [dq, dk, dv, dg, dsink]; dg / dsink are empty when g / sink is None. o_residual: the forward's
    (empty where it kept none). checked: the forward validated this cu_seqlens already (autograd saved it, so an
    in-place change since then raises), and the backward skips the host round trip of validating it again."""
    fp = _companion_dtype(q.dtype)
    dq = _empty(q.shape, q.dtype, q.device)
    dk = _empty(k.shape, k.dtype, k.device)
    dv = _empty(v.shape, v.dtype, v.device)
    dg = _empty(q.shape[:3] if g is not None else (0,), fp, q.device)
    dsink = _empty(sink.shape if sink is not None else (0,), fp, q.device)
    stream, validate, allocate, device = _launch(q)
    validate = validate and not checked
    with device:
        _C.attention_backward(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse), _dl(do), _dl(dq), _dl(dk), _dl(dv),
                              dg=_dl(dg) if g is not None else None, dsink=_dl(dsink) if sink is not None else None,
                              g=_dl(g), sink=_dl(sink), cu_seqlens=_dl(cu_seqlens),
                              o_residual=_dl(o_residual) if o_residual.numel() else None, scale=scale, window=window,
                              deterministic=deterministic, validate=validate, backend=backend, stream=stream,
                              workspace=allocate)
    return [dq, dk, dv, dg, dsink]


_attention_backward = torch.library.custom_op("flashgate::attention_backward", mutates_args=())(_backward_impl)


@_attention_backward.register_fake
def _(do, q, k, v, o, lse, o_residual, g, sink, cu_seqlens, scale, window, deterministic, backend, checked=False):
    fp = _companion_dtype(q.dtype)
    return [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty(q.shape[:3] if g is not None else (0,), dtype=fp),
            q.new_empty(sink.shape if sink is not None else (0,), dtype=fp)]


def _forward_setup_context(ctx, inputs, output):
    q, k, v, g, sink, cu_seqlens, scale, window, deterministic, backend, _ = inputs
    o, lse, o_residual = output
    ctx.save_for_backward(q, k, v, g, sink, o, lse, o_residual, cu_seqlens)
    ctx.scale, ctx.window, ctx.deterministic, ctx.backend = scale, window, deterministic, backend
    ctx.checked = cu_seqlens is not None and cu_seqlens.is_cuda and not torch.cuda.is_current_stream_capturing()
    # The backward takes no lse gradient (SPEC 4 has none): lse and o_residual are non-differentiable outputs, and
    # their gradients are not made (zero-filled, they cost a memset of o's residual a backward).
    ctx.mark_non_differentiable(lse, o_residual)
    ctx.set_materialize_grads(False)


def _backward_through(backward_op):
    """The forward's backward, running `backward_op` (the custom op, or its implementation in eager mode)."""
    def backward(ctx, do, dlse, dresidual):
        del dlse, dresidual
        q, k, v, g, sink, o, lse, o_residual, cu_seqlens = ctx.saved_tensors
        if do is None:  # o took no part in what was differentiated
            do = torch.zeros_like(o)
        if do.stride(-1) != 1:  # e.g. the expanded gradient of a sum(); the head axis must be unit-stride
            do = do.contiguous()
        dq, dk, dv, dg, dsink = backward_op(do, q, k, v, o, lse, o_residual, g, sink, cu_seqlens, ctx.scale,
                                            ctx.window, ctx.deterministic, ctx.backend, ctx.checked)
        dg = dg.to(g.dtype) if g is not None else None
        dsink = dsink if sink is not None else None
        return dq, dk, dv, dg, dsink, None, None, None, None, None, None
    return backward


_attention_forward.register_autograd(_backward_through(_attention_backward), setup_context=_forward_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The same op outside compilation: one Python frame instead of the custom op's dispatch (host time per call
    around a trivial CPU kernel of 8 us: 53 -> 19 us with autograd, 27 -> 16 us without)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _forward_impl(*inputs)
        _forward_setup_context(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_through(_backward_impl))


def parallel_attn(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor] = None, scale: Optional[float] = None,
                  window_size: Optional[int] = None, cu_seqlens: Optional[Tensor] = None, *,
                  sink_bias: Optional[Tensor] = None, return_lse: bool = False, deterministic: bool = False,
                  backend: str = "auto"):
    require_tensors("attention_forward", q=q, k=k, v=v)
    if sink_bias is not None and sink_bias.dtype != _companion_dtype(q.dtype):
        sink_bias = sink_bias.to(_companion_dtype(q.dtype))
    if g is not None and q.dtype == torch.float64 and g.dtype != torch.float64:
        g = g.to(torch.float64)
    # o's rounding residual only where a backward will follow (SPEC 7's D on rows whose mass sits on one key).
    keep_residual = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, g, sink_bias))
    op = _attention_forward if torch.compiler.is_compiling() else _EagerAttention.apply
    o, lse, _ = op(q, k, v, g, sink_bias, cu_seqlens, scale, window_size, deterministic, backend, keep_residual)
    return (o, lse) if return_lse else o


# ---- decode ------------------------------------------------------------------------------------------

@torch.library.custom_op("flashgate::decode", mutates_args=())
def _decode(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Optional[Tensor], g: Optional[Tensor], sink: Optional[Tensor],
            scale: Optional[float], window: Optional[int], gate_scale: bool, backend: str) -> Tensor:
    o = _empty(tuple(q.shape[:-1]) + (v.shape[-1],), q.dtype, q.device)
    stream, validate, allocate, device = _launch(q)
    with device:
        _C.decode(_dl(q), _dl(k), _dl(v), _dl(cu_seqlens), _dl(o), g=_dl(g), sink=_dl(sink), scale=scale,
                  window=window, gate_scale=gate_scale, validate=validate, backend=backend, stream=stream,
                  workspace=allocate)
    return o


@_decode.register_fake
def _(q, k, v, cu_seqlens, g, sink, scale, window, gate_scale, backend):
    return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))


def _drop_batch(t: Optional[Tensor], rank: int) -> Optional[Tensor]:
    """FLA's decode tensors carry a leading batch axis of 1; the C++ op takes them without it. Anything else
    passes unchanged, and C++ explains what is wrong with it."""
    if t is not None and t.dim() == rank + 1 and t.shape[0] == 1:
        return t[0]
    return t


def attn_decoding_one_step(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor] = None,
                           scale: Optional[float] = None, cu_seqlens: Optional[Tensor] = None,
                           do_gate_scale: bool = False, *, sink_bias: Optional[Tensor] = None,
                           window_size: Optional[int] = None, backend: str = "auto") -> Tensor:
    require_tensors("decode", q=q, k=k, v=v)
    if sink_bias is not None and sink_bias.dtype != _companion_dtype(q.dtype):
        sink_bias = sink_bias.to(_companion_dtype(q.dtype))
    if g is not None and q.dtype == torch.float64 and g.dtype != torch.float64:
        g = g.to(torch.float64)
    o = _decode(_drop_batch(q, 3), _drop_batch(k, 3), _drop_batch(v, 3), cu_seqlens, _drop_batch(g, 2),
                sink_bias, scale, window_size, do_gate_scale, backend)
    return o.unsqueeze(0) if q.dim() == 4 else o


# ---- paged attention ---------------------------------------------------------------------------------

def _paged_call(out, q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale, scale,
                window, max_seqlen_q, backend):
    stream, validate, allocate, device = _launch(q)
    with device:
        _C.paged_attention(_dl(q), _dl(k_cache), _dl(v_cache), _dl(block_table), _dl(seq_lens_k),
                           _dl(cu_seqlens_q), _dl(out), sink=_dl(sink), k_scale=_dl(k_scale),
                           v_scale=_dl(v_scale), scale=scale, window=window, max_seqlen_q=max_seqlen_q,
                           validate=validate, backend=backend, stream=stream, workspace=allocate)


@torch.library.custom_op("flashgate::paged_attention", mutates_args=())
def _paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens_k: Tensor,
                     cu_seqlens_q: Tensor, sink: Optional[Tensor], k_scale: Optional[Tensor],
                     v_scale: Optional[Tensor], scale: Optional[float], window: Optional[int],
                     max_seqlen_q: Optional[int], backend: str) -> Tensor:
    o = _empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],), q.dtype, q.device)
    _paged_call(o, q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale, scale,
                window, max_seqlen_q, backend)
    return o


@_paged_attention.register_fake
def _(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale, scale, window,
      max_seqlen_q, backend):
    return q.new_empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],))


@torch.library.custom_op("flashgate::paged_attention_out", mutates_args=("out",))
def _paged_attention_out(out: Tensor, q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                         seq_lens_k: Tensor, cu_seqlens_q: Tensor, sink: Optional[Tensor],
                         k_scale: Optional[Tensor], v_scale: Optional[Tensor], scale: Optional[float],
                         window: Optional[int], max_seqlen_q: Optional[int], backend: str) -> None:
    _paged_call(out, q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale, scale,
                window, max_seqlen_q, backend)


@_paged_attention_out.register_fake
def _(out, q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale, scale, window,
      max_seqlen_q, backend):
    return None


def _kv_scale(s, q: Tensor) -> Optional[Tensor]:
    """A per-tensor scale given as a number becomes a one-element tensor (a fill kernel: capture-safe)."""
    if s is None or isinstance(s, Tensor):
        return s
    return torch.full((1,), float(s), dtype=_companion_dtype(q.dtype), device=q.device)


def paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens_k: Tensor,
                    cu_seqlens_q: Tensor, *, scale: Optional[float] = None, window_size: Optional[int] = None,
                    sink_bias: Optional[Tensor] = None, k_scale=None, v_scale=None,
                    max_seqlen_q: Optional[int] = None, out: Optional[Tensor] = None, backend: str = "auto") -> Tensor:
    require_tensors("paged_attention", q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                    seq_lens_k=seq_lens_k, cu_seqlens_q=cu_seqlens_q)
    if sink_bias is not None and sink_bias.dtype != _companion_dtype(q.dtype):
        sink_bias = sink_bias.to(_companion_dtype(q.dtype))
    args = (q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink_bias, _kv_scale(k_scale, q),
            _kv_scale(v_scale, q), scale, window_size, max_seqlen_q, backend)
    if out is None:
        return _paged_attention(*args)
    _paged_attention_out(out, *args)
    return out
