#!/bin/bash
# Session 15 device runs: `run_s15.sh N` runs run N (1-11, or `check`) from the repository root on the H200 and
# writes its logs under $OUT. Builds the Python package from the carried tree into .devbin/py/<name> (git-ignored).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
P=docs/benchmarks/2026-11-30-s15-serving-probes
SECONDS=0
build() {  # build NAME [SOURCE]: the package of SOURCE (default: this tree) into .devbin/py/NAME
  rm -rf .devbin/py/$1  # pip --target keeps an existing package folder (a stale build from an earlier call)
  timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py/$1 \
    -C build-dir=build-wheel/$1 -C cmake.define.FLASHGATE_CUDA_TARGETS=90a ${2:-.} > $OUT/pip_$1.log 2>&1
  echo "pip $1 rc=$? at ${SECONDS}s"
}
case "$1" in
  1) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_state.py > $OUT/probe_state.log 2>&1 ;;
  2) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_pattern.py > $OUT/probe_pattern.log 2>&1 ;;
  3) build clock .devbin/clock_src  # branch exp-clock, unpacked first: git archive exp-clock | tar -x -C .devbin/clock_src
     mkdir -p $OUT/clock
     (nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active \
        --format=csv -lms 100 > $OUT/smi.csv 2>&1) & smi=$!
     PYTHONPATH=.devbin/py/clock timeout 200 python3 $P/probe_s15_clock.py $OUT/clock > $OUT/probe_clock.log 2>&1
     kill $smi; rm -f $OUT/clock/*.bin ;;
  4) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_before.py > $OUT/probe_before.log 2>&1 ;;
  5) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_reduce.py > $OUT/probe_reduce.log 2>&1 ;;
  6) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_model.py > $OUT/probe_model.log 2>&1 ;;
  7) build main
     PROBE_CLEAN=triton PYTHONPATH=.devbin/py/main timeout 400 \
       python3 docs/benchmarks/2026-11-30-s14-serving-probes/probe_s14b.py > $OUT/probe_flush.log 2>&1 ;;
  8) build main
     mkdir -p .devbin/params
     "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -O2 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -o .devbin/params/libparams.so \
       $P/params_kernels.cu
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_params.py .devbin/params/libparams.so \
       > $OUT/probe_params.log 2>&1 ;;
  9) # branch exp-split-tail: its GPU test binary (built here for sm_90a, carried as .devbin/tail_tests.tar.xz)
     # with small trailing splits forced on every split launch, then its package and the timing probe
     mkdir -p .devbin/tail_tests && tar -xJf .devbin/tail_tests.tar.xz -C .devbin/tail_tests
     FLASHGATE_SPLIT_TAIL=3 FLASHGATE_TAIL_WEIGHT=200 FLASHGATE_CPU_THREADS=16 timeout 200 \
       .devbin/tail_tests/flashgate_gpu_tests --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests_tail.log 2>&1
     echo "tests rc=$? at ${SECONDS}s"
     build tail .devbin/tail_src  # git archive exp-split-tail | tar -x -C .devbin/tail_src
     PYTHONPATH=.devbin/py/tail timeout 300 python3 $P/probe_s15_tail.py > $OUT/probe_tail.log 2>&1 ;;
  10) build main
     PYTHONPATH=.devbin/py/main timeout 300 python3 $P/probe_s15_knobs.py > $OUT/probe_knobs.log 2>&1 ;;
  11) # branch exp-fp8-alu-cvt (unpacked in .devbin/cvt_src): fp8 conversions by instruction, by the ALU bit trick
      # for keys and values, or for values only; fp8 rows timed as the benchmark times them (probe_s14a)
     export CMAKE_BUILD_PARALLEL_LEVEL=5; pids=""
     for v in "i 0 0" "a 1 1" "v 0 1"; do
       set -- $v; rm -rf .devbin/py/cvt_$1
       (timeout 300 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py/cvt_$1 \
          -C build-dir=build-wheel/cvt_$1 -C cmake.define.FLASHGATE_CUDA_TARGETS=90a \
          -C "cmake.define.CMAKE_CUDA_FLAGS=-DFLASHGATE_FP8_CVT_K=$2 -DFLASHGATE_FP8_CVT_V=$3" .devbin/cvt_src \
          > $OUT/pip_cvt_$1.log 2>&1; echo "pip cvt_$1 rc=$? at ${SECONDS}s") & pids="$pids $!"
     done
     wait $pids
     PROBE_ROUNDS=2 PROBE_ROWS="fp8 per-tensor B8 ;fp8 per-tensor B128 ;fp8 per-tensor B1 ;fp8 per-token B128 " \
       timeout 300 python3 docs/benchmarks/2026-11-30-s14-serving-probes/probe_s14a.py instr=.devbin/py/cvt_i \
       alu=.devbin/py/cvt_a alu_v=.devbin/py/cvt_v > $OUT/probe_cvt.log 2>&1 ;;
  check) # the refactored runs 4 and 5 once more (verify_refactor.log)
     build main
     (PYTHONPATH=.devbin/py/main timeout 120 python3 $P/probe_s15_before.py
      PYTHONPATH=.devbin/py/main timeout 120 python3 $P/probe_s15_reduce.py) > $OUT/verify_refactor.log 2>&1 ;;
  *) echo "usage: run_s15.sh 1..11|check" >&2; exit 2 ;;
esac
echo "run $1 rc=$? took $SECONDS s"
