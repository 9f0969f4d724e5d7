#!/bin/bash
# Prepared in session 9 for session 10's first call: branch next-fp8-pairs (binaries in .devbin/xz/pairs, main's
# at 11b1f48 in .devbin/xz/main): serving tests + sanitizers on pairs, then ncu durations main vs pairs.
# carry: [".devbin/xz", ".devbin/run_s10a.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10a.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/pairs/flashgate_gpu_tests
timeout 120 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "pairs serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran" $OUT/gpu_tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8*:PagedCuda.Mixed*' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $T --gtest_filter='PagedCuda.Fp8ScaleModesAndPages' --gtest_brief=1 > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? ${SECONDS}s: $(grep -E 'RACECHECK SUMMARY|  PASSED|  FAILED' $OUT/racecheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
for a in "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor" "--op paged --batch 64 --seqlen 4096 --fp8 per-tensor" \
         "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" \
         "--op paged --batch 64 --seqlen 4096 --fp8 per-token" "--op paged --batch 128 --seqlen 1024 --fp8 per-token" \
         "--op paged --batch 3 --seqlen 131072 --q-len 4 --fp8 per-tensor" "--op paged --batch 128 --seqlen 1024"; do
  for b in main pairs; do
    r=$(timeout 25 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/$b/flashgate run $P $a 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
    echo "$a | $b: $r us (${SECONDS}s)"
  done
done
echo "took $SECONDS s"
