#!/bin/bash
# Session 21 device runs: `run_s21.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
HERE=docs/benchmarks/2026-12-01-s21-serving-probes
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages
# sweep NAME PKG [ROUNDS] [short]: sweep_slices.py with package PKG into $OUT/sweep_NAME.tsv
sweep() {
  PYTHONPATH=$2 timeout 300 python3 docs/benchmarks/sweep_slices.py $OUT/sweep_$1.tsv ${3:-3} $4 > $OUT/sweep_$1.log 2>&1
  echo "sweep $1 rc=$? at ${SECONDS}s"
}
# kernels BIN NAME ROWFLAGS: every kernel of one `flashgate run` of BIN (ncu, clocks as they run), 6 launches after 4
kernels() {
  echo "== $2"
  timeout 90 ncu --clock-control none --launch-skip 4 --launch-count 6 --metrics gpu__time_duration.sum \
    $1/flashgate run $3 --iters 8 2>&1 | grep -E '^  [a-z_]+.*\(|gpu__time_duration' | sed 's/ (.*//'
}
case "$1" in
  1) # main (kernels as session 20's run 4): the split rows' slice counts swept in one process for every kind
     # (sweep_slices.py, 4 rounds interleaved), and every kernel of the split rows' launches (split kernel, merge)
     main_package
     PYTHONPATH=.devbin/py/main timeout 400 python3 docs/benchmarks/sweep_slices.py $OUT/sweep.tsv 4 > $OUT/sweep.log 2>&1
     echo "sweep rc=$? at ${SECONDS}s"; tail -3 $OUT/sweep.log
     unpack gpu_s21a; NEW=$B
     B1="--op paged --batch 1 --seqlen 131072 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
     V32="--op paged --batch 3 --seqlen 32768 --q-len 4 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
     for m in "" "--fp8 per-tensor" "--fp8 per-token"; do kernels $NEW "B1 $m" "$B1 $m"; kernels $NEW "verify32K $m" "$V32 $m"; done \
       > $OUT/kernels.log 2>&1
     (cd $OUT && tar -czf run1.tgz *.log && rm -f *.log) ;;
  2) # branch merge-batch (.devbin/gpu_s21b.tar.xz): the split merge loads a batch sized to the splits (8, 16, 32 or
     # 64) instead of 64 always (each load of a batch is an L2 request whether its split exists or not; verify 3x4
     # 32K's 22 splits loaded 64 partials per lane). Serving suite (EverySplitCountAgrees now crosses every batch
     # size), memcheck over the split tests; the packages of this tree (batch), main (.devbin/main_tree.tar, base) and
     # this tree without the merge launch (nomerge: the merge tail's upper bound, outputs wrong); the slice sweep
     # (short: planner's count and run 1's best) base, batch, nomerge, base again, and batch in full; ncu of every
     # kernel of the split rows on main's binary (gpu_s21a) and this one
     unpack gpu_s21a; OLD=$B; unpack gpu_s21b; NEW=$B
     (main_package; tree_package base .devbin/main_tree.tar
      variant_package nomerge src/cuda/portable/paged_merge.cu 's/if (items == 0) return;/if (items >= 0) return;/') \
       > $OUT/packages.log 2>&1 &
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'PagedCuda.EverySplitCountAgrees:DecodeCuda.EverySplitCountAgrees'
     wait; cat $OUT/packages.log
     sweep base .devbin/py/base 3 short; sweep batch .devbin/py/main 3 short; sweep nomerge .devbin/py/nomerge 3 short
     sweep base2 .devbin/py/base 3 short; sweep batch_full .devbin/py/main 3
     B1="--op paged --batch 1 --seqlen 131072 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
     V32="--op paged --batch 3 --seqlen 32768 --q-len 4 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
     B8="--op paged --batch 8 --seqlen 32768 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
     for b in old=$OLD new=$NEW; do for m in "" "--fp8 per-tensor"; do
       for r in "B1|$B1" "verify32K|$V32" "B8|$B8"; do kernels ${b#*=} "${b%%=*} ${r%%|*} $m" "${r#*|} $m"; done
     done; done > $OUT/kernels.log 2>&1
     (cd $OUT && tar -czf run2.tgz *.log && rm -f *.log) ;;
  3) # main 3788bdc (run 2's merge batches): the benchmark of record (serving rows, cuDNN / FA2 / FLA in the same
     # run); then a package whose split model sees 3 of the 4 resident CTAs per SM for per-tensor fp8 only (runs 1-2:
     # per tensor B1/131072, verify 32K, B8/32768 1-4% faster at ~3 per SM, verify 128K 0.7% slower; per token
     # and bf16 best at the full wave) against main's, the sweep's planner rows, alternating twice
     main_package; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     variant_package pt34 src/cuda/portable/serving.cpp 's/  q.slots = slots;/  q.slots = p.cache_dtype == DType::e4m3 \&\& p.k_scale_mode != CacheScale::per_token \&\& p.v_scale_mode != CacheScale::per_token ? slots * 3 \/ 4 : slots;/'
     sweep main .devbin/py/main 3 short; sweep pt34 .devbin/py/pt34 3 short
     sweep main2 .devbin/py/main 3 short; sweep pt34b .devbin/py/pt34 3 short
     (cd $OUT && tar -czf run3.tgz bench *.log && rm -rf bench *.log) ;;
  4) # main cc3e810 (.devbin/gpu_s21c.tar.xz: run 2's merge batches, run 3's per-tensor split model): default run,
     # the serving suite, memcheck over the split tests; this tree's package, pytest on the GPU, the benchmark (of
     # record); the sweep's planner rows at the planner's depth and at 4 stages (per-tensor split launches fill 3
     # CTAs per SM now, whose shared memory holds a fourth stage), alternating
     unpack gpu_s21c; NEW=$B
     main_job $NEW
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'PagedCuda.EverySplitCountAgrees:DecodeCuda.EverySplitCountAgrees:PagedCuda.HeuristicSplitsLongVerify'
     main_package; gpu_pytest; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     sweep plan .devbin/py/main 3 short
     FLASHGATE_SERVING_STAGES=4 sweep st4 .devbin/py/main 3 short
     sweep plan2 .devbin/py/main 3 short
     (cd $OUT && tar -czf run4.tgz bench *.log && rm -rf bench *.log) ;;
  5) # branch cluster-merge (.devbin/gpu_s21d.tar.xz): on sm_90 a row block's splits (<= 16) run as one thread-block
     # cluster and merge through each other's shared memory (no partials, no merge kernel). Serving suite (new:
     # PagedCuda.ClusterMergeAgreesWithMergeKernel), memcheck and racecheck over the cluster and split tests; packages
     # of this tree (cl) and main (.devbin/main_tree.tar, base); sweeps (short, now with bf16 B1/131072 at 16 slices)
     # base, cl, cl with FLASHGATE_SERVING_CLUSTER=0 (the merge kernel: what the kernel's new code costs the loop),
     # base again; the serving rows base / cl / base / cl (one-pass rows: no cluster, same loop); the benchmark with
     # this tree's package (peers in the same run)
     unpack gpu_s21d; NEW=$B
     (main_package; tree_package base .devbin/main_tree.tar) > $OUT/packages.log 2>&1 &
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'PagedCuda.ClusterMerge*:*EverySplitCountAgrees:PagedCuda.CudaGraphCaptureWithWorkspace'
     racecheck $NEW 'PagedCuda.ClusterMerge*'
     wait; cat $OUT/packages.log
     sweep base .devbin/py/base 3 short; sweep cl .devbin/py/main 3 short
     FLASHGATE_SERVING_CLUSTER=0 sweep cl_off .devbin/py/main 3 short; sweep base2 .devbin/py/base 3 short
     bench_variants "base=X=1" .devbin/py/base; bench_variants "cl=X=1"
     bench_variants "base2=X=1" .devbin/py/base; bench_variants "cl2=X=1"
     serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     (cd $OUT && tar -czf run5.tgz bench bench_* *.log && rm -rf bench bench_* *.log) ;;
  6) # main ceeb481: does the page order cost the paged bf16 one-pass rows (paged B128/1024 0.86-0.88x of copy, decode
     # on the same contiguous keys 0.89-0.91x)? page_order.py: the benchmark's shuffled block table, pages in order,
     # and decode over the contiguous copy, one process, 4 rounds
     main_package
     PYTHONPATH=.devbin/py/main timeout 200 python3 docs/benchmarks/page_order.py $OUT/page_order.tsv 4 > $OUT/page_order.log 2>&1
     echo "page order rc=$? at ${SECONDS}s"; cat $OUT/page_order.log
     (cd $OUT && tar -czf run6.tgz *.log && rm -f *.log) ;;
esac
echo "total ${SECONDS}s"
