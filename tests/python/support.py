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


def relative_rms(out, ref):
    """SPEC 7: rms(out - ref) / rms(ref), in float64; inf when out has a NaN."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if np.isnan(out).any():
        return float("inf")
    diff = out - ref
    finite = np.isfinite(ref)  # -inf lse entries must match exactly; compared separately
    num = np.sqrt(np.mean(diff[finite] ** 2)) if finite.any() else 0.0
    den = np.sqrt(np.mean(ref[finite] ** 2)) if finite.any() else 0.0
    return num / den if den > 0 else num


def output_bias(out, ref):
    """SPEC 6: sum((out - ref) * ref) / sum(ref^2). Callers subtract the bias of ref rounded to out's dtype:
    rounding alone is noise of this metric, not small when a few rows (one visible key, a large V scale)
    dominate sum(ref^2); a systematic rounding of P * v_scale shows in full in the difference."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(((out - ref) * ref).sum() / (ref * ref).sum())


def assert_close(name, out, ref, tol, seed=None):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, f"{name}: shape {out.shape} != {ref.shape}"
    assert not np.isnan(out).any(), f"{name}: NaN in output (seed {seed})"
    inf_ref = ~np.isfinite(ref)
    assert np.array_equal(out[inf_ref], ref[inf_ref]), f"{name}: infinite entries differ (seed {seed})"
    err = relative_rms(out, ref)
    assert err <= tol, f"{name}: relative RMS {err:.3g} > {tol} (seed {seed})"
