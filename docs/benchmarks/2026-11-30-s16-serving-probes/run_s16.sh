#!/bin/bash
# Session 16 device runs: `run_s16.sh N` runs run N from the repository root on the H200 and writes its logs under
# $OUT. Builds Python packages from carried trees into .devbin/py/<name> (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
S14=docs/benchmarks/2026-11-30-s14-serving-probes
P=docs/benchmarks/2026-11-30-s16-serving-probes
SECONDS=0
# variants PREFIX SOURCE "NAME FLAGS" ...: one package of SOURCE per NAME, built in parallel with CMAKE_CUDA_FLAGS=FLAGS
# (compile-time macros of a diagnostic branch) into .devbin/py/PREFIX_NAME
variants() {
  local prefix=$1 src=$2 pids="" v
  shift 2
  for v in "$@"; do
    local name=${v%% *} flags=${v#* }
    rm -rf .devbin/py/${prefix}_$name  # pip --target keeps an existing package folder
    (CMAKE_BUILD_PARALLEL_LEVEL=5 timeout 300 python3 -m pip install -q --no-build-isolation --no-deps \
       --target .devbin/py/${prefix}_$name -C build-dir=build-wheel/${prefix}_$name \
       -C cmake.define.FLASHGATE_CUDA_TARGETS=90a -C "cmake.define.CMAKE_CUDA_FLAGS=$flags" $src \
       > $OUT/pip_${prefix}_$name.log 2>&1; echo "pip ${prefix}_$name rc=$? at ${SECONDS}s") & pids="$pids $!"
  done
  wait $pids
}
# main_package: this tree's package into .devbin/py/main
main_package() {
  rm -rf .devbin/py/main
  CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 200 python3 -m pip install -q --no-build-isolation --no-deps \
    --target .devbin/py/main -C build-dir=build-wheel/main -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . \
    > $OUT/pip_main.log 2>&1
  echo "pip main rc=$? at ${SECONDS}s"
}
FP8_ROWS="fp8 per-tensor B8 ;fp8 per-tensor B64 ;fp8 per-tensor B128 ;fp8 per-tensor B1 ;fp8 per-token B64 ;fp8 per-token B128 "
case "$1" in
  1) # branch exp-fp8-nocvt (unpacked in .devbin/nocvt_src: git archive exp-fp8-nocvt | tar -x -C .devbin/nocvt_src):
     # fp8 conversions as on main (i), keys not converted (nk), neither keys nor values converted (n); timing only
     variants cvt .devbin/nocvt_src "i -DFLASHGATE_FP8_CVT_K=0 -DFLASHGATE_FP8_CVT_V=0" \
       "nk -DFLASHGATE_FP8_CVT_K=2 -DFLASHGATE_FP8_CVT_V=0" "n -DFLASHGATE_FP8_CVT_K=2 -DFLASHGATE_FP8_CVT_V=2"
     PROBE_ROUNDS=2 PROBE_ROWS="$FP8_ROWS" timeout 300 python3 $S14/probe_s14a.py instr=.devbin/py/cvt_i \
       none_k=.devbin/py/cvt_nk none=.devbin/py/cvt_n > $OUT/probe_nocvt.log 2>&1 ;;
  2) # branch exp-fp8-nocvt again (its FLASHGATE_DIAG_Q1 commit): main's code (i), the query fragment read once per
     # stage instead of per k-step (q1: 7 fewer LDS.128 per warp and stage), and q1 without conversions (q1n)
     variants d .devbin/nocvt_src "i -DFLASHGATE_DIAG_Q1=0" "q1 -DFLASHGATE_DIAG_Q1=1" \
       "q1n -DFLASHGATE_FP8_CVT_K=2 -DFLASHGATE_FP8_CVT_V=2 -DFLASHGATE_DIAG_Q1=1"
     PROBE_ROUNDS=2 PROBE_ROWS="$FP8_ROWS" timeout 300 python3 $S14/probe_s14a.py instr=.devbin/py/d_i \
       q1=.devbin/py/d_q1 q1_none=.devbin/py/d_q1n > $OUT/probe_q1.log 2>&1 ;;
  3) # the benchmark's serving rows on main (git eb87c9a: kernels of d9800c2, the bench with its back-to-back timing)
     main_package
     FLASHGATE_GIT_REV=eb87c9a PYTHONPATH=.devbin/py/main timeout 400 \
       python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1 ;;
  4) # branch exp-own-prefetch (unpacked in .devbin/pf_src): each warp prefetches its own rows of tile + D into L2
     # with prefetch.global.L2 when it loads tile (D = 0: main's code)
     variants pf .devbin/pf_src "d0 -DFLASHGATE_L2_PREFETCH=0" "d1 -DFLASHGATE_L2_PREFETCH=1" \
       "d2 -DFLASHGATE_L2_PREFETCH=2" "d4 -DFLASHGATE_L2_PREFETCH=4"
     PROBE_ROUNDS=2 PROBE_ROWS="fp8 per-tensor B;fp8 per-token B64 ;fp8 per-token B128 ;paged bf16 B;decode bf16 B128 " \
       timeout 420 python3 $S14/probe_s14a.py d0=.devbin/py/pf_d0 d1=.devbin/py/pf_d1 d2=.devbin/py/pf_d2 \
       d4=.devbin/py/pf_d4 > $OUT/probe_prefetch.log 2>&1 ;;
  5) # main: the fp8 kernel's ring at 2, 3 (planner) and 4 stages (FLASHGATE_SERVING_STAGES)
     main_package
     PYTHONPATH=.devbin/py/main timeout 400 python3 $P/probe_s16_stages.py > $OUT/probe_stages.log 2>&1 ;;
  6) # main: every paged fp8 row and the bf16 rows at the planner's depth and at 2 stages
     main_package
     PYTHONPATH=.devbin/py/main timeout 500 python3 $P/probe_s16_stages.py all > $OUT/probe_stages_all.log 2>&1 ;;
  7) # main with fp8 D128's planner at 2 stages (shallow ring): binaries built on the CPU machine for sm_90a
     # (build-dev: flashgate, flashgate_gpu_tests), carried as .devbin/gpu_s16.tar.xz; the default run, the serving
     # suite, memcheck over 6 and racecheck over 2 tests, the decode rows' probe alone, then the benchmark
     mkdir -p .devbin/gpu && tar -xJf .devbin/gpu_s16.tar.xz -C .devbin/gpu && B=.devbin/gpu/gpu_s16
     export FLASHGATE_CPU_THREADS=16
     $B/flashgate run > $OUT/main_job.log 2>&1; echo "main job rc=$? $(tail -1 $OUT/main_job.log)"
     timeout 240 $B/flashgate_gpu_tests --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1
     echo "serving rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED' $OUT/gpu_tests.log | head -3 | tr '\n' ' ')"
     MEMCHECK='PagedCuda.Fp8ScaleModesAndPages:PagedCuda.Fp8PerTokenBiasLongContext:PagedCuda.Fp8PerTokenBiasWideSpread:PagedCuda.MixedPrefillDecodeVerify:DecodeCuda.ManySequences:PagedCuda.EverySplitCountAgrees'
     timeout 240 compute-sanitizer --tool memcheck --print-limit 5 $B/flashgate_gpu_tests --gtest_filter="$MEMCHECK" \
       --gtest_brief=1 > $OUT/memcheck.log 2>&1
     echo "memcheck rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|ERROR SUMMARY' $OUT/memcheck.log | tr '\n' ' ')"
     timeout 200 compute-sanitizer --tool racecheck --print-limit 20 $B/flashgate_gpu_tests \
       --gtest_filter='PagedCuda.Bf16Basic:PagedCuda.Fp8ScaleModesAndPages' --gtest_brief=1 > $OUT/racecheck.log 2>&1
     echo "racecheck rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|RACECHECK SUMMARY' $OUT/racecheck.log | tr '\n' ' ')"
     main_package
     PYTHONPATH=.devbin/py/main timeout 120 python3 $P/probe_s16_stages.py decode > $OUT/probe_decode.log 2>&1
     FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 300 \
       python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1 ;;
  8) # main after the capture fix (bench/measure.py's GraphReplay holds the captured callable): the decode rows again
     main_package
     PYTHONPATH=.devbin/py/main timeout 120 python3 $P/probe_s16_stages.py decode > $OUT/probe_decode.log 2>&1 ;;
  9) # branch next-scale16 (this tree): its binaries (.devbin/gpu_s16b.tar.xz, built on the CPU machine for sm_90a) on
     # the serving suite and memcheck over the fp8 tests; then its package against main's (unpacked in
     # .devbin/main_src: git archive main | tar -x -C .devbin/main_src) on the fp8 rows
     mkdir -p .devbin/gpu && tar -xJf .devbin/gpu_s16b.tar.xz -C .devbin/gpu && B=.devbin/gpu/gpu_s16b
     export FLASHGATE_CPU_THREADS=16
     timeout 240 $B/flashgate_gpu_tests --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1
     echo "serving rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED' $OUT/gpu_tests.log | head -3 | tr '\n' ' ')"
     timeout 240 compute-sanitizer --tool memcheck --print-limit 5 $B/flashgate_gpu_tests --gtest_brief=1 \
       --gtest_filter='PagedCuda.Fp8*:PagedCuda.HeadMajorCacheThroughStrides:PagedCuda.WindowsAndSinks' > $OUT/memcheck.log 2>&1
     echo "memcheck rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|ERROR SUMMARY' $OUT/memcheck.log | tr '\n' ' ')"
     variants s .devbin/main_src "main -DFLASHGATE_NONE=0" &
     variants s . "scale16 -DFLASHGATE_NONE=0" &
     wait
     PROBE_ROUNDS=2 PROBE_ROWS="fp8 per-token B;fp8 per-tensor B64 ;fp8 per-tensor B128 " timeout 300 \
       python3 $S14/probe_s14a.py main=.devbin/py/s_main scale16=.devbin/py/s_scale16 > $OUT/probe_scale16.log 2>&1 ;;
  10) # main: the wider fp8 tiles (K = V = 256; K576 / V512) at the planner's depth and forced 2, 3, 4 stages
     main_package
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s16_wide.py > $OUT/probe_wide.log 2>&1 ;;
  11) # main (final): the Python package built there and its tests on the GPU (torch, the fp8 paged ops included)
     main_package
     PYTHONPATH=.devbin/py/main FLASHGATE_CPU_THREADS=16 timeout 400 python3 -m pytest -q -ra tests/python \
       > $OUT/pytest.log 2>&1
     echo "pytest rc=$?: $(tail -1 $OUT/pytest.log)" ;;
  *) echo "usage: run_s16.sh 1..11" >&2; exit 2 ;;
esac
echo "run $1 rc=$? took $SECONDS s"
