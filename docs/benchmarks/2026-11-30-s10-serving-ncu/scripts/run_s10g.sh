#!/bin/bash
# Session 10 run 7: next-tma-producer: serving tests, memcheck, ncu vs main HEAD. carry: [".devbin/xz", ".devbin/run_s10g.sh"]
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s10g.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/tmaprod/flashgate_gpu_tests
timeout 100 $T --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1; echo "tmaprod serving rc=$? ${SECONDS}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests from .* ran|FAILED  \]" $OUT/gpu_tests.log | head -20
timeout 40 compute-sanitizer --tool memcheck --print-limit 5 $T --gtest_filter='PagedCuda.Fp8ScaleModesAndPages:PagedCuda.MixedPrefillDecodeVerify' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # binary, args
  r=$(timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/$1/flashgate run $P $2 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$2 | $1: $r (${SECONDS}s)"
}
m tmaprod "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"
m head "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"
m tmaprod "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor"
m head "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor"
m tmaprod "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor"
m head "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor"
m tmaprod "--op paged --batch 128 --seqlen 1024 --fp8 per-token"
m head "--op paged --batch 128 --seqlen 1024 --fp8 per-token"
m tmaprod "--op paged --batch 64 --seqlen 4096 --fp8 per-tensor"
echo "took $SECONDS s"
