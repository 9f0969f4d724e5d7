#!/bin/bash
# Session 22 device runs: `run_s22.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages
# sweep NAME PKG ROUNDS COUNTS [KINDS] [MORE]: ../sweep_slices.py with package PKG into $OUT/sweep_NAME.tsv
sweep() {
  PYTHONPATH=$2 timeout 400 python3 docs/benchmarks/sweep_slices.py $OUT/sweep_$1.tsv $3 "$4" --kinds ${5:-bf16,per-tensor,per-token} \
    $6 > $OUT/sweep_$1.log 2>&1
  echo "sweep $1 rc=$? at ${SECONDS}s"
}
case "$1" in
  1) # main 4d60160: the 16-bit split rows at the counts that one CTA per SM gives (branch bf16-one-per-sm: B1/131072
     # 16 slices, B8/32768 2, paged and decode) against the planner's (33, 4), one process, 4 rounds interleaved; the
     # verify rows' count (11) stays, timed as the reference
     main_package
     sweep bf16 .devbin/py/main 4 "B1 ctx 131072=16,33;B8 ctx 32768=2,4;decode B8 ctx 32768=2,4;verify 3 x 4 tokens, ctx 32768=11" bf16
     sweep pt .devbin/py/main 4 "B1 ctx 131072=44,49,66" per-token
     python3 docs/benchmarks/sweep_table.py $OUT/sweep_bf16.tsv > $OUT/sweep_table.md; python3 docs/benchmarks/sweep_table.py $OUT/sweep_pt.tsv >> $OUT/sweep_table.md 2>&1; cat $OUT/sweep_table.md ;;
  2) # main 5f5922a (.devbin/gpu_s22a.tar.xz: run 1's 16-bit split share): default run, the serving suite, memcheck over
     # the split tests; this tree's package, pytest on the GPU, the benchmark (of record)
     unpack gpu_s22a; NEW=$B
     main_job $NEW
     serving_validation $NEW
     package_and_record
     (cd $OUT && tar -czf run2.tgz bench *.log && rm -rf bench *.log) ;;
  3) # main (5f5922a's kernels and planner): do the split shares measured at D128 (16-bit 1 of 2 CTAs per SM,
     # per-tensor fp8 3 of 4) hold at D64 (16-bit: 3 CTAs per SM, so 1) and D256 (2, so 1)? B1/131072 and B8/32768
     # at the planner's count and forced ones around the old and new rules' choices, bf16 and per tensor
     main_package
     sweep d64 .devbin/py/main 3 "B1 ctx 131072=16,22,33,44,49,66;B8 ctx 32768=2,3,4,6,8" bf16,per-tensor --head-dim=64
     sweep d256 .devbin/py/main 3 "B1 ctx 131072=8,16,22,33;B8 ctx 32768=1,2,3,4" bf16,per-tensor --head-dim=256
     for f in d64 d256; do python3 docs/benchmarks/sweep_table.py $OUT/sweep_$f.tsv; done > $OUT/sweep_table.md 2>&1
     cat $OUT/sweep_table.md ;;
  4) # main f8ba120 (.devbin/gpu_s22b.tar.xz: the split CTAs per SM as a tile property, applied at the tile's own
     # dims): the serving suite, memcheck over the split tests; the planner's count against run 3's best forced ones at
     # D64 and D256 (bf16, per tensor) and at D128 (bf16 and per tensor B1/131072, B8/32768: as 5f5922a's)
     unpack gpu_s22b; NEW=$B
     serving_validation $NEW
     main_package
     sweep d64 .devbin/py/main 3 "B1 ctx 131072=33,49,66;B8 ctx 32768=4,6,8" bf16,per-tensor --head-dim=64
     sweep d256 .devbin/py/main 3 "B1 ctx 131072=33;B8 ctx 32768=2,4" bf16,per-tensor --head-dim=256
     sweep d128 .devbin/py/main 3 "B1 ctx 131072=16,33,49;B8 ctx 32768=2,6" bf16,per-tensor
     for f in d64 d256 d128; do python3 docs/benchmarks/sweep_table.py $OUT/sweep_$f.tsv; done > $OUT/sweep_table.md 2>&1
     cat $OUT/sweep_table.md
     (cd $OUT && tar -czf run4.tgz *.log && rm -f *.log) ;;
  5) # main f8ba120 (gpu_s22b): where the fp8 8-row tile's instructions go at B64/4096 (per tensor 1.78x flushed, 1%
     # short of 1.8x; per token): ncu source counters (executed instructions and stall samples per SASS line)
     unpack gpu_s22b; B=$B
     for v in "fp8t --fp8 per-tensor" "fp8k --fp8 per-token"; do
       name=${v%% *}; args=${v#* }
       timeout 200 ncu --clock-control none --kernel-name regex:paged_mma --launch-skip 2 --launch-count 1 \
         --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
         --section LaunchStats --section Occupancy --metrics smsp__inst_executed.sum,gpu__time_duration.sum \
         -o $OUT/ncu_$name $B/flashgate run $ROW64 $args --iters 3 > $OUT/ncu_$name.log 2>&1
       echo "ncu $name rc=$? at ${SECONDS}s"
       ncu --import $OUT/ncu_$name.ncu-rep --page details > $OUT/ncu_${name}_details.txt 2>&1
       ncu --import $OUT/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_${name}_source.csv 2>&1
       rm -f $OUT/ncu_$name.ncu-rep
     done
     grep -E "Duration|Executed Ipc A|Issued Warp|No Eligible|Active Warps Per|Eligible Warps" $OUT/ncu_*_details.txt ;;
  6) # main (f8ba120's package): the fp8 D128 8-row tile at 3 stages (FLASHGATE_SERVING_STAGES=3; the planner's 2 was
     # measured on the 16-row tile in sessions 16-17) against the planner's, the benchmark's serving rows alternating
     # twice (bf16 runs 3 stages either way: its rows are the control)
     main_package
     bench_variants "plan=X=1 st3=FLASHGATE_SERVING_STAGES=3 plan2=X=1 st3b=FLASHGATE_SERVING_STAGES=3"
     for v in plan st3 plan2 st3b; do echo "== $v"; grep -A8 "x bf16 tokens/s" $OUT/bench_$v/report.md; done
     (cd $OUT && tar -czf run6.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  7) # main (f8ba120's package): bf16 one-pass rows with 3 kv heads per CTA (B128/1024: 384 CTAs, 264 slots, so the
     # last 120 start where the first CTAs end, on the SMs that stream fastest; session 12: SMs stream at unequal
     # rates and a one-wave partition runs at its slowest SMs' pace) against the planner's 4 (256 CTAs, one wave),
     # alternating twice
     main_package
     bench_variants "plan=X=1 h3=FLASHGATE_HEADS_PER_CTA=3 plan2=X=1 h3b=FLASHGATE_HEADS_PER_CTA=3"
     for v in plan h3 plan2 h3b; do echo "== $v"; grep -E "^\| (decode|paged) \| bf16 \|.*\| flashgate \|" $OUT/bench_$v/report.md | awk -F'|' '{print $2,$4,$7,$8,$11}'; done
     (cd $OUT && tar -czf run7.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  8) # branch d64-eight-rows (.devbin/gpu_s22c.tar.xz): 16-bit D64 decode blocks of <= 8 rows take an 8-row keys-as-M
     # tile. Serving suite (the 8-row tests now run D64 too), memcheck over them; the D64 rows (decode and paged, bf16)
     # with this tree's package at its planner's choices, 8-row tile (r8) against FLASHGATE_SERVING_ROWS=16 (r16),
     # alternating twice in separate processes
     unpack gpu_s22c; NEW=$B
     serving_suite $NEW
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW 'DecodeCuda.EightRowTileKeysAsM'
     main_package
     D64="B64 ctx 4096=;B128 ctx 1024=;B8 ctx 32768=;B1 ctx 131072=;decode B64 ctx 4096=;decode B128 ctx 1024=;decode B8 ctx 32768="
     sweep r8 .devbin/py/main 3 "$D64" bf16 --head-dim=64
     FLASHGATE_SERVING_ROWS=16 sweep r16 .devbin/py/main 3 "$D64" bf16 --head-dim=64
     sweep r8b .devbin/py/main 3 "$D64" bf16 --head-dim=64
     FLASHGATE_SERVING_ROWS=16 sweep r16b .devbin/py/main 3 "$D64" bf16 --head-dim=64
     python3 docs/benchmarks/sweep_table.py $OUT/sweep_r16.tsv $OUT/sweep_r8.tsv $OUT/sweep_r16b.tsv $OUT/sweep_r8b.tsv \
       > $OUT/sweep_table.md 2>&1; cat $OUT/sweep_table.md
     (cd $OUT && tar -czf run8.tgz *.log && rm -f *.log) ;;
  9) # main: does the random page order cost the fp8 rows more than bf16's 1-3% (session 21 run 6)? ../page_order.py,
     # per tensor and per token, B128/1024, B1/131072, B64/4096: shuffled block table against pages in order, 3 rounds
     main_package
     PYTHONPATH=.devbin/py/main timeout 300 python3 docs/benchmarks/page_order.py $OUT/page_order.tsv 3 \
       --kinds per-tensor,per-token > $OUT/page_order.log 2>&1
     echo "page order rc=$? at ${SECONDS}s"; cat $OUT/page_order.log
     python3 - $OUT/page_order.tsv <<'PY'
import collections, csv, statistics, sys
t = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    t[(r["row"], r["kind"], r["variant"])].append((float(r["ms_flushed"]), float(r["ms_back_to_back"])))
for k, v in t.items():
    print(*k, f"{statistics.median(a for a, _ in v) * 1e3:.1f} / {statistics.median(b for _, b in v) * 1e3:.1f} us", sep=" | ")
PY
     (cd $OUT && tar -czf run9.tgz *.log && rm -f *.log) ;;
esac
echo "total ${SECONDS}s"
