#!/bin/bash
# Session 23 device runs: `run_s23.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz, trees as
# .devbin/<name>.tar (git archive) (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages
# fp8_tables NAME...: the fp8 / bf16 table of each variant's report
fp8_tables() { local v; for v in "$@"; do echo "== $v"; grep -A8 "x bf16 tokens/s" $OUT/bench_$v/report.md; done; }
# d64_sweeps NAME...: the paged rows at head dim 64 (every kind, the planner's counts, 3 rounds) with each package
# .devbin/py/NAME into $OUT/sweep_NAME.tsv, each table printed
D64_ROWS="B64 ctx 4096=0;B8 ctx 32768=0;B128 ctx 1024=0;B1 ctx 131072=0"
D64_ROWS="$D64_ROWS;verify 3 x 4 tokens, ctx 32768=0;verify 3 x 4 tokens, ctx 131072=0"
d64_sweeps() {
  local v
  for v in "$@"; do
    PYTHONPATH=.devbin/py/$v timeout 200 python3 docs/benchmarks/sweep_slices.py $OUT/sweep_$v.tsv 3 "$D64_ROWS" \
      --head-dim 64 > $OUT/sweep_$v.log 2>&1
    echo "sweep $v rc=$? at ${SECONDS}s"; python3 docs/benchmarks/sweep_table.py $OUT/sweep_$v.tsv
  done
}
case "$1" in
  1) # branch token-scale-copy (.devbin/gpu_s23a.tar.xz): per-token scales copied one per lane (K lanes 0-15, V lanes
     # 16-31, 32-bit offsets) and the V-unit raise behind a vote. The serving suite (the new refusal test with it),
     # memcheck over the per-token tests; main's package (38e4489) against this tree's, the serving rows alternating
     # twice
     unpack gpu_s23a; NEW=$B
     serving_validation $NEW 'PagedCuda.Fp8*:PagedCuda.EightRowTilePerTokenBias:PagedCuda.HeadMajorCacheThroughStrides:PagedCuda.ScaleViews*'
     tree_package base .devbin/main_38e4489.tar.xz; package tok .
     for r in 1 2; do bench_variants "base$r=X=1" .devbin/py/base; bench_variants "tok$r=X=1" .devbin/py/tok; done
     fp8_tables base1 tok1 base2 tok2
     (cd $OUT && tar -czf run1.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  2) # branch fp8-d64 (.devbin/gpu_s23b.tar.xz): fp8 D64 in its own tiles (8-byte value loads) instead of padded in the
     # D128 ones. The serving suite, memcheck and racecheck over the new D64 test; the paged rows at head dim 64 (every
     # kind, the planner's counts) with main's package (b1cf7a8) and this tree's, 3 rounds each; the D128 benchmark
     # rows once with each (the D128 kernels' code moved a little)
     unpack gpu_s23b; NEW=$B
     serving_validation $NEW 'PagedCuda.Fp8HeadDim64:PagedCuda.EightRowTileKeysAsM'
     racecheck $NEW 'PagedCuda.Fp8HeadDim64'
     tree_package base .devbin/main_b1cf7a8.tar.xz; package d64 .
     d64_sweeps base d64
     bench_variants "base=X=1" .devbin/py/base; bench_variants "d64=X=1" .devbin/py/d64
     fp8_tables base d64
     (cd $OUT && tar -czf run2.tgz bench_* *.log *.tsv && rm -rf bench_* *.log *.tsv) ;;
  3) # branch fp8-32keys 60bbb7d, not kept (.devbin/gpu_s23c.tar.xz; the script's copy on that branch ran): the fp8
     # D64 8-row tile takes two stages per loop step (one softmax update for both, their mma chains overlapping). The serving suite, memcheck and racecheck; the D64 rows (every
     # kind) with main's package (af573be: D64 tiles, one stage a step) and this tree's, 3 rounds each; the D128
     # benchmark rows with both, and with a variant that takes two stages a step on the fp8 D128 8-row tile too, at
     # 4 and 3 stages (forced for every kernel: its fp8 columns are the ones to read)
     unpack gpu_s23c; NEW=$B
     serving_validation $NEW 'PagedCuda.Fp8HeadDim64:PagedCuda.EightRowTileKeysAsM:PagedCuda.EveryPipelineDepthAgrees'
     racecheck $NEW 'PagedCuda.Fp8HeadDim64'
     tree_package base .devbin/main_af573be.tar.xz; package pair .
     variant_package pair128 src/cuda/portable/paged_tile.cuh 's/ROWS == 8 \&\& KP_ == 64 ? 2/ROWS == 8 \&\& KP_ <= 128 ? 2/'
     d64_sweeps base pair
     bench_variants "base=X=1" .devbin/py/base; bench_variants "pair=X=1" .devbin/py/pair
     bench_variants "p128s4=FLASHGATE_SERVING_STAGES=4 p128s3=FLASHGATE_SERVING_STAGES=3" .devbin/py/pair128
     fp8_tables base pair p128s4 p128s3
     (cd $OUT && tar -czf run3.tgz bench_* *.log *.tsv && rm -rf bench_* *.log *.tsv) ;;
  4) # main 4a02abd (.devbin/gpu_s23d.tar.xz; the kernels of af573be, run 2): the default run; this tree's package,
     # pytest on the GPU, the benchmark (of record); ncu of the fp8 D64 8-row tile at paged B64/4096 (per tensor, per
     # token): where its time goes now that it no longer runs padded
     unpack gpu_s23d; NEW=$B
     main_job $NEW
     package_and_record
     for v in "fp8t --fp8 per-tensor" "fp8k --fp8 per-token"; do
       name=${v%% *}; args=${v#* }
       timeout 120 ncu --clock-control none --kernel-name regex:paged_mma --launch-skip 2 --launch-count 1 \
         --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
         --section LaunchStats --section Occupancy $NEW/flashgate run ${ROW64/--head-dim 128/--head-dim 64} $args \
         --iters 3 > $OUT/ncu_d64_$name.log 2>&1
       echo "ncu $name rc=$? at ${SECONDS}s"
     done
     grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Achieved Occupancy|Registers Per|Block Limit" $OUT/ncu_d64_*.log
     (cd $OUT && tar -czf run4.tgz bench *.log && rm -rf bench *.log) ;;
  5) # main: the fp8 D64 tile reads 64-byte rows (half an L2 line; the other half is the next kv head's, read by another
     # CTA), DRAM 58% in run 4's ncu. Variants with an L2 prefetch-size hint on the 16-byte row copies (L2::128B: the
     # whole line; L2::256B: two) against main, the D64 rows (every kind; bf16's 128-byte rows the control), 3 rounds
     main_package
     SRC='cp.async.cg.shared.global \[%0\], \[%1\], 16, %2'
     variant_package l2x128 src/cuda/ptx/cp_async.h "s/$SRC/cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2/"
     variant_package l2x256 src/cuda/ptx/cp_async.h "s/$SRC/cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2/"
     d64_sweeps main l2x128 l2x256
     (cd $OUT && tar -czf run5.tgz *.log *.tsv && rm -rf *.log *.tsv) ;;
  6) # main with the L2::128B hint on rows shorter than a line (.devbin/gpu_s23e.tar.xz): the serving suite, memcheck
     # over the D64 and 8-row tests; the D64 rows (every kind) with this tree's package, 3 rounds
     unpack gpu_s23e; NEW=$B
     serving_validation $NEW 'PagedCuda.Fp8HeadDim64:PagedCuda.EightRowTileKeysAsM:PagedCuda.Fp8ScaleModesAndPages'
     main_package
     d64_sweeps main
     (cd $OUT && tar -czf run6.tgz *.log *.tsv && rm -rf *.log *.tsv) ;;
  7) # branch scale-line (.devbin/gpu_s23f.tar.xz): the per-token scale copies prefetch their whole 128-byte line into L2
     # (a page's 16 scales of one kv head are 64 bytes; the next kv head's share the line). The serving suite; main's
     # package (5d87c39) against this tree's, the serving rows alternating twice
     unpack gpu_s23f; NEW=$B
     serving_validation $NEW -
     tree_package base .devbin/main_5d87c39.tar.xz; package sl .
     for r in 1 2; do bench_variants "base$r=X=1" .devbin/py/base; bench_variants "sl$r=X=1" .devbin/py/sl; done
     fp8_tables base1 sl1 base2 sl2
     (cd $OUT && tar -czf run7.tgz bench_* *.log && rm -rf bench_* *.log) ;;
esac
