#!/bin/bash
# Session 17 device runs: `run_s17.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # ROW64 / ROW128, unpack, ab_rows, the validation steps
# sampled LABEL CMD...: CMD runs while nvidia-smi samples SM / memory clocks, power and clock-event reasons every 20 ms
sampled() {
  local label=$1; shift
  local f="clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active,temperature.gpu"
  nvidia-smi --query-gpu=$f --format=csv,noheader,nounits >/dev/null 2>&1 ||
    f="clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active,temperature.gpu"
  nvidia-smi --query-gpu=$f --format=csv,noheader,nounits -lms 20 > $OUT/smi_$label.csv & local smi=$!
  "$@" > $OUT/run_$label.log 2>&1
  kill $smi; wait $smi 2>/dev/null
  # the samples while the GPU was busy (SM clock above idle, power above 150 W): min / median / max of each column
  python3 - $OUT/smi_$label.csv "$label" "$(grep -E '^time' $OUT/run_$label.log)" <<'PY'
import sys
rows = [[x.strip() for x in l.split(",")] for l in open(sys.argv[1]) if l.strip()]
busy = [r for r in rows if len(r) >= 5 and float(r[2]) > 150]
def s(i):
    v = sorted(float(r[i]) for r in busy)
    return f"{v[0]:.0f} / {v[len(v)//2]:.0f} / {v[-1]:.0f}" if v else "-"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {s(0)} | {s(1)} | {s(2)} | {' '.join(sorted({r[3] for r in busy}))} | {s(4)} | {len(busy)} |")
PY
}
FP8_ROWS=("fp8t_B64|$ROW64 --fp8 per-tensor" "fp8t_B8|${ROW64/--batch 64 --seqlen 4096/--batch 8 --seqlen 32768} --fp8 per-tensor"
  "fp8t_B128|$ROW128 --fp8 per-tensor" "fp8t_B1|${ROW64/--batch 64 --seqlen 4096/--batch 1 --seqlen 131072} --fp8 per-tensor"
  "fp8k_B64|$ROW64 --fp8 per-token" "fp8k_B128|$ROW128 --fp8 per-token")
case "$1" in
  1) # main bd2fc3c (.devbin/gpu_s17.tar.xz: flashgate): clocks and power under each paged row, the copy ceiling;
     # then ncu (clocks, SOL, warp states, scheduler, source counters) on paged B64/4096 bf16 / fp8 per tensor / token
     unpack gpu_s17
     nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > $OUT/smi_q.txt 2>&1
     echo "| load | flashgate time | SM MHz min / median / max | mem MHz | W | reasons | deg C | samples |"
     echo "|---|---|---|---|---|---|---|---|"
     sampled copy python3 -c "
import torch, time
a = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); t = time.time(); n = 0
while time.time() - t < 2.0:
    for _ in range(20): b.copy_(a)
    torch.cuda.synchronize(); n += 20
