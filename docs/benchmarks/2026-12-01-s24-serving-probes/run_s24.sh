#!/bin/bash
# Session 24 device runs: `run_s24.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Trees come carried as .devbin/<name>.tar.xz (git archive; git-ignored), their packages built there.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages
# fp8_tables NAME...: the fp8 / bf16 table of each variant's report
fp8_tables() { local v; for v in "$@"; do echo "== $v"; grep -A8 "x bf16 tokens/s" $OUT/bench_$v/report.md; done; }
case "$1" in
  1) # main against two experiments (branches exp-l2-pair, exp-l2-pair-scales): the 16-byte copies of 128-byte rows
     # (fp8 D128; bf16 D64, not in these rows) prefetch the 256-byte pair of lines into L2, whose other half is the
     # next kv head's row, read by the next CTA in dispatch order; the second also on the per-token scale copies. The
     # serving rows, the three packages alternating twice
     package main .; tree_package pair .devbin/exp_l2_pair.tar.xz; tree_package pairs .devbin/exp_l2_pair_scales.tar.xz
     for r in 1 2; do for v in main pair pairs; do bench_variants "$v$r=X=1" .devbin/py/$v; done; done
     fp8_tables main1 pair1 pairs1 main2 pair2 pairs2
     (cd $OUT && tar -czf run1.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  2) # main: bf16 split rows with the CTAs one per SM exactly. The planner gives bf16 D128 B1/131072 16 slices x 8 kv
     # heads = 128 CTAs on 132 SMs (the 16-bit 8-row tile streams an SM's share from one CTA); with kv heads in turn
     # (FLASHGATE_HEADS_PER_CTA) 33 slices x 4 head pairs = 132; the verify rows (16-row tile, 3 row blocks) likewise
     # at 11 x 4 pairs, 22 x 2 quads, 44 x 1 octet. Counts NhH in one process, 4 rounds
     package main .
     SPEC="B1 ctx 131072=16,33,33h2,66h2,66h4;verify 3 x 4 tokens, ctx 32768=11,11h2,22h2,22h4,44h8"
     SPEC="$SPEC;verify 3 x 4 tokens, ctx 131072=11,11h2,22h2,22h4,44h8"
     PYTHONPATH=.devbin/py/main timeout 300 python3 docs/benchmarks/sweep_slices.py $OUT/sweep_heads.tsv 4 "$SPEC" \
       --kinds bf16 > $OUT/sweep_heads.log 2>&1
     echo "sweep rc=$? at ${SECONDS}s"; python3 docs/benchmarks/sweep_table.py $OUT/sweep_heads.tsv ;;
  3) # branch finish-head (.devbin/gpu_s24a.tar.xz): the kernel's per-head merge and write moved to paged_finish.cuh
     # (same instruction counts, a few reordered). The default run, the serving suite, memcheck over the split and
     # 8-row tests, racecheck over the 8-row tests; main's package (7150796) against this tree's, the serving rows
     # alternating twice; pytest on the GPU with this tree's package
     unpack gpu_s24a; NEW=$B
     main_job $NEW
     serving_validation $NEW \
       'PagedCuda.EverySplitCountAgrees:DecodeCuda.EverySplitCountAgrees:*EightRowTileKeysAsM:PagedCuda.Fp8HeadDim64'
     racecheck $NEW '*EightRowTileKeysAsM:PagedCuda.Fp8HeadDim64'
     tree_package base .devbin/main_7150796.tar.xz; main_package
     for r in 1 2; do bench_variants "base$r=X=1" .devbin/py/base; bench_variants "head$r=X=1" .devbin/py/main; done
     fp8_tables base1 head1 base2 head2
     gpu_pytest
     (cd $OUT && tar -czf run3.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  4) # branch finish-head as of gpu_s24b (finish_head finds its thread's place itself; same SASS as run 3's): racecheck over
     # a 16-bit test whose CTAs take kv heads in turn (the next head's loads run beside the finish's merge slots);
     # main's package (7150796) against this tree's, the serving rows alternating three times (run 3 had paged bf16
     # B8/32768 at 0.265 against 0.262 ms in both rounds)
     unpack gpu_s24b; NEW=$B
     racecheck $NEW 'PagedCuda.UnalignedQueryRows'
     tree_package base .devbin/main_7150796.tar.xz; main_package
     for r in 1 2 3; do bench_variants "base$r=X=1" .devbin/py/base; bench_variants "head$r=X=1" .devbin/py/main; done
     for f in $OUT/bench_*/report.md; do echo "== $f"; grep -E "^\| paged \| bf16 \|.*\| flashgate \|" $f | cut -d'|' -f4,6,7; done
     (cd $OUT && tar -czf run4.tgz bench_* *.log && rm -rf bench_* *.log) ;;
esac
