#!/bin/bash
# Session 10 run 4: next-bf16-occ3 (16-bit D128 at 3 CTAs/SM, 2 stages): serving tests, memcheck, ncu vs main.
# carry: [".devbin/xz", ".devbin/run_s10d.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10d.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/occ3/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "occ3 serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran|FAILED  \]" $OUT/gpu_tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='PagedCuda.Mixed*:PagedCuda.Bf16Basic:DecodeCuda.Bf16AndF16:PagedCuda.EveryHeadsPerCtaAgrees' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # label, binary, env, args
  r=$(env $3 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/$2/flashgate run $P $4 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$1 | $2 $3: $r (${SECONDS}s)"
}
for a in "--op paged --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072" "--op decode --batch 128 --seqlen 1024" \
         "--op paged --batch 64 --seqlen 4096" "--op paged --batch 8 --seqlen 32768" "--op paged --batch 3 --seqlen 32768 --q-len 4"; do
  for b in main occ3; do m "$a" $b "X=1" "$a"; done
done
m "paged B128/1024" main "FLASHGATE_SERVING_STAGES=2" "--op paged --batch 128 --seqlen 1024"
m "paged B128/1024" occ3 "FLASHGATE_HEADS_PER_CTA=2" "--op paged --batch 128 --seqlen 1024"
m "paged B128/1024" occ3 "FLASHGATE_HEADS_PER_CTA=4" "--op paged --batch 128 --seqlen 1024"
echo "took $SECONDS s"
