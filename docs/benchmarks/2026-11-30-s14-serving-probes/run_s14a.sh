#!/bin/bash
# Session 14 run 1: the L2 prefetch-size hint on the serving K/V copies (branch exp-l2prefetch): three builds
# (no hint, 128 B, 256 B) timed on the serving rows, alternating, two rounds.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=6
SECONDS=0
PIDS=""
for v in 0 128 256; do
  (timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py/v$v -C build-dir=build-wheel/v$v \
     -C cmake.define.FLASHGATE_CUDA_TARGETS=90a -C cmake.define.FLASHGATE_PAGED_L2_PREFETCH=$v . > $OUT/pip_v$v.log 2>&1
   echo "pip v$v rc=$? at ${SECONDS}s") &
  PIDS="$PIDS $!"
done
wait $PIDS
timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PROBE_ROUNDS=2 timeout 330 python3 docs/benchmarks/2026-11-30-s14-serving-probes/probe_s14a.py none=.devbin/py/v0 \
  l2_128=.devbin/py/v128 l2_256=.devbin/py/v256 > $OUT/probe.log 2>&1
echo "probe rc=$? took $SECONDS s"
grep -v Warning $OUT/probe.log
