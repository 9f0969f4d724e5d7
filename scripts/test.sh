#!/usr/bin/env bash
# Sets up and runs every test: builds the library, CLI and C++ tests, runs them with ctest (GPU tests skip
# visibly without a GPU), then builds the Python package into a virtual environment and runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)

start=$(date +%s)
# Explicit: build/ is shared with scripts/run.sh, and a cache from elsewhere may have turned tests or tools off.
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHGATE_TESTS=ON -DFLASHGATE_TOOLS=ON
cmake --build build -j "$jobs"
echo "== C++ build time: $(( $(date +%s) - start )) s"

start=$(date +%s)
# --no-tests=error: a build that has no tests (a cache with them off) fails here instead of passing empty.
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs"
# The bounded API fuzz ran above; show its tally (inputs tried, how many valid) as well.
grep -h "^fuzz: " build/Testing/Temporary/LastTest.log || true
echo "== C++ test time: $(( $(date +%s) - start )) s"

if [ -f pyproject.toml ]; then
  start=$(date +%s)
  python3 -m venv build/venv
  # No pip cache: torch's wheels would take a second copy of their ~5 GB on a disk that may be short.
  export PIP_NO_CACHE_DIR=1
  build/venv/bin/python -m pip install -q --upgrade pip
  build/venv/bin/python -m pip install -q nanobind scikit-build-core numpy ml_dtypes pytest
  # torch runs the torch layer's CPU tests and the context-parallel tests (torch.distributed with gloo, several
  # processes); FLASHGATE_TEST_TORCH=0 skips the download (those tests then skip, and say so).
  if [ "${FLASHGATE_TEST_TORCH:-1}" != 0 ]; then
    torch_start=$(date +%s)
    # torch is an optional dependency: where it cannot be installed (no space for its ~5.5 GB, a registry
    # error) the run says so and goes on; its tests then skip and name the reason in pytest's summary.
    if build/venv/bin/python -m pip install -q torch; then
      echo "== torch install time: $(( $(date +%s) - torch_start )) s"
    else
      echo "== torch NOT installed (pip failed, see above; free space: $(df -h --output=avail . | tail -1 | tr -d ' ')):" \
           "the torch layer's and the context-parallel tests skip"
    fi
  fi
  # Without a GPU the extension is built CPU-only: the CUDA kernels were compiled and tested above already.
  cuda_flag=()
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || cuda_flag=(-C cmake.define.FLASHGATE_CUDA=OFF)
  build/venv/bin/python -m pip install -q --no-build-isolation "${cuda_flag[@]}" .
  echo "== Python build time: $(( $(date +%s) - start )) s"
  build/venv/bin/python -m pytest -ra tests/python
fi
echo "== all tests passed"
