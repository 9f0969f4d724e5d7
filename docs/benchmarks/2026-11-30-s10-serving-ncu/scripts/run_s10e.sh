#!/bin/bash
# Session 10 run 5: next-start (prefetch of the sequence's context length and first table line): serving
# tests, memcheck, ncu vs main (5 launches, alternating). carry: [".devbin/xz", ".devbin/run_s10e.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10e.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/start/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "start serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran|FAILED  \]" $OUT/gpu_tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='PagedCuda.Mixed*:PagedCuda.Fp8Scale*:PagedCuda.VerifyTails*' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
.devbin/run/start/flashgate > $OUT/default_run.log 2>&1; echo "default run rc=$?: $(tail -2 $OUT/default_run.log | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 5"
m() {  # label, binary, args
  r=$(timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 5 --metrics gpu__time_duration.sum .devbin/run/$2/flashgate run $P $3 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$1 | $2: $r (${SECONDS}s)"
}
for a in "--op paged --batch 128 --seqlen 1024" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 1 --seqlen 131072" \
         "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" "--op paged --batch 3 --seqlen 32768 --q-len 4 --fp8 per-tensor" "--op paged --batch 64 --seqlen 4096 --fp8 per-tensor"; do
  for b in main start main start; do m "$a" $b "$a"; done
done
echo "took $SECONDS s"
