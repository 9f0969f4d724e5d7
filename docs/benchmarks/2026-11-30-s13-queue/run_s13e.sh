#!/bin/bash
# Session 13 run 5: branch queue with non-aligned named barriers, no compute-side fence: is the intermittent
# DecodeCuda.Context65537 failure gone? Queue-path tests, Context65537 x10, racecheck.
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16 PYTHONUNBUFFERED=1
exec > >(tee $OUT/s13e.log) 2>&1
SECONDS=0
for f in .devbin/xz13/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/new/flashgate_gpu_tests
FLASHGATE_SERVING_QUEUE=1 timeout 120 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests_queue.log 2>&1; echo "queue rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests_queue.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|relative RMS" $OUT/gpu_tests_queue.log | head -10
FLASHGATE_SERVING_QUEUE=1 timeout 150 $T --gtest_filter='*Context65537*' --gtest_repeat=10 --gtest_brief=1 > $OUT/gpu_tests_65537.log 2>&1; echo "65537 x10 rc=$? ${SECONDS}s $(grep -cE '^\[  FAILED  \]' $OUT/gpu_tests_65537.log) failed"
grep -E "relative RMS" $OUT/gpu_tests_65537.log | head -5
FLASHGATE_SERVING_QUEUE=1 timeout 80 compute-sanitizer --tool racecheck --print-limit 4 $T --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.MixedPrefillDecodeVerify' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
FLASHGATE_SERVING_QUEUE=1 timeout 80 compute-sanitizer --tool synccheck --print-limit 4 $T --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.MixedPrefillDecodeVerify' --gtest_brief=1 > $OUT/synccheck.log 2>&1
echo "synccheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/synccheck.log | tail -3 | tr '\n' ' ')"
echo "took $SECONDS s"
