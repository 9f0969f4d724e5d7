#!/bin/bash
# Session 13 run 3: branch queue (3 unit slots, id prefetch, fences): queue-path serving tests (default and a
# many-chunk setting), Context65537 repeated, racecheck, package + probe_s13a.
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16 PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s13c.log) 2>&1
SECONDS=0
(python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s") &
PIP=$!
for f in .devbin/xz13/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/new/flashgate_gpu_tests
FLASHGATE_SERVING_QUEUE=1 timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_queue.log 2>&1; echo "queue rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_queue.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|relative RMS" $OUT/gpu_tests_queue.log | head -10
FLASHGATE_SERVING_QUEUE=1 FLASHGATE_QUEUE_HEAD_UNITS=9 FLASHGATE_QUEUE_TAIL_UNITS=7 FLASHGATE_QUEUE_TAIL_PERMILLE=370 timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_queue_many.log 2>&1; echo "queue many rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_queue_many.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|relative RMS" $OUT/gpu_tests_queue_many.log | head -10
FLASHGATE_SERVING_QUEUE=1 timeout 120 $T --gtest_filter='*Context65537*' --gtest_repeat=6 --gtest_brief=1 > $OUT/gpu_tests_65537.log 2>&1; echo "65537 x6 rc=$? ${SECONDS}s $(grep -cE '^\[  FAILED  \]' $OUT/gpu_tests_65537.log) failed"
grep -E "relative RMS" $OUT/gpu_tests_65537.log | head -5
FLASHGATE_SERVING_QUEUE=1 timeout 80 compute-sanitizer --tool racecheck --print-limit 4 $T --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.MixedPrefillDecodeVerify' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
wait $PIP
PROBE_CONFIGS="2,0,0;2,3,100;2,2,250;3,3,200" timeout 240 python3 docs/benchmarks/2026-11-30-s13-queue/probe_s13a.py 2>&1 | grep -v Warning | tee $OUT/probe.log
echo "took $SECONDS s"
