"""flashgate: causal attention with forgetting gates, sinks, windows, GQA, packed sequences and paged fp8
serving.

``parallel_attn``, ``attn_decoding_one_step`` and ``paged_attention`` take torch tensors (custom ops with
autograd, torch.compile and CUDA-graph support; see ``flashgate.torch_ops``) or numpy arrays (the CPU
backend; see ``flashgate.ops``). Importing flashgate works without torch.

Errors raise ValueError (a bad shape, value or layout), TypeError (a dtype or device the op does not take, or
None for a required tensor), NotImplementedError (valid input a backend cannot run) or RuntimeError (a CUDA
failure), with the C++ message, which names the argument and the rule.
"""

from . import _C, ops
from ._C import built_with_cuda, cuda_available

try:
    import torch as _torch
except ImportError:  # numpy-only installs
    _torch = None

if _torch is not None:
    from . import torch_ops

__version__ = _C.version()


def _backend_of(x):
    """The wrapper module for ``x``'s framework: torch tensors go to the torch ops, everything else to the
    neutral (numpy) wrappers."""
    if _torch is not None and isinstance(x, _torch.Tensor):
        return torch_ops
    return ops


def parallel_attn(q, k, v, g=None, scale=None, window_size=None, cu_seqlens=None, *, sink_bias=None,
                  return_lse=False, deterministic=False, backend="auto"):
    """Causal self-attention with flash-linear-attention's ``parallel_attn`` signature and semantics.

    q [B,T,HQ,K], k [B,T,H,K], v [B,T,H,V] (HQ % H == 0; query head h reads kv head h // (HQ//H)).
    g: optional [B,T,HQ] log forget gate (per query head; the logits get the cumulative gate difference).
    scale: defaults to 1/sqrt(K). window_size: a query at i sees keys j with i - W < j <= i (None: all).
    cu_seqlens: optional [N+1] int32/int64 offsets of packed sequences (then B == 1).
    sink_bias: optional [HQ] logits adding exp(sink) to each softmax denominator (GPT-OSS sinks).
    return_lse: also return lse [B,T,HQ] (natural log, float32; not differentiable).
    deterministic: bitwise-reproducible gradients. backend: 'auto', 'cpu', 'cuda', or 'hopper' (sm90a kernels,
    when built: the forward and backward for fp16/bf16 with K and V up to 512, which 'auto' takes on sm_90 GPUs;
    forcing it where it cannot serve raises, and in a build without them it raises NotImplementedError naming it as
    not built).
    Returns o [B,T,HQ,V] in q's dtype (and lse). Gradients flow to q, k, v, g and sink_bias (torch).
    """
    return _backend_of(q).parallel_attn(q, k, v, g, scale, window_size, cu_seqlens, sink_bias=sink_bias,
                                        return_lse=return_lse, deterministic=deterministic, backend=backend)


def attn_decoding_one_step(q, k, v, g=None, scale=None, cu_seqlens=None, do_gate_scale=False, *, sink_bias=None,
                           window_size=None, backend="auto"):
    """One query per packed sequence, flash-linear-attention's decode signature.

    q [1,N,HQ,K] (the newest token of each sequence), k [1,T,H,K] and v [1,T,H,V] packed by cu_seqlens [N+1]
    with the newest token already appended, g [1,T,HQ]. do_gate_scale multiplies the gate term by scale
    (PaTH-FoX). Returns o [1,N,HQ,V]. (Tensors without the leading 1 are accepted too.)
    """
    return _backend_of(q).attn_decoding_one_step(q, k, v, g, scale, cu_seqlens, do_gate_scale,
                                                 sink_bias=sink_bias, window_size=window_size, backend=backend)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, *, scale=None, window_size=None,
                    sink_bias=None, k_scale=None, v_scale=None, max_seqlen_q=None, out=None, backend="auto"):
    """Packed queries of any length (prefill chunks, decode, speculative verify) over a vLLM-style paged cache.

    q [total_q,HQ,K] packed by cu_seqlens_q [N+1]; k_cache [num_blocks,block_size,H,K],
    v_cache [num_blocks,block_size,H,V]; block_table [N,max_blocks] int32; seq_lens_k [N] int32 (context
    length including this step's tokens; query t of a sequence with Lq queries sits at seq_lens_k - Lq + t).
    float8_e4m3fn caches take float32 k_scale / v_scale: per tensor (a number or one-element tensor) or per
    token [num_blocks,H,block_size]. ``max_seqlen_q`` (optional, as vLLM and FlashAttention's varlen calls take
    it): a bound on every sequence's query tokens, which lets decode and verify batches skip a search on the GPU;
    it is checked when validation reads the indices (under CUDA-graph capture it is not: a longer sequence's
    outputs past the bound may then be left unwritten). Writes into ``out`` [total_q,HQ,V] when given. Returns o.
    """
    return _backend_of(q).paged_attention(q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, scale=scale,
                                          window_size=window_size, sink_bias=sink_bias, k_scale=k_scale,
                                          v_scale=v_scale, max_seqlen_q=max_seqlen_q, out=out, backend=backend)


__all__ = ["parallel_attn", "attn_decoding_one_step", "paged_attention", "cuda_available", "built_with_cuda",
           "ops", "__version__"]
