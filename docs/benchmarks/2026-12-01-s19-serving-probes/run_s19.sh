#!/bin/bash
# Session 19 device runs: `run_s19.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # ROW64 / ROW128, unpack, ab_rows, the validation steps
B1="--batch 1 --seqlen 131072"; B8="--batch 8 --seqlen 32768"
FP8_ROWS=("fp8t_B64|$ROW64 --fp8 per-tensor" "fp8t_B8|${ROW64/--batch 64 --seqlen 4096/$B8} --fp8 per-tensor"
  "fp8t_B128|$ROW128 --fp8 per-tensor" "fp8t_B1|${ROW64/--batch 64 --seqlen 4096/$B1} --fp8 per-tensor"
  "fp8k_B64|$ROW64 --fp8 per-token" "fp8k_B8|${ROW64/--batch 64 --seqlen 4096/$B8} --fp8 per-token"
  "fp8k_B128|$ROW128 --fp8 per-token" "fp8k_B1|${ROW64/--batch 64 --seqlen 4096/$B1} --fp8 per-token")
# bench_variants "NAME[=ENV=VALUE] ...": the benchmark's serving rows with this tree's package, once per variant
bench_variants() {
  local v
  for v in $1; do
    FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 200 \
      env ${v#*=} python3 bench/run.py --out $OUT/bench_${v%%=*} --rows ctx --only serving > $OUT/bench_${v%%=*}.log 2>&1
    echo "bench ${v%%=*} rc=$? at ${SECONDS}s"
  done
}
case "$1" in
  1) # branch next-keys-as-m bc019f7 (.devbin/gpu_s19a.tar.xz): fp8 D128 row blocks of <= 8 rows (decode at GQA <= 8
     # with max_seqlen_q) take an 8-row tile with keys as the mma's M; FLASHGATE_SERVING_ROWS=16 forces the 16-row
     # layout. Ptx + serving suite, memcheck over the new tests; the CLI fp8 rows 8-row / 16-row alternating; this
     # tree's package and the benchmark's serving rows: 8-row, 16-row, 8-row again
     unpack gpu_s19a; NEW=$B
     timeout 60 $NEW/flashgate_gpu_tests --gtest_filter='Ptx*' > $OUT/ptx.log 2>&1
     echo "ptx rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/ptx.log | tr '\n' ' ')"
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'PagedCuda.EightRow*'
     for r in 1 2; do for row in "${FP8_ROWS[@]}"; do for v in 8 16; do
       echo "$r ${row%%|*} rows$v $(FLASHGATE_SERVING_ROWS=$v $NEW/flashgate run ${row#*|} --iters 300 | grep -E '^time')"
     done; done; done > $OUT/ab.log 2>&1; cat $OUT/ab.log
     main_package
     bench_variants "rows8=FLASHGATE_SERVING_ROWS=8 rows16=FLASHGATE_SERVING_ROWS=16 rows8b=FLASHGATE_SERVING_ROWS=8"
     (cd $OUT && tar -czf run1.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  2) # branch next-keys-as-m (.devbin/gpu_s19b.tar.xz): run 1's 8-row tile was 13-14% slower per tensor on the long
     # rows; now its S^T takes two accumulator chains (one of 8 dependent mmas before) and, like the 16-row fp8 D128
     # tile, reads the query fragments from shared memory (126 / 124 registers, no spills). Serving suite; this
     # tree's package and the benchmark's serving rows: 8-row, 16-row, 8-row again
     unpack gpu_s19b; NEW=$B
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     main_package
     bench_variants "rows8=FLASHGATE_SERVING_ROWS=8 rows16=FLASHGATE_SERVING_ROWS=16 rows8b=FLASHGATE_SERVING_ROWS=8"
     (cd $OUT && tar -czf run2.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  3) # branch next-keys-as-m (.devbin/gpu_s19b.tar.xz): why run 2's 8-row tile is 7% slower per tensor on the long
     # rows (2% faster per token): ncu warp states, scheduler and instruction statistics of one launch each, fp8
     # per tensor and per token B64/4096, 8-row and 16-row
     unpack gpu_s19b; NEW=$B
     for mode in per-tensor per-token; do for v in 8 16; do
       FLASHGATE_SERVING_ROWS=$v timeout 120 ncu --clock-control none -k regex:paged_mma_kernel --launch-skip 3 \
         --launch-count 1 --section WarpStateStats --section SchedulerStats --section InstructionStats \
         --section SpeedOfLight --metrics smsp__inst_executed.sum,dram__bytes_read.sum.per_second \
         $NEW/flashgate run $ROW64 --fp8 $mode --iters 5 > $OUT/ncu_${mode}_rows$v.log 2>&1
       echo "ncu $mode rows$v rc=$? at ${SECONDS}s"
     done; done
     (cd $OUT && tar -czf run3.tgz *.log && rm -rf *.log) ;;
  4) # branch next-keys-as-m (.devbin/gpu_s19c.tar.xz): run 3 showed the 8-row kernels reading at 3.6-3.7 TB/s with
     # half their stalls on L1TEX; the 8-row tile's smaller merge facts had put the ring 64 bytes off 128 (kFixedBytes
     # 4928), so every 128-byte fp8 row straddled two lines. Now the ring starts on 128 bytes. The 8-row tests; ncu
     # of per tensor B64/4096 8-row; this tree's package and the serving rows: 8-row, 16-row, 8-row again
     unpack gpu_s19c; NEW=$B
     timeout 100 $NEW/flashgate_gpu_tests --gtest_filter='PagedCuda.EightRow*:Ptx.Movmatrix*' > $OUT/gpu_tests.log 2>&1
     echo "8-row tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/gpu_tests.log | tr '\n' ' ')"
     FLASHGATE_SERVING_ROWS=8 timeout 120 ncu --clock-control none -k regex:paged_mma_kernel --launch-skip 3 \
       --launch-count 1 --section WarpStateStats --section SpeedOfLight --metrics smsp__inst_executed.sum,dram__bytes_read.sum.per_second \
       $NEW/flashgate run $ROW64 --fp8 per-tensor --iters 5 > $OUT/ncu_per-tensor_rows8.log 2>&1
     echo "ncu rc=$? at ${SECONDS}s: $(grep -E 'Duration|dram__bytes_read' $OUT/ncu_per-tensor_rows8.log | tr -s ' ' | tr '\n' ' ')"
     main_package
     bench_variants "rows8=FLASHGATE_SERVING_ROWS=8 rows16=FLASHGATE_SERVING_ROWS=16 rows8b=FLASHGATE_SERVING_ROWS=8"
     (cd $OUT && tar -czf run4.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  5) # branch next-keys-as-m (as run 4): the 8-row tile's ring depth. Its compute now hides under the loads on the
     # long rows, so more bytes in flight may pay where session 16 found 2 stages best for the 16-row tile. This
     # tree's package; the serving rows at the planner's depth (2), 3 stages (4 CTAs per SM still fit), 4 stages
     # (3 CTAs), the planner's again
     main_package
     bench_variants "st2=FLASHGATE_SERVING_STAGES=2 st3=FLASHGATE_SERVING_STAGES=3 st4=FLASHGATE_SERVING_STAGES=4 plan=X=1"
     (cd $OUT && tar -czf run5.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  6) # branch next-keys-as-m, final tree (.devbin/gpu_s19d.tar.xz): default run, ptx and serving suites, memcheck over the
     # paged tests that take the 8-row tile and the new paths of session 18, racecheck over the 8-row bias test and one
     # 16-row test; this tree's Python package, pytest on the GPU, the benchmark's serving rows (the benchmark of record)
     unpack gpu_s19d; NEW=$B
     main_job $NEW
     timeout 60 $NEW/flashgate_gpu_tests --gtest_filter='Ptx*' > $OUT/ptx.log 2>&1
     echo "ptx rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/ptx.log | tr '\n' ' ')"
     serving_suite $NEW
     memcheck $NEW 'PagedCuda.EightRow*:PagedCuda.MaxSeqlen*:PagedCuda.Fp8ScaleModesAndPages:PagedCuda.BadIndices*:Ptx.Movmatrix*'
     racecheck $NEW 'PagedCuda.EightRowTilePerTokenBias:PagedCuda.VerifyTailsInsidePages'
     main_package; gpu_pytest; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     (cd $OUT && tar -czf run6.tgz bench *.log && rm -rf bench *.log) ;;
  7) # main 1017e7d (.devbin/gpu_s19e.tar.xz): the 8-row test now also takes G 3 and 5 (padding rows in the tile);
     # its comments changed since run 6, no kernel code. The 8-row tests; memcheck over them
     unpack gpu_s19e; NEW=$B
     timeout 100 $NEW/flashgate_gpu_tests --gtest_filter='PagedCuda.EightRow*' > $OUT/gpu_tests.log 2>&1
     echo "8-row tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/gpu_tests.log | tr '\n' ' ')"
     memcheck $NEW 'PagedCuda.EightRow*'
     (cd $OUT && tar -czf run7.tgz *.log && rm -rf *.log) ;;
  8) # main (kernels as run 6): the decode rows with the same cache in vLLM's layout and head-major through strides
     # (probe_s19_layout.py): does the fp8 decode kernel, its compute now under its loads, gain from longer runs?
     main_package
     PYTHONPATH=.devbin/py/main timeout 200 python3 docs/benchmarks/2026-12-01-s19-serving-probes/probe_s19_layout.py \
       > $OUT/layout.log 2>&1
     echo "layout probe rc=$? at ${SECONDS}s"; cat $OUT/layout.log | tail -14
     (cd $OUT && tar -czf run8.tgz *.log && rm -rf *.log) ;;
  9) # main after a refactor of the kernel (.devbin/gpu_s19f.tar.xz: the V-scale unit raise and the hi + lo split as one
     # helper each for both layouts): serving suite, memcheck over the 8-row tests; this tree's package and the
     # benchmark's serving rows
     unpack gpu_s19f; NEW=$B
     serving_suite $NEW
     memcheck $NEW 'PagedCuda.EightRow*:PagedCuda.Fp8MixedScaleModes'
     main_package
     bench_variants "main=X=1"
     grep -A8 "x bf16 tokens/s" $OUT/bench_main/report.md
     (cd $OUT && tar -czf run9.tgz *.log bench_* && rm -rf *.log bench_*) ;;
esac
echo "total ${SECONDS}s"
