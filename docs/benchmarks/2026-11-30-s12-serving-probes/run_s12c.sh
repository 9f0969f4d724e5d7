#!/bin/bash
# Session 12 run 3: branch next-at-once (4 kv heads per CTA at once): serving tests, memcheck/racecheck on the
# new tests, ncu A/B (FLASHGATE_HEADS_AT_ONCE=0 = main's in-turn path), package + serving benchmark A/B.
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16 PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s12c.log) 2>&1
SECONDS=0
(python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s") &
PIP=$!
for f in .devbin/xz12/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/new/flashgate_gpu_tests
.devbin/run/new/flashgate > $OUT/main_job.log 2>&1; echo "main job rc=$? $(tail -1 $OUT/main_job.log)"
timeout 150 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests.log 2>&1; echo "serving rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|error" $OUT/gpu_tests.log | head -20
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 $T --gtest_filter='*HeadsAtOnce*:PagedCuda.EveryHeadsPerCtaAgrees' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool racecheck --print-limit 20 $T --gtest_filter='PagedCuda.HeadsAtOnce*' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
for a in "--op decode --batch 128 --seqlen 1024" "--op paged --batch 128 --seqlen 1024"; do
  for mode in 1 0; do
    r=$(FLASHGATE_HEADS_AT_ONCE=$mode timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed .devbin/run/new/flashgate run $P $a 2>&1 | grep -E "gpu__time_duration|dram__" | awk '{print $NF}' | paste -sd' ')
    echo "ncu $a at_once=$mode: $r"
  done
done
wait $PIP
for mode in 1 0 1; do
  FLASHGATE_HEADS_AT_ONCE=$mode timeout 100 python3 bench/run.py --out $OUT/bench$mode --fla .peers --rows bf16 > $OUT/bench_bf16_$mode.log 2>&1; echo "bench bf16 at_once=$mode rc=$? ${SECONDS}s"
  grep -E "^\| (decode|paged) \| bf16 .*flashgate" $OUT/bench$mode/report.md
done
echo "took $SECONDS s"