print(f'time: {(time.time() - t) / n * 1e3:.4f} ms per 2 GiB copy ({2 * 2**30 * n / (time.time() - t) / 1e9:.0f} GB/s)')"
     sampled bf16_B64 $B/flashgate run $ROW64 --iters 6000
     sampled fp8t_B64 $B/flashgate run $ROW64 --fp8 per-tensor --iters 10000
     sampled fp8k_B64 $B/flashgate run $ROW64 --fp8 per-token --iters 9000
     sampled bf16_B128 $B/flashgate run $ROW128 --iters 10000
     sampled fp8t_B128 $B/flashgate run $ROW128 --fp8 per-tensor --iters 15000
     sampled fp8k_B128 $B/flashgate run $ROW128 --fp8 per-token --iters 14000
     echo "sampling done at ${SECONDS}s"
     M=sm__cycles_elapsed.avg.per_second,dram__cycles_elapsed.avg.per_second,lts__cycles_elapsed.avg.per_second,gpu__time_duration.sum,dram__bytes_read.sum.per_second,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
     for v in "bf16 " "fp8t --fp8 per-tensor" "fp8k --fp8 per-token"; do
       name=${v%% *}; args=${v#* }
       timeout 150 ncu --clock-control none --kernel-name regex:paged_mma --launch-skip 2 --launch-count 1 \
         --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
         --section LaunchStats --section Occupancy --metrics $M -o $OUT/ncu_$name \
         $B/flashgate run $ROW64 $args --iters 3 > $OUT/ncu_$name.log 2>&1
       echo "ncu $name rc=$? at ${SECONDS}s"
       ncu --import $OUT/ncu_$name.ncu-rep --page details > $OUT/ncu_${name}_details.txt 2>&1
       ncu --import $OUT/ncu_$name.ncu-rep --page source --csv --print-source sass > $OUT/ncu_${name}_source.csv 2>&1
       rm -f $OUT/ncu_$name.ncu-rep
     done ;;
  2) # branch next-fp8-kinds (.devbin/gpu_s17b.tar.xz: flashgate, flashgate_gpu_tests): per-tensor fp8 compiled without
     # the per-token machinery. Default run, serving suite, memcheck over the fp8 tests; then A/B against main's flashgate
     # (gpu_s17) on the fp8 rows, builds alternating, 2 rounds (CLI: eager launches, events around each, no flush);
     # then ncu's duration and executed instructions of both on fp8 per tensor B64/4096
     unpack gpu_s17; MAIN=$B; unpack gpu_s17b; NEW=$B
     main_job $NEW; serving_suite $NEW; memcheck $NEW 'PagedCuda.Fp8*:PagedCuda.EverySplitCountAgrees'
     ab_rows "main=$MAIN new=$NEW" > $OUT/ab.log 2>&1; cat $OUT/ab.log
     for b in main=$MAIN new=$NEW; do
       timeout 120 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 \
         --metrics gpu__time_duration.sum,smsp__inst_executed.sum ${b#*=}/flashgate run $ROW64 --fp8 per-tensor --iters 3 \
         2>&1 | grep -E "gpu__time|inst_executed" | sed "s/^/${b%%=*} /" >> $OUT/ncu_ab.log
     done; cat $OUT/ncu_ab.log ;;
  3) # branch next-fp8-kinds 7a648f3 (.devbin/gpu_s17c.tar.xz, with the mixed-mode test): default run, serving suite,
     # memcheck over the fp8 tests, racecheck over two; then this tree's Python package and the benchmark's serving rows
     unpack gpu_s17c; NEW=$B
     main_job $NEW; serving_suite $NEW
     memcheck $NEW 'PagedCuda.Fp8*:PagedCuda.MixedPrefillDecodeVerify:DecodeCuda.ManySequences'
     racecheck $NEW 'PagedCuda.Fp8ScaleModesAndPages:PagedCuda.Fp8MixedScaleModes'
     main_package; serving_bench
     grep -E "^\| (decode|paged|verify)" $OUT/bench/*.md 2>/dev/null | head -40
     (cd $OUT && tar -czf run3.tgz bench *.log && rm -rf bench *.log) ;;
  4) # main 9c2a138 (.devbin/gpu_s17d.tar.xz): default run; the Python package built there and pytest on the GPU; the
     # per-tensor fp8 rows at the planner's 2 stages against 3 (FLASHGATE_SERVING_STAGES; stages are 16 KB without
     # scale slots now); then the whole GPU suite
     unpack gpu_s17d; NEW=$B
     main_job $NEW; main_package; gpu_pytest
     for r in 1 2; do for row in "${FP8_ROWS[@]:0:4}"; do for st in 2 3; do
       echo "$r ${row%%|*} stages=$st $(FLASHGATE_SERVING_STAGES=$st $NEW/flashgate run ${row#*|} --iters 300 | grep -E '^time')"
     done; done; done > $OUT/stages.log 2>&1; cat $OUT/stages.log
     timeout 330 $NEW/flashgate_gpu_tests > $OUT/gpu_tests_all.log 2>&1
     echo "whole GPU suite rc=$? at ${SECONDS}s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/gpu_tests_all.log | tr '\n' ' ')"
     (cd $OUT && tar -czf run4.tgz *.log && rm -f *.log) ;;
  5) # branch next-fp8-tokens (.devbin/gpu_s17e.tar.xz): the per-token family reads both scales per token at compile
     # time, fp8 kernels assume a block table and no gate (flashgate, flashgate_gpu_tests); flashgate_va: the same with
     # the block table left a run-time test (fewer spills in per-tensor fp8 D128). Serving suite and memcheck on the
     # branch; ncu (duration, instructions) of main 9c2a138 (gpu_s17d), the branch and va on fp8 B64/4096; the fp8
     # rows once on each through the CLI
     unpack gpu_s17d; MAIN=$B; unpack gpu_s17e; NEW=$B
     serving_suite $NEW; memcheck $NEW 'PagedCuda.Fp8*'
     for b in main=$MAIN/flashgate new=$NEW/flashgate va=$NEW/flashgate_va; do for m in per-tensor per-token; do
       timeout 100 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 \
         --metrics gpu__time_duration.sum,smsp__inst_executed.sum ${b#*=} run $ROW64 --fp8 $m --iters 3 2>&1 \
         | grep -E "gpu__time|inst_executed" | awk -v n="${b%%=*} $m" '{print n, $1, $3}' | tr '\n' ' '; echo
     done; done > $OUT/ncu_ab.log; cat $OUT/ncu_ab.log
     for row in "${FP8_ROWS[@]}"; do for b in main=$MAIN/flashgate new=$NEW/flashgate va=$NEW/flashgate_va; do
       echo "${row%%|*} ${b%%=*} $(${b#*=} run ${row#*|} --iters 300 | grep -E '^time')"
     done; done > $OUT/ab.log 2>&1; cat $OUT/ab.log ;;
  6) # branch next-fp8-tokens 917aa19 (.devbin/gpu_s17f.tar.xz): serving suite, memcheck over the fp8 tests, racecheck
     # over two; then this tree's Python package and the benchmark's serving rows
     unpack gpu_s17f; NEW=$B
     serving_suite $NEW; memcheck $NEW 'PagedCuda.Fp8*'
     racecheck $NEW 'PagedCuda.Fp8MixedScaleModes:PagedCuda.Fp8PerTokenBiasLongContext'
     main_package; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     (cd $OUT && tar -czf run6.tgz bench *.log && rm -rf bench *.log) ;;
  7) # main (the kernels of 917aa19): the Python package built there and pytest on the GPU
     main_package; gpu_pytest ;;
  *) echo "usage: run_s17.sh 1..7" >&2; exit 2 ;;
esac
echo "run $1 rc=$? took $SECONDS s"
