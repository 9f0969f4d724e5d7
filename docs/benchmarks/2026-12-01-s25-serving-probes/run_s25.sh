#!/bin/bash
# Session 25 device runs: `run_s25.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored),
# .peers holds flash-linear-attention 0.6.0 (fla-core) and einops 0.8.2 unpacked from their wheels.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # unpack, the validation steps, the packages
# Reduced sanitizer matrices: every serving tile (16-bit and fp8, 16-row and 8-row, D64 / D128 / 576-512), the split
# path and its merge, kv heads in turn, bad indices, graph capture.
MEMCHECK='PagedCuda.EverySplitCountAgrees:DecodeCuda.EverySplitCountAgrees:PagedCuda.HeuristicSplitsLongVerify'
MEMCHECK="$MEMCHECK:*EightRowTileKeysAsM:PagedCuda.Fp8HeadDim64:PagedCuda.Fp8MixedScaleModes"
MEMCHECK="$MEMCHECK:*BadIndicesAreNeverDereferenced:*BadOffsetsAreNeverDereferenced:PagedCuda.CudaGraphCaptureWithWorkspace"
RACE_A='PagedCuda.Bf16Basic:PagedCuda.UnalignedQueryRows:DecodeCuda.Bf16AndF16:PagedCuda.VerifyTailsInsidePages'
RACE_A="$RACE_A:*PagedHeads.Bf16AndFp8/K128_V128_HQ8_H1:*PagedHeads.Bf16AndFp8/K64_V64_HQ4_H2"
RACE_B='*PagedHeads.Bf16AndFp8/K576_V512_HQ16_H1:PagedCuda.Fp8ScaleModesAndPages'
# race_within NAME FILTER [CAP]: racecheck over FILTER in the time left before the call's 600 s (less a margin), at
# most CAP seconds
race_within() {
  local left=$((575 - SECONDS))
  [ -z "$3" ] || [ $left -le $3 ] || left=$3
  [ $left -gt 20 ] || { echo "racecheck $1 not run: ${left}s left"; return; }
  timeout $left compute-sanitizer --tool racecheck --print-limit 20 $NEW/flashgate_gpu_tests --gtest_brief=1 \
    --gtest_filter="$2" > $OUT/racecheck_$1.log 2>&1
  echo "racecheck $1 rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|RACECHECK SUMMARY' $OUT/racecheck_$1.log | tr '\n' ' ')"
}
# exactd_packages: this tree's package (main) and the variant exactd (runs 3-4: exact D for the gated backward too,
# BackwardParams::exact_D), built side by side
exactd_packages() {
  package main . > $OUT/package_main.out 2>&1 &
  variant_package exactd src/cuda/portable/backward_launch.cpp \
    's/p.exact_D = p.K16 == 16;/p.exact_D = p.K16 == 16 || prob.has_gate;/' > $OUT/package_exactd.out 2>&1 &
  wait; cat $OUT/package_*.out
}
# dg_seeds PACKAGE SEEDS NAME CASES TIMEOUT: gate_dg_seeds.py with a package into $OUT/gate_dg_NAME_PACKAGE.{tsv,md}
dg_seeds() {
  PYTHONPATH=.devbin/py/$1 timeout $5 python3 docs/benchmarks/2026-12-01-s25-serving-probes/gate_dg_seeds.py $2 \
    $OUT/gate_dg_$3_$1.tsv $4 > $OUT/gate_dg_$3_$1.md 2>&1
  echo "dg $3 $1 rc=$? at ${SECONDS}s"; cat $OUT/gate_dg_$3_$1.md
}
case "$1" in
  1) # main (.devbin/gpu_s25a.tar.xz, the final kernels): the default run; the whole GPU suite, with this tree's
     # package building beside it (CPU only); pytest on the GPU; the benchmark of record and a second pass of its
     # serving rows (repeatability); memcheck and racecheck over the reduced matrices above
     unpack gpu_s25a; NEW=$B
     main_job $NEW
     main_package > $OUT/package.out 2>&1 &
     timeout 240 $NEW/flashgate_gpu_tests > $OUT/gpu_tests_all.log 2>&1
     echo "whole GPU suite rc=$? at ${SECONDS}s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/gpu_tests_all.log | tr '\n' ' ')"
     grep -E '^\[  FAILED|Failure' $OUT/gpu_tests_all.log | head -5
     wait; cat $OUT/package.out
     gpu_pytest; serving_bench; grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     bench_variants "again=X=1"; grep -A8 "x bf16 tokens/s" $OUT/bench_again/report.md
     (cd $OUT && tar -czf record.tgz bench bench_again bench.log bench_again.log pip_main.log package.out \
        && rm -rf bench bench_again bench.log bench_again.log pip_main.log package.out)
     memcheck $NEW "$MEMCHECK"
     race_within a "$RACE_A"; race_within b "$RACE_B" ;;
  2) # main with the per-token scale copies' fix (.devbin/gpu_s25b.tar.xz; run 1's racecheck b: the idle lanes of the
     # wide value tiles copied their neighbours' scale slots again). Only the per-token D256 / D512 / K576 kernels
     # changed (the D64 / D128 kernels' SASS is byte-identical to run 1's). Racecheck over run 1's set b and every
     # head-dim case; the serving suite; memcheck over the same cases; this tree's package (built beside the
     # racecheck), pytest on the GPU, and the gated backward's dg over seeds (gate_dg_seeds.py: run 1's one pytest
     # failure, test_fla_forgetting_attn f16 scale 1.0, dg 0.00558 > 0.005)
     unpack gpu_s25b; NEW=$B
     main_package > $OUT/package.out 2>&1 &
     race_within b "$RACE_B:*PagedHeads*" 150
     serving_suite $NEW; grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW '*PagedHeads*:PagedCuda.Fp8ScaleModesAndPages:PagedCuda.Fp8MixedScaleModes'
     wait; cat $OUT/package.out
     gpu_pytest; grep -E '^FAILED|Error' $OUT/pytest.log | head -5
     left=$((580 - SECONDS)); PYTHONPATH=.devbin/py/main timeout $left python3 \
       docs/benchmarks/2026-12-01-s25-serving-probes/gate_dg_seeds.py 300 $OUT/gate_dg_seeds.tsv > $OUT/gate_dg_seeds.md 2>&1
     echo "dg seeds rc=$? at ${SECONDS}s"; cat $OUT/gate_dg_seeds.md
     rm -f $OUT/package.out $OUT/pip_main.log ;;
  3) # the gated backward with exact D (variant exactd: BackwardParams::exact_D, the fp32 sum_j P dP from the
     # query-major pre-pass that K <= 16 takes, also when a gate is present) against main: the dg seed sweep on both
     # (same seeds, so the same inputs), pytest on the GPU with the variant, and the two gated training rows'
     # forward / backward time, flashgate alone, the packages alternating twice
     exactd_packages
     for v in main exactd; do dg_seeds $v 300 seeds tests 120; done
     PYTHONPATH=.devbin/py/exactd timeout 150 python3 -m pytest -q -ra tests/python > $OUT/pytest_exactd.log 2>&1
     echo "pytest exactd rc=$? at ${SECONDS}s: $(tail -1 $OUT/pytest_exactd.log)"
     for r in 1 2; do for v in main exactd; do
       PYTHONPATH=.devbin/py/$v timeout 150 python3 bench/run.py --out $OUT/bench_$v$r --rows gate --only training \
         --peers none > $OUT/bench_$v$r.log 2>&1
       echo "bench $v$r rc=$? at ${SECONDS}s"; grep -E "^\| .*gate" $OUT/bench_$v$r/report.md | head -4
     done; done
     (cd $OUT && tar -czf run3.tgz bench_* *.log *.out && rm -rf bench_* *.log *.out) ;;
  4) # the gated dg over seeds at larger sizes (gate_dg_seeds.py ... sizes), main against the exactd variant of run 3
     exactd_packages
     for v in main exactd; do dg_seeds $v 120 sizes sizes 200; done
     rm -f $OUT/*.out ;;
  5) # the review's form of the fix (.devbin/gpu_s25c.tar.xz: an idle lane returns from the stage loader before its
     # scale copy instead of testing twice; the D64 / D128 kernels' SASS byte-identical to run 2's, the wide per-token
     # ones 0-32 instructions shorter): racecheck over run 2's set, the serving suite, memcheck over the same cases
     unpack gpu_s25c; NEW=$B
     race_within b "$RACE_B:*PagedHeads*" 150
     serving_suite $NEW; grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
     memcheck $NEW '*PagedHeads*:PagedCuda.Fp8ScaleModesAndPages:PagedCuda.Fp8MixedScaleModes' ;;
esac
