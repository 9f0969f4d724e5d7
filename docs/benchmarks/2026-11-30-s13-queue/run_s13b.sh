#!/bin/bash
# Session 13 run 2: branch queue: serving tests on the static kernel and on the queue kernel
# (FLASHGATE_SERVING_QUEUE=1: default units and a many-chunk setting), memcheck/racecheck on the queue path, package +
# probe_s13b (queue vs static on the bf16 rows).
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16 PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s13b.log) 2>&1
SECONDS=0
(python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s") &
PIP=$!
for f in .devbin/xz13/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/new/flashgate_gpu_tests
.devbin/run/new/flashgate > $OUT/main_job.log 2>&1; echo "main job rc=$? $(tail -1 $OUT/main_job.log)"
timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_static.log 2>&1; echo "static rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_static.log | tr '\n' ' ')"
FLASHGATE_SERVING_QUEUE=1 timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_queue.log 2>&1; echo "queue rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_queue.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|error" $OUT/gpu_tests_queue.log | head -20
FLASHGATE_SERVING_QUEUE=1 FLASHGATE_QUEUE_HEAD_UNITS=9 FLASHGATE_QUEUE_TAIL_UNITS=7 FLASHGATE_QUEUE_TAIL_PERMILLE=370 timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_queue64.log 2>&1; echo "queue64 rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_queue64.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" $OUT/gpu_tests_queue64.log | head -10
FLASHGATE_SERVING_QUEUE=1 timeout 100 compute-sanitizer --tool memcheck --print-limit 20 $T --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.MixedPrefillDecodeVerify:PagedCuda.WindowsAndSinks:DecodeCuda.*Gate*:PagedCuda.BadIndicesAreNeverDereferenced' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
FLASHGATE_SERVING_QUEUE=1 timeout 80 compute-sanitizer --tool racecheck --print-limit 20 $T --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.MixedPrefillDecodeVerify' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool racecheck --print-limit 5 $T --gtest_filter='PagedCuda.Bf16Basic' --gtest_brief=1 > $OUT/racecheck_static.log 2>&1
echo "racecheck static rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck_static.log | tail -3 | tr '\n' ' ')"
wait $PIP
timeout 200 python3 docs/benchmarks/2026-11-30-s13-queue/probe_s13b.py 2>&1 | grep -v Warning | tee $OUT/probe.log
echo "took $SECONDS s"
