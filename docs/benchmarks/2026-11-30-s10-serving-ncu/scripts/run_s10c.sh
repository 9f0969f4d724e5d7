#!/bin/bash
# Session 10 run 3: next-producer (fp8 D128 producer warp + mbarriers): serving tests, sanitizers, ncu vs main.
# carry: [".devbin/xz", ".devbin/run_s10c.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10c.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/producer/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "producer serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran|FAILED  \]" $OUT/gpu_tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8*:PagedCuda.Mixed*' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8ScaleModesAndPages' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool synccheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8ScaleModesAndPages' --gtest_brief=1 > $OUT/synccheck.log 2>&1
echo "synccheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/synccheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # label, binary, env, args
  r=$(env $3 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/$2/flashgate run $P $4 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$1 | $2 $3: $r (${SECONDS}s)"
}
for a in "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor" "--op paged --batch 64 --seqlen 4096 --fp8 per-tensor" \
         "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" \
         "--op paged --batch 64 --seqlen 4096 --fp8 per-token" "--op paged --batch 128 --seqlen 1024 --fp8 per-token"; do
  for b in main producer; do m "$a" $b "X=1" "$a"; done
done
m "fp8 B8/32768" producer "FLASHGATE_SERVING_STAGES=3" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"
m "fp8 B128/1024" producer "FLASHGATE_SERVING_STAGES=3" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor"
echo "took $SECONDS s"
