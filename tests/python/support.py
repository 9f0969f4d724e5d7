"""Helpers shared by the Python tests: fresh seeds (printed, so a failure can be replayed with
FLASHGATE_SEED=<seed>) and the SPEC 7 metric."""

import os
import secrets

import numpy as np


def fresh_seed():
    """A new seed per test unless FLASHGATE_SEED pins one; printed (pytest shows it when the test fails)."""
    seed = int(os.environ.get("FLASHGATE_SEED") or secrets.randbits(31))
    print(f"flashgate seed: {seed} (replay with FLASHGATE_SEED={seed})")
    return seed


class SeededRng:
    """A numpy Generator that remembers its seed (for failure messages)."""

    def __init__(self, seed):
        self.seed = seed
        self._gen = np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self._gen, name)


def relative_rms(out, ref, floor=0.0):
    """SPEC 7: rms(out - ref) / max(rms(ref), floor), in float64; inf when out has a NaN."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if np.isnan(out).any():
        return float("inf")
    diff = out - ref
    finite = np.isfinite(ref)  # -inf lse entries must match exactly; compared separately
    num = np.sqrt(np.mean(diff[finite] ** 2)) if finite.any() else 0.0
    den = np.sqrt(np.mean(ref[finite] ** 2)) if finite.any() else 0.0
    den = max(den, floor)
    return num / den if den > 0 else num


def rms(a):
    return float(np.sqrt(np.mean(np.asarray(a, dtype=np.float64) ** 2))) if np.size(a) else 0.0


def gradient_floors(scale, do, q, k, v):
    """SPEC 7's floors of the denominator for gradients whose true value nearly vanishes (a row whose mass sits
    on one key has dS ~ 0): 1e-4 times each gradient's natural scale. `scale` is the one the op used."""
    dov = rms(do) * rms(v)
    return {"dq": 1e-4 * scale * dov * rms(k), "dk": 1e-4 * scale * dov * rms(q), "dg": 1e-4 * dov,
            "dsink": 1e-4 * dov}


def output_bias(out, ref):
    """SPEC 6: sum((out - ref) * ref) / sum(ref^2). Callers subtract the bias of ref rounded to out's dtype:
    rounding alone is noise of this metric, not small when a few rows (one visible key, a large V scale)
    dominate sum(ref^2); a systematic rounding of P * v_scale shows in full in the difference."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(((out - ref) * ref).sum() / (ref * ref).sum())


def subnormal_slack(dtype, ref):
    """SPEC 7: where the output dtype cannot represent the reference (fp16 subnormals), the error counts beyond
    twice the reference's own rounding to that dtype. Returns that allowance relative to rms(ref): twice the rms
    (over every finite entry) of rounding the entries below fp16's smallest normal."""
    ref = np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(ref)
    if dtype is None or np.dtype(dtype) != np.float16 or not finite.any():
        return 0.0
    r = ref[finite]
    tiny = np.abs(r) < np.finfo(np.float16).tiny
    rounding = np.where(tiny, r.astype(np.float16).astype(np.float64) - r, 0.0)
    den = np.sqrt(np.mean(r ** 2))
    return 2 * np.sqrt(np.mean(rounding ** 2)) / den if den > 0 else 0.0


def assert_close(name, out, ref, tol, seed=None, floor=0.0):
    """SPEC 7's relative RMS within `tol` (denominator floored at `floor`, fp16 subnormals allowed for)."""
    slack = subnormal_slack(getattr(out, "dtype", None), ref)
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, f"{name}: shape {out.shape} != {ref.shape}"
    assert not np.isnan(out).any(), f"{name}: NaN in output (seed {seed})"
    inf_ref = ~np.isfinite(ref)
    assert np.array_equal(out[inf_ref], ref[inf_ref]), f"{name}: infinite entries differ (seed {seed})"
    err = relative_rms(out, ref, floor)
    assert err <= tol + slack, f"{name}: relative RMS {err:.3g} > {tol} + {slack:.3g} (fp16 subnormals) (seed {seed})"
