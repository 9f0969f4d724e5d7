"""The backends the package offers: `hopper` is named only as "when built" (its kernels are a build option), and
asking for it where it is not built says so."""
import inspect

import numpy as np
import pytest

import flashgate
from flashgate import _C, ops


def _docstrings():
    for module in (flashgate, ops, _C):
        yield module.__name__, module.__doc__ or ""
        for name, value in vars(module).items():
            if callable(value) and not name.startswith("_"):
                yield f"{module.__name__}.{name}", inspect.getdoc(value) or ""


def test_docstrings_offer_hopper_only_when_built():
    mentions = [(name, doc) for name, doc in _docstrings() if "hopper" in doc]
    assert mentions, "no docstring names the backends"
    for name, doc in mentions:
        assert "when built" in " ".join(doc.split()), name


def test_forced_hopper_names_it_as_not_built():
    # Without its kernels (the default build) it is "not built"; with them, host arrays are refused by it.
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 2, 16), dtype=np.float32) for _ in range(3))
    with pytest.raises(NotImplementedError, match="backend 'hopper' (is not built|cannot run)"):
        flashgate.parallel_attn(q, k, v, backend="hopper")
