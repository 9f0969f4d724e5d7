#!/bin/bash
# Session 12 run 7: branch next-lean-copy (run copies without byte count, one add per row): serving tests,
# memcheck, ncu duration + executed instructions against main's binary (d9800c2).
cd "$(dirname "$0")/.."
export FLASHGATE_CPU_THREADS=16
exec > >(tee $OUT/s12g.log) 2>&1
SECONDS=0
for f in .devbin/xz12c/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
T=.devbin/run/lean/flashgate_gpu_tests
timeout 150 $T --gtest_filter='*Decode*:*Paged*' --gtest_brief=1 > $OUT/gpu_tests.log 2>&1; echo "serving rc=$? ${SECONDS}s $(grep -E '(PASSED|FAILED|SKIPPED) *\]' $OUT/gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure" $OUT/gpu_tests.log | head -20
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 $T --gtest_filter='PagedCuda.Fp8*:PagedCuda.Mixed*:DecodeCuda.ManySequences' --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? ${SECONDS}s: $(grep -E 'ERROR SUMMARY|  PASSED|  FAILED' $OUT/memcheck.log | tail -3 | tr '\n' ' ')"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # binary args
  r=$(timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum,smsp__inst_executed.sum .devbin/run/$1/flashgate run $P $2 2>&1 | grep -E "gpu__time_duration|inst_executed" | awk '{print $NF}' | paste -sd' ')
  echo "$2 | $1: $r"
}
for a in "--op paged --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072" "--op decode --batch 128 --seqlen 1024" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 128 --seqlen 1024 --fp8 per-token" "--op paged --batch 64 --seqlen 4096"; do
  m main "$a"; m lean "$a"; m main "$a"; m lean "$a"
done
echo "took $SECONDS s"
