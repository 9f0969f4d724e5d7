#!/bin/bash
# Session 14 run 2: (1) the serving rows and the copy ceiling under three L2-flush methods (probe_s14b, main's
# kernels: the branch's default build has no hint); (2) the L2::128B hint against none on the bf16 rows.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=8
P=docs/benchmarks/2026-11-30-s14-serving-probes
SECONDS=0
PIDS=""
for v in 0 128; do
  (timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py2/v$v -C build-dir=build-wheel/w$v \
     -C cmake.define.FLASHGATE_CUDA_TARGETS=90a -C cmake.define.FLASHGATE_PAGED_L2_PREFETCH=$v . > $OUT/pip_v$v.log 2>&1
   echo "pip v$v rc=$? at ${SECONDS}s") &
  PIDS="$PIDS $!"
done
wait $PIDS
timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONPATH=.devbin/py2/v0 timeout 240 python3 $P/probe_s14b.py > $OUT/probe_b.log 2>&1
echo "probe b rc=$? at $SECONDS s"
grep -v Warning $OUT/probe_b.log
PROBE_ROUNDS=2 PROBE_ROWS=bf16 timeout 150 python3 $P/probe_s14a.py none=.devbin/py2/v0 l2_128=.devbin/py2/v128 > $OUT/probe_a.log 2>&1
echo "probe a rc=$? took $SECONDS s"
grep -v Warning $OUT/probe_a.log | tail -12
