"""Each contender as a builder: given a row and its inputs, return a callable (or raise CannotRun).

All training contenders take flashgate's layout q [B,T,HQ,K], k/v [B,T,H,*] and produce o [B,T,HQ,V];
peers that want [B,H,T,D] get inputs prepared in their own layout ahead of timing, so only the attention
kernel is timed.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F


class CannotRun(Exception):
    """The contender cannot run this case; the message says why (reported, never turned into a ratio)."""


def probed(fwd):
    """Runs fwd once so an unsupported case fails here (with the peer's own error), not while timing."""
    try:
        fwd()
    except Exception as e:  # noqa: BLE001 - report the peer's own error
        raise CannotRun(f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return fwd


def import_from(path, flag, module, name):
    """`name` from `module` of a checkout at `path` (given on the command line as `flag`), or CannotRun."""
    if not path:
        raise CannotRun(f"not given ({flag} PATH)")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except Exception as e:  # noqa: BLE001
        raise CannotRun(f"import failed: {e}")


# ---------------------------------------------------------------------------------------------- training

def flashgate_training(row, t, backend="auto"):
    import flashgate

    def fwd():
        return flashgate.parallel_attn(t["q"], t["k"], t["v"], g=t.get("g"), window_size=row.window,
                                       cu_seqlens=t.get("cu_seqlens"), sink_bias=t.get("sink"), backend=backend)
    return fwd


def flashgate_no_grad(row, t):
    """flashgate's forward where no backward follows (torch.no_grad: o's rounding residual, which the backward's D
    needs, is not kept): the variant that isolates what keeping it costs the training forward. Forward only."""
    train = flashgate_training(row, t)

    def fwd():
        with torch.no_grad():
            return train()
    fwd.forward_only = True
    return fwd


def flashgate_backend_training(backend):
    """flashgate forced onto one backend (e.g. 'hopper' while `auto` does not take it yet)."""
    return lambda row, t: flashgate_training(row, t, backend)


def _bhtd(x):
    return x.transpose(1, 2).contiguous()


def _sdpa(backend_name):
    def build(row, t):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if row.gate or row.sink or row.window is not None or row.packed:
            raise CannotRun("SDPA has no gate / sink / window / packed-sequence support")
        backend = getattr(SDPBackend, backend_name)
        q, k, v = (_bhtd(t[n]).requires_grad_(t[n].requires_grad) for n in ("q", "k", "v"))
        t.setdefault("peer_inputs", []).append((q, k, v))
        gqa = row.HQ != row.H

        def fwd():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).transpose(1, 2)
        return probed(fwd)
    return build


sdpa_cudnn = _sdpa("CUDNN_ATTENTION")
sdpa_flash = _sdpa("FLASH_ATTENTION")

_flex_compiled = None


def flex(row, t):
    global _flex_compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if row.sink:
        raise CannotRun("FlexAttention has no sink (extra softmax mass) support")
    # A fresh compile per row: one compiled function across all shapes hits dynamo's recompile limit.
    # Donated buffers forbid the repeated backward (retain_graph) the timing loop runs.
    import torch._dynamo
    import torch._functorch.config
    torch._dynamo.reset()
    torch._functorch.config.donated_buffer = False
    _flex_compiled = torch.compile(flex_attention, fullgraph=True, dynamic=False)
    q, k, v = (_bhtd(t[n]).requires_grad_(t[n].requires_grad) for n in ("q", "k", "v"))
    B, T = q.shape[0], q.shape[2]
    W = row.window
    if row.packed:
        doc = torch.repeat_interleave(torch.arange(len(row.packed), device=q.device),
                                      torch.tensor(row.packed, device=q.device))

        def mask(b, h, qi, kj):
            m = (kj <= qi) & (doc[qi] == doc[kj])
            return m & (qi - kj < W) if W is not None else m
    else:
        def mask(b, h, qi, kj):
            return (kj <= qi) & (qi - kj < W) if W is not None else kj <= qi
    block_mask = create_block_mask(mask, B=None, H=None, Q_LEN=T, KV_LEN=T, device=q.device)
    score_mod = None
    if row.gate:
        gc = t["gc_bht"]  # [B, HQ, T] inclusive prefix sums (per sequence), fp32

        def score_mod(score, b, h, qi, kj):
            return score + gc[b, h, qi] - gc[b, h, kj]
    gqa = row.HQ != row.H

    def fwd():
        return _flex_compiled(q, k, v, score_mod=score_mod, block_mask=block_mask,
                              enable_gqa=gqa).transpose(1, 2)
    return probed(fwd)


def fa4_training(path):
    """flash-attn-4 (CuTe DSL) from an install directory given as --fa4 PATH: causal, windows, learnable sinks,
    GQA, K != V and packed sequences (varlen); no forget gate. Takes flashgate's [B,T,H,D] layout as it is."""
    def build(row, t):
        # The CuTe DSL's packages sit beside it; its .pth file (which a --target install skips) would add them.
        dsl = os.path.join(path, "nvidia_cutlass_dsl", "dsl_packages") if path else ""
        if dsl and dsl not in sys.path:
            sys.path.insert(0, dsl)
        func = import_from(path, "--fa4", "flash_attn.cute.interface", "flash_attn_func")
        varlen = import_from(path, "--fa4", "flash_attn.cute.interface", "flash_attn_varlen_func")
        if row.gate:
            raise CannotRun("FA4 has no forget gate (a score_mod has no gradient for it)")
        window = (row.window - 1, 0) if row.window is not None else (None, None)
        sink = t.get("sink")
        q, k, v = t["q"], t["k"], t["v"]

        def first(r):
            return r[0] if isinstance(r, tuple) else r
        if row.packed:
            cu, longest = t["cu_seqlens"], max(row.packed)

            def fwd():
                return first(varlen(q[0], k[0], v[0], cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                    max_seqlen_k=longest, causal=True, window_size=window,
                                    learnable_sink=sink)).unsqueeze(0)
        else:
            def fwd():
                return first(func(q, k, v, causal=True, window_size=window, learnable_sink=sink))
        return probed(fwd)
    return build


def fla_training(path):
    def build(row, t):
        parallel_attn = import_from(path, "--fla", "fla.ops.attn.parallel", "parallel_attn")

        def fwd():
            return parallel_attn(t["q"], t["k"], t["v"], g=t.get("g"), window_size=row.window,
                                 cu_seqlens=t.get("cu_seqlens_long"), sink_bias=t.get("sink"))
        return probed(fwd)
    return build


TRAINING_PEERS = {
    "cuDNN": sdpa_cudnn,
    "FA2": sdpa_flash,
    "flex": flex,
}


# ----------------------------------------------------------------------------------------------- serving

def sdpa_decode(backend_name):
    """cuDNN / FA2 on a contiguous KV cache [B,H,L,D] with one query per sequence (no mask needed)."""
    def build(row, t):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if row.q_len != 1:
            raise CannotRun("measured on one-query decode only")
        backend = getattr(SDPBackend, backend_name)
        q, k, v = t["q_bhld"], t["k_bhld"], t["v_bhld"]

        def fwd():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return probed(fwd)
    return build


def fla_decode(path):
    """FLA's attn_decoding_one_step over the packed twin of the cache ([1, N*L, H, D])."""
    def build(row, t):
        attn_decoding_one_step = import_from(path, "--fla", "fla.ops.attn.decoding", "attn_decoding_one_step")
        N, L = row.batch, row.context
        q = t["q"].view(1, N, row.HQ, row.D)
        k = t["k_real"].reshape(1, N * L, row.H, row.D)
        v = t["v_real"].reshape(1, N * L, row.H, row.D)
        cu = torch.arange(0, N * L + 1, L, device=q.device, dtype=torch.long)

        def fwd():
            return attn_decoding_one_step(q, k, v, cu_seqlens=cu)[0]
        return probed(fwd)
    return build


def vllm_paged(path):
    def build(row, t, fp8):
        unified_attention = import_from(path, "--vllm", "vllm.attention.ops.triton_unified_attention",
                                        "unified_attention")
        if fp8 == "per-token":
            raise CannotRun("vLLM's unified attention takes per-tensor descales only")
        out = torch.empty_like(t["q"])
        kc, vc = t["k_cache"], t["v_cache"]
        descale = (t["k_scale"].reshape(1).expand(row.batch), t["v_scale"].reshape(1).expand(row.batch)) \
            if fp8 else (None, None)

        def fwd():
            unified_attention(q=t["q"], k=kc, v=vc, out=out, cu_seqlens_q=t["cu_seqlens_q"],
                              max_seqlen_q=row.q_len, seqused_k=t["seq_lens_k"], max_seqlen_k=row.context,
                              softmax_scale=1 / math.sqrt(row.D), causal=True, window_size=(-1, -1),
                              block_table=t["block_table"], softcap=0, q_descale=None,
                              k_descale=descale[0], v_descale=descale[1])
            return out
        return probed(fwd)
    return build
