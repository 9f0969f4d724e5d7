#!/bin/bash
# Session 14 run 3: what flashgate's start costs after a clean L2 flush (probe_s14c; main's kernels).
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
P=docs/benchmarks/2026-11-30-s14-serving-probes
SECONDS=0
timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py3/v0 -C build-dir=build-wheel/w0 \
     -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1
echo "pip rc=$? at ${SECONDS}s"
PYTHONPATH=.devbin/py3/v0 timeout 300 python3 $P/probe_s14c.py > $OUT/probe_c.log 2>&1
echo "probe c rc=$? at $SECONDS s"
grep -v Warning $OUT/probe_c.log
