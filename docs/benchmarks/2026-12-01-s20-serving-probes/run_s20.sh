#!/bin/bash
# Session 20 device runs: `run_s20.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages, bench_variants
case "$1" in
  1) # branch bf16-eight-rows (.devbin/gpu_s20a.tar.xz): 16-bit D128 row blocks of <= 8 rows (decode at GQA <= 8) take
     # the 8-row tile (keys as the mma's M) as fp8 does (180 registers on sm_90a, no spills). Serving suite (new:
     # DecodeCuda.EightRowTileKeysAsM, PagedCuda.EightRowTileKeysAsM over bf16 / f16), memcheck over the 8-row tests
     # and the decode gate tests, racecheck over a small decode test; this tree's package and the serving rows: 8-row,
     # 16-row, 8-row again; a variant package whose 16-bit 8-row tile runs 3 CTAs per SM (167 registers, no spills)
     unpack gpu_s20a; NEW=$B
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'DecodeCuda.EightRow*:PagedCuda.EightRowTileKeysAsM:DecodeCuda.GateSinkWindow:DecodeCuda.UnalignedQueryRows'
     racecheck $NEW 'DecodeCuda.Bf16AndF16'
     main_package
     bench_variants "rows8=FLASHGATE_SERVING_ROWS=8 rows16=FLASHGATE_SERVING_ROWS=16 rows8b=FLASHGATE_SERVING_ROWS=8"
     variant_package occ3 src/cuda/portable/paged_tile.cuh 's/VP <= 64 ? 3 : 2;/VP <= 64 || kKeysAsM ? 3 : 2;/' \
       && bench_variants "occ3=X=1" .devbin/py/occ3
     (cd $OUT && tar -czf run1.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  2) # branch fp8-heads-in-turn (.devbin/gpu_s20b.tar.xz): the fp8 8-row tile takes several kv heads in turn (as the
     # 16-bit kernels do), so that fp8 B128/1024 (1024 (sequence, head) pairs on 528 slots: two waves with a trough
     # between them, session 12) runs one wave of 512 CTAs; sm_90a spills 36 B per tensor, 104 B per token at its
     # 128 registers. Serving suite, memcheck over the 8-row tests; this tree's package: the serving rows at the
     # planner's heads per CTA, at one head per CTA (the spills' cost alone), and again; a package without the change
     # (branch bf16-eight-rows' tree) between them
     unpack gpu_s20b; NEW=$B
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'PagedCuda.EightRowTileKeysAsM'
     main_package
     bench_variants "hit=X=1 hit_h1=FLASHGATE_HEADS_PER_CTA=1"
     variant_package base src/cuda/portable/paged_tile.cuh 's/kHeadsInTurn = !Traits::kFp8 || kKeysAsM;/kHeadsInTurn = !Traits::kFp8;/' \
       && bench_variants "base=X=1" .devbin/py/base
     bench_variants "hit2=X=1"
     (cd $OUT && tar -czf run2.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  3) # branch bf16-eight-rows 5082c56 (.devbin/gpu_s20c.tar.xz), the tree to merge: default run, ptx and the whole GPU
     # suite, memcheck over the paged 8-row test (two heads per CTA new for 16-bit caches); this tree's package, pytest on
     # the GPU, the benchmark (of record); then ncu kernel times of paged B64 at contexts 1024-8192 (one split: a fixed
     # partition) for bf16, fp8 per tensor and per token, for a fit of streaming rate and fixed cost per launch
     unpack gpu_s20c; NEW=$B
     main_job $NEW
     timeout 330 $NEW/flashgate_gpu_tests > $OUT/gpu_tests_all.log 2>&1
     echo "whole GPU suite rc=$? at ${SECONDS}s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/gpu_tests_all.log | tr '\n' ' ')"
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests_all.log | head -5
     memcheck $NEW 'PagedCuda.EightRowTileKeysAsM'
     main_package; gpu_pytest; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     for mode in "" "--fp8 per-tensor" "--fp8 per-token"; do for L in 1024 2048 4096 8192; do
       row="--op paged --batch 64 --seqlen $L --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check $mode"
       t=$(FLASHGATE_NUM_SPLITS=1 timeout 60 ncu --clock-control none -k regex:paged_mma_kernel --launch-skip 2 --launch-count 3 \
         --metrics gpu__time_duration.sum $NEW/flashgate run $row --iters 6 2>&1 | awk '/gpu__time_duration.sum/ {print $NF}' | tr '\n' ' ')
       echo "FLASHGATE_NUM_SPLITS=1 $row: $t"
     done; done > $OUT/fit.log 2>&1; cat $OUT/fit.log
     (cd $OUT && tar -czf run3.tgz bench *.log && rm -rf bench *.log) ;;
  4) # branch value-words (.devbin/gpu_s20d.tar.xz): both layouts load their value words through one helper; the SASS
     # changed (schedules, address folding; bf16 D256 / D512 most), registers within 2, no spills. Serving suite; this
     # tree's package against main's (.devbin/main_tree.tar, main's kernels = run 3's) on the serving rows, main first
     # and last; ncu kernel times of paged bf16 D256 and D512 B8/32768 (no benchmark row) on both binaries
     unpack gpu_s20c; MAIN=$B; unpack gpu_s20d; NEW=$B
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     main_package; tree_package base .devbin/main_tree.tar
     bench_variants "base=X=1" .devbin/py/base; bench_variants "helper=X=1"; bench_variants "base2=X=1" .devbin/py/base
     for d in 256 512; do for b in main=$MAIN new=$NEW; do
       row="--op paged --batch 8 --seqlen 32768 --heads 32 --kv-heads 8 --head-dim $d --block-size 16 --backend cuda --no-check"
       t=$(timeout 60 ncu --clock-control none -k regex:paged_mma_kernel --launch-skip 2 --launch-count 3 \
         --metrics gpu__time_duration.sum ${b#*=}/flashgate run $row --iters 6 2>&1 | awk '/gpu__time_duration.sum/ {print $NF}' | tr '\n' ' ')
       echo "${b%%=*} D$d: $t"
     done; done > $OUT/ncu_wide.log 2>&1; cat $OUT/ncu_wide.log
     (cd $OUT && tar -czf run4.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  5) # main 774be04 (kernels as run 4's helper): does a finer static partition shorten the ragged end of the one-wave
     # rows? The serving rows at the planner's split count and at 2, 3, 4 splits forced for every row (read only the
     # rows the planner runs unsplit: B64/4096 and B128/1024), the planner's again
     main_package
     bench_variants "plan=X=1 sp2=FLASHGATE_NUM_SPLITS=2 sp3=FLASHGATE_NUM_SPLITS=3 sp4=FLASHGATE_NUM_SPLITS=4 plan2=X=1"
     (cd $OUT && tar -czf run5.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  6) # main f0f4097 (kernels as runs 4-5): the split rows' slice counts. The planner gives fp8 verify 3x4 128K 22 slices
     # (528 CTAs, one wave at 4 per SM; 1.79x, 0.5% short of 1.8x), bf16 11, B1/131072 66 (fp8) / 33 (bf16): the serving
     # rows at 16, 22, 33, 44, 66 slices forced for every row (read the split rows only) and at the planner's
     main_package
     bench_variants "plan=X=1 sp16=FLASHGATE_NUM_SPLITS=16 sp22=FLASHGATE_NUM_SPLITS=22 sp33=FLASHGATE_NUM_SPLITS=33 sp44=FLASHGATE_NUM_SPLITS=44 sp66=FLASHGATE_NUM_SPLITS=66"
     (cd $OUT && tar -czf run6.tgz *.log bench_* && rm -rf *.log bench_*) ;;
  7) # main (as run 6): run 6 found the split rows faster with fewer slices than the planner's one full wave (fp8 per
     # tensor B1/131072 33 slices -4.4%, verify 32K 16 slices -2.6%, bf16 B1/131072 16 slices -2%; per token B1 33
     # slices +3%). Packages whose split model sees half (half) and three quarters (q3) of the resident slots, against
     # this tree's (plan), plan first and last
     [ -d .devbin/py/main ] || main_package
     variant_package half src/cuda/portable/serving.cpp 's/  q.slots = slots;/  q.slots = std::max<int64_t>(slots \/ 2, 1);/'
     variant_package q3 src/cuda/portable/serving.cpp 's/  q.slots = slots;/  q.slots = std::max<int64_t>(slots * 3 \/ 4, 1);/'
     bench_variants "plan=X=1"; bench_variants "half=X=1" .devbin/py/half; bench_variants "q3=X=1" .devbin/py/q3
     (cd $OUT && tar -czf run7.tgz *.log bench_* && rm -rf *.log bench_*) ;;
esac
echo "total ${SECONDS}s"
