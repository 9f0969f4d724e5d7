#!/bin/bash
# Session 10 run 6: main HEAD binaries: default run, serving tests, memcheck. carry: [".devbin/xz", ".devbin/run_s10f.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10f.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
.devbin/run/head/flashgate > $OUT/default_run.log 2>&1; echo "default run rc=$?: $(tail -3 $OUT/default_run.log | tr '\n' ' ')"
T=.devbin/run/head/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran|FAILED  \]" $OUT/gpu_tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8ScaleModesAndPages:PagedCuda.MixedPrefillDecodeVerify:PagedCuda.Bf16Basic' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
echo "took $SECONDS s"
