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


def _paragraph(text, start):
    """The paragraph of `text` that begins with `start`, on one line."""
    begin = text.index(start)
    end = text.find("\n\n", begin)
    return " ".join(text[begin:end if end >= 0 else None].split())


def test_readme_needs_lists_pypi_and_venv():
    # A fresh machine fails in scripts/test.sh without these: venv creation needs python3-venv on Debian,
    # and the venv pip-installs its build and test packages from PyPI.
    needs = _paragraph(README.read_text(), "Needs:")
    assert "python3-venv" in needs and "PyPI" in needs
    for package in ("nanobind", "scikit-build-core", "numpy", "ml_dtypes", "pytest"):
        assert package in needs, package


def test_readme_packed_takes_lengths():
    text = README.read_text()
    assert "`--packed` takes the sequence **lengths**, not offsets" in text
    # An example starting at 0 and never decreasing reads like cu_seqlens offsets: use plain lengths.
    for arg in re.findall(r"--packed ([0-9,]+)", text):
        values = [int(x) for x in arg.split(",")]
        assert not (values[0] == 0 and values == sorted(values)), f"--packed {arg} reads like offsets"


def test_readme_offers_hopper_only_when_built():
    backends = _paragraph(README.read_text(), "Backends:")
    assert "`hopper` (sm90a kernels, when built" in backends


SCRIPTS = README.parent / "scripts"


def _commands(script):
    """The script's lines without comments, joined where a line ends in a backslash."""
    text = (SCRIPTS / script).read_text().replace("\\\n", " ")
    return [line.split("#", 1)[0] for line in text.splitlines()]


def test_test_script_configures_tests_and_fails_without_any():
    # scripts/run.sh shares build/ with scripts/test.sh: test.sh must set what it needs in the CMake cache
    # itself, and an empty test list (a cache left with FLASHGATE_TESTS=OFF) must fail, not pass quietly.
    lines = _commands("test.sh")
    configure = [line for line in lines if "cmake -S" in line]
    assert configure and all("-DFLASHGATE_TESTS=ON" in line and "-DFLASHGATE_TOOLS=ON" in line
                             for line in configure), configure
    runs = [line for line in lines if line.lstrip().startswith("ctest")]
    assert runs and all("--no-tests=error" in line for line in runs), runs


def test_run_script_leaves_the_tests_alone():
    # The README runs run.sh before test.sh: run.sh builds the CLI only and leaves FLASHGATE_TESTS as it is.
    lines = _commands("run.sh")
    assert not any("FLASHGATE_TESTS" in line for line in lines), lines
    builds = [line for line in lines if "cmake --build" in line]
    assert builds and all("--target flashgate_cli" in line for line in builds), builds
