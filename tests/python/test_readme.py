"""The README's Python examples run as written: numpy ones everywhere, torch/CUDA ones where those exist."""
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _needs_cuda_torch(code):
    return "torch" in code


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    if _needs_cuda_torch(code):
        torch = pytest.importorskip("torch", reason="torch is not installed: the torch examples run on the GPU machine")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device: the torch examples need one")
    exec(compile(code, str(README), "exec"), {})


def test_readme_has_examples():
    assert len(BLOCKS) >= 3
