#!/bin/bash
# Session 12 run 5: branch next-at-once + probe-loaded sequence search: serving tests, memcheck, ncu A/B
# against main's binary (d9800c2) and the branch with heads at once off, then the serving benchmark.
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16 PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s12e.log) 2>&1
SECONDS=0
(python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s") &
PIP=$!
for f in .devbin/xz12b/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/new/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests.log 2>&1; echo "serving rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure" $OUT/gpu_tests.log | head -20
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 $T --gtest_filter='PagedCuda.Mixed*:PagedCuda.BadIndices*:PagedCuda.HeadsAtOnce*' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # label binary env args
  r=$(env $3 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/$2/flashgate run $P $4 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$4 | $1: $r"
}
for a in "--op paged --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072" "--op decode --batch 128 --seqlen 1024"; do
  m main main X=1 "$a"; m search new FLASHGATE_HEADS_AT_ONCE=0 "$a"; m search+at_once new X=1 "$a"; m main main X=1 "$a"
done
for a in "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"; do
  m main main X=1 "$a"; m search new X=1 "$a"; m main main X=1 "$a"; m search new X=1 "$a"
done
echo "ncu done ${SECONDS}s"
wait $PIP
timeout 150 python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1; echo "bench rc=$? ${SECONDS}s"
grep -E "^\| (decode|paged) \|.*flashgate|^\| paged \| B" $OUT/bench/report.md
echo "took $SECONDS s"
