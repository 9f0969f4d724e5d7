#!/bin/bash
# Session 18 device runs: `run_s18.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Binaries built on the CPU machine for sm_90a (build-dev) come carried as .devbin/<name>.tar.xz (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 FLASHGATE_CPU_THREADS=16
SECONDS=0
. docs/benchmarks/serving_probe_steps.sh  # ROW64 / ROW128, unpack, ab_rows, the validation steps
FP8_ROWS=("fp8t_B64|$ROW64 --fp8 per-tensor" "fp8t_B8|${ROW64/--batch 64 --seqlen 4096/--batch 8 --seqlen 32768} --fp8 per-tensor"
  "fp8t_B128|$ROW128 --fp8 per-tensor" "fp8t_B1|${ROW64/--batch 64 --seqlen 4096/--batch 1 --seqlen 131072} --fp8 per-tensor"
  "fp8k_B64|$ROW64 --fp8 per-token" "fp8k_B128|$ROW128 --fp8 per-token"
  "fp8t_V128K|${ROW64/--batch 64 --seqlen 4096/--batch 3 --seqlen 131072 --q-len 4} --fp8 per-tensor"
  "fp8k_B1|${ROW64/--batch 64 --seqlen 4096/--batch 1 --seqlen 131072} --fp8 per-token")
