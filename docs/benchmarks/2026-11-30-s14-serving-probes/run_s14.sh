#!/bin/bash
# Session 14 device runs, one script: `run_s14.sh N` runs run N (1-10) from the repository root on the H200 and
# writes its logs under $OUT. (In the session each run was a copy of its branch below in .devbin/, git-ignored.)
# Builds: the Python package from the carried tree into .devbin/py/vH, with FLASHGATE_PAGED_L2_PREFETCH=H on
# branch exp-l2prefetch (H = 0 builds main's code; the define exists only on that branch). Run 8 builds branch
# exp-timeline's tree, unpacked here first with `git archive exp-timeline | tar -x -C .devbin/tl_src` and carried.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
P=docs/benchmarks/2026-11-30-s14-serving-probes
SECONDS=0

build() {  # build HINT...: one package per hint value, in parallel, each in its own build folder
  local pids=""
  for v in "$@"; do
    (timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py/v$v \
       -C build-dir=build-wheel/w$v -C cmake.define.FLASHGATE_CUDA_TARGETS=90a \
       -C cmake.define.FLASHGATE_PAGED_L2_PREFETCH=$v . > $OUT/pip_v$v.log 2>&1
     echo "pip v$v rc=$? at ${SECONDS}s") &
    pids="$pids $!"
  done
  wait $pids  # not a bare `wait`: it would also wait for any process substitution of the caller
}

case "$1" in
  1) export CMAKE_BUILD_PARALLEL_LEVEL=6; build 0 128 256
     PROBE_ROUNDS=2 timeout 330 python3 $P/probe_s14a.py none=.devbin/py/v0 l2_128=.devbin/py/v128 \
       l2_256=.devbin/py/v256 > $OUT/probe.log 2>&1 ;;
  2) export CMAKE_BUILD_PARALLEL_LEVEL=8; build 0 128
     PYTHONPATH=.devbin/py/v0 timeout 240 python3 $P/probe_s14b.py > $OUT/probe_b.log 2>&1
     PROBE_ROUNDS=2 PROBE_ROWS=bf16 timeout 150 python3 $P/probe_s14a.py none=.devbin/py/v0 \
       l2_128=.devbin/py/v128 > $OUT/probe_a.log 2>&1 ;;
  3|4|6) export CMAKE_BUILD_PARALLEL_LEVEL=16; build 0
     warm=([3]="meta;code;meta+code" [4]="pages;pages+meta" [6]="grid")
     PROBE_WARM="${warm[$1]}" PYTHONPATH=.devbin/py/v0 timeout 300 python3 $P/probe_s14_start.py \
       > $OUT/probe_start.log 2>&1 ;;
  5) export CMAKE_BUILD_PARALLEL_LEVEL=16; build 0
     PYTHONPATH=.devbin/py/v0 timeout 300 ncu --cache-control none --clock-control none --replay-mode application \
       --kernel-name regex:'paged_mma|sdpa|fmha|attn|cudnn|sm90' \
       --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
       --csv python3 $P/probe_s14e.py > $OUT/ncu_e.csv 2> $OUT/ncu_e.err ;;
  7) export CMAKE_BUILD_PARALLEL_LEVEL=16
     python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . \
       > $OUT/pip.log 2>&1
     timeout 200 python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1
     PROBE_WARM="grid" timeout 120 python3 $P/probe_s14_start.py > $OUT/probe_start.log 2>&1 ;;
  8) export CMAKE_BUILD_PARALLEL_LEVEL=16
     timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py/tl -C build-dir=build-wheel/tl \
       -C cmake.define.FLASHGATE_CUDA_TARGETS=90a .devbin/tl_src > $OUT/pip.log 2>&1
     mkdir -p $OUT/tl
     PYTHONPATH=.devbin/py/tl timeout 120 python3 $P/probe_s14_timeline.py $OUT/tl > $OUT/probe_tl.log 2>&1
     for f in $OUT/tl/*.bin; do python3 docs/benchmarks/2026-11-30-s12-serving-probes/timeline.py $f | head -8; done \
       > $OUT/tl_summary.txt ;;
  9|10) export CMAKE_BUILD_PARALLEL_LEVEL=16; build 0
     strided=([9]="" [10]=1)
     PROBE_STRIDED="${strided[$1]}" PYTHONPATH=.devbin/py/v0 timeout 150 python3 $P/probe_s14_between.py \
       > $OUT/probe_between.log 2>&1 ;;
  *) echo "usage: run_s14.sh 1..10" >&2; exit 2 ;;
esac
echo "run $1 rc=$? took $SECONDS s"