case "$1" in
  1) # main 237c59f (.devbin/gpu_s18.tar.xz: flashgate, flashgate_gpu_tests) against branch exp-fp8-wv2 (.devbin/
     # gpu_s18a.tar.xz: flashgate_wv2, gpu_tests_wv2): fp8 D128 with two warps per 16 keys, each on 64 value dims
     # (32 accumulators, 96 registers), 5 CTAs per SM, 32-key stages. Serving suite on the branch; the fp8 rows
     # alternating; the branch's rows at forced depths 2 / 3 / 4 stages
     unpack gpu_s18; MAIN=$B; unpack gpu_s18a; NEW=$B
     ln -sf flashgate_wv2 $NEW/flashgate; ln -sf gpu_tests_wv2 $NEW/flashgate_gpu_tests
     serving_suite $NEW
     ab_rows "main=$MAIN wv2=$NEW" > $OUT/ab.log 2>&1; cat $OUT/ab.log
     for row in "${FP8_ROWS[@]:0:5}"; do for st in 2 3 4; do
       echo "${row%%|*} wv2 stages=$st $(FLASHGATE_SERVING_STAGES=$st $NEW/flashgate run ${row#*|} --iters 300 | grep -E '^time')"
     done; done > $OUT/stages.log 2>&1; cat $OUT/stages.log
     (cd $OUT && tar -czf run1.tgz *.log && rm -f *.log) ;;
  2) # branch next-max-q (.devbin/gpu_s18b.tar.xz): paged CTAs map row block n to sequence n with no search when the
     # caller bounds every sequence's query length by one block of tokens (FLASHGATE_EXP_MAX_Q, the bound, stands in
     # for the API argument). Checked runs (CPU reference) with the bound; then bound off / on alternating, 2 rounds
     unpack gpu_s18b; NEW=$B
     P="--op paged --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda"
     for c in "1|--batch 16 --seqlen 1000" "4|--batch 7 --seqlen 777 --q-len 4" "4|--batch 5 --seqlen 300 --q-len 3 --fp8 per-token" \
              "1|--batch 9 --seqlen 2000 --fp8 per-tensor --window 100"; do
       echo "check max_q=${c%%|*} ${c#*|}: $(FLASHGATE_EXP_MAX_Q=${c%%|*} $NEW/flashgate run $P ${c#*|} --iters 3 | grep -E 'rel|time' | tr '\n' ' ')"
     done
     ROWS2=("bf16_B128|1|$ROW128" "bf16_B1|1|${ROW64/--batch 64 --seqlen 4096/--batch 1 --seqlen 131072}"
       "fp8t_B128|1|$ROW128 --fp8 per-tensor" "bf16_V32K|4|${ROW64/--batch 64 --seqlen 4096/--batch 3 --seqlen 32768 --q-len 4}")
     for r in 1 2; do for row in "${ROWS2[@]}"; do
       IFS='|' read -r name mq args <<< "$row"
       echo "$r $name off $($NEW/flashgate run $args --iters 300 | grep -E '^time')"
       echo "$r $name on  $(FLASHGATE_EXP_MAX_Q=$mq $NEW/flashgate run $args --iters 300 | grep -E '^time')"
     done; done ;;
  3) # branch next-token-blocks (.devbin/gpu_s18c.tar.xz): packed queries numbered so that decode batches take one
     # row block per sequence with no gaps (first_token_block, paged_params.h), against main (gpu_s18). Serving suite
     # and memcheck over the paged tests on the branch; then the rows alternating, 2 rounds
     unpack gpu_s18; MAIN=$B; unpack gpu_s18c; NEW=$B
     serving_suite $NEW; memcheck $NEW 'PagedCuda.*'
     ROWS3=("bf16_B128|$ROW128" "bf16_B1|${ROW64/--batch 64 --seqlen 4096/--batch 1 --seqlen 131072}"
       "fp8t_B128|$ROW128 --fp8 per-tensor" "bf16_V32K|${ROW64/--batch 64 --seqlen 4096/--batch 3 --seqlen 32768 --q-len 4}")
     for r in 1 2; do for row in "${ROWS3[@]}"; do for b in main=$MAIN new=$NEW; do
       echo "$r ${row%%|*} ${b%%=*} $(${b#*=}/flashgate run ${row#*|} --iters 300 | grep -E '^time')"
     done; done; done
     (cd $OUT && tar -czf run3.tgz *.log && rm -f *.log) ;;
  4) # branch next-token-blocks with a temporary switch back to the former numbering (FLASHGATE_EXP_OLD_BLOCKS=1):
     # this tree's Python package; the benchmark's serving rows (graph replays, do_bench flush and back to back) with
     # the new numbering, the former one, the new one again
     main_package
     for v in new old new2; do
       [ $v = old ] && export FLASHGATE_EXP_OLD_BLOCKS=1 || unset FLASHGATE_EXP_OLD_BLOCKS
       FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 200 \
         python3 bench/run.py --out $OUT/bench_$v --fla .peers --rows ctx --only serving > $OUT/bench_$v.log 2>&1
       echo "bench $v rc=$? at ${SECONDS}s"
     done
     unset FLASHGATE_EXP_OLD_BLOCKS
     (cd $OUT && tar -czf run4.tgz bench_* && rm -rf bench_*) ;;
  5) # branch exp-s18 (.devbin/gpu_s18d.tar.xz; run-time switches for two experiments): FLASHGATE_EXP_MAX_Q=4 stands
     # for a caller's max_seqlen_q (every paged row of the benchmark has at most 4 queries per sequence: row block n is
     # sequence n, no search); FLASHGATE_EXP_P_SINGLE=1 drops the per-token P * scale lo mma (one f16 rounding, as per
     # tensor). The fp8 tests (bias metric included) with P_SINGLE; this tree's package; the serving rows as the
     # benchmark times them: base, MAX_Q, P_SINGLE, base again
     unpack gpu_s18d; NEW=$B
     FLASHGATE_EXP_P_SINGLE=1 timeout 200 $NEW/flashgate_gpu_tests --gtest_filter='PagedCuda.Fp8*' > $OUT/fp8_single.log 2>&1
     echo "fp8 tests, P single rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/fp8_single.log | tr '\n' ' ')"
     grep -E "EXP fp8 bias" $OUT/fp8_single.log | awk '{b=$4+0; if(b<0)b=-b; if(b>m[$5])m[$5]=b; n[$5]++} END{for(t in m) printf "  max |bias| %.3e over %d checks %s\n", m[t], n[t], t}' 
     timeout 200 $NEW/flashgate_gpu_tests --gtest_filter='PagedCuda.Fp8*' > $OUT/fp8_pair.log 2>&1
     echo "fp8 tests, hi + lo pair rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/fp8_pair.log | tr '\n' ' ')"
     grep -E "EXP fp8 bias" $OUT/fp8_pair.log | awk '{b=$4+0; if(b<0)b=-b; if(b>m[$5])m[$5]=b; n[$5]++} END{for(t in m) printf "  max |bias| %.3e over %d checks %s\n", m[t], n[t], t}' 
     main_package
     for v in base maxq psingle base2; do
       unset FLASHGATE_EXP_MAX_Q FLASHGATE_EXP_P_SINGLE
       [ $v = maxq ] && export FLASHGATE_EXP_MAX_Q=4; [ $v = psingle ] && export FLASHGATE_EXP_P_SINGLE=1
       FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 200 \
         python3 bench/run.py --out $OUT/bench_$v --fla .peers --rows ctx --only serving > $OUT/bench_$v.log 2>&1
       echo "bench $v rc=$? at ${SECONDS}s"
     done
     unset FLASHGATE_EXP_MAX_Q FLASHGATE_EXP_P_SINGLE
     (cd $OUT && tar -czf run5.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  6|7) # branch next-token-blocks: gapless row-block numbering and the optional max_seqlen_q; run 6 at 134644c
     # (.devbin/gpu_s18e.tar.xz; its fp8 per-token D128 spilled 80 B, see perf-notes), run 7 at 261c448 (gpu_s18f).
     # Default run, serving suite, memcheck over the paged tests that take the new paths, racecheck over two; this
     # tree's Python package, pytest on the GPU, the benchmark's serving rows (run 7: the benchmark of record)
     [ "$1" = 6 ] && unpack gpu_s18e || unpack gpu_s18f; NEW=$B
     main_job $NEW; serving_suite $NEW
     memcheck $NEW 'PagedCuda.MaxSeqlen*:PagedCuda.Fp8*:PagedCuda.ManySequences:PagedCuda.BadIndices*:PagedCuda.MixedPrefillDecodeVerify'
     racecheck $NEW 'PagedCuda.MaxSeqlenQBelowALengthStaysInBounds:PagedCuda.VerifyTailsInsidePages'
     main_package; gpu_pytest; serving_bench
     grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
     (cd $OUT && tar -czf run$1.tgz bench *.log && rm -rf bench *.log) ;;
  8) # branch next-table-early 00ed531 (.devbin/gpu_s18g.tar.xz; not merged) against main 67fe94f (.devbin/main_src.tar.gz, its
     # tree): one pass without a window loads its first block-table group beside the context length. Serving suite
     # and memcheck on the branch; both trees' packages; the serving rows: branch, main, branch
     unpack gpu_s18g; NEW=$B
     serving_suite $NEW
     memcheck $NEW 'PagedCuda.MaxSeqlen*:PagedCuda.Fp8*:PagedCuda.ManySequences:PagedCuda.BadIndices*:PagedCuda.WindowsAndSinks'
     main_package
     tar -xzf .devbin/main_src.tar.gz -C .devbin && (cd .devbin/main_src && CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 300 \
       python3 -m pip install -q --no-build-isolation --no-deps --target ../py/base -C build-dir=../../build-wheel/base \
       -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip_base.log 2>&1); echo "pip base rc=$? at ${SECONDS}s"
     for v in new base new2; do
       py=main rev=$(cat .devbin/rev 2>/dev/null); [ $v = base ] && py=base rev=67fe94f
       FLASHGATE_GIT_REV=$rev PYTHONPATH=.devbin/py/$py timeout 200 \
         python3 bench/run.py --out $OUT/bench_$v --fla .peers --rows ctx --only serving > $OUT/bench_$v.log 2>&1
       echo "bench $v rc=$? at ${SECONDS}s"
     done
     (cd $OUT && tar -czf run8.tgz bench_* *.log && rm -rf bench_* *.log) ;;
  *) echo "usage: run_s18.sh 1-8" >&2; exit 2 ;;
esac
echo "run $1 rc=$? took $SECONDS s"
