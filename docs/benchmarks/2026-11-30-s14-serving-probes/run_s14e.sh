#!/bin/bash
# Session 14 run 5: DRAM bytes per launch back to back and after a clean flush (probe_s14e under ncu).
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
P=docs/benchmarks/2026-11-30-s14-serving-probes
SECONDS=0
timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target .devbin/py5/v0 -C build-dir=build-wheel/w0 \
     -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1
echo "pip rc=$? at ${SECONDS}s"
PYTHONPATH=.devbin/py5/v0 timeout 300 ncu --cache-control none --clock-control none --replay-mode application \
  --kernel-name regex:'paged_mma|sdpa|fmha|attn|cudnn|sm90' \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
  --csv python3 $P/probe_s14e.py > $OUT/ncu_e.csv 2> $OUT/ncu_e.err
echo "ncu rc=$? at $SECONDS s"
grep -v '^==PROF==' $OUT/ncu_e.csv | python3 -c "
import csv,sys
rows=list(csv.DictReader(l for l in sys.stdin if l.startswith('\"')))
for r in rows: print(r['ID'], r['Kernel Name'][:60], r['Metric Name'], r['Metric Unit'], r['Metric Value'])
" | head -80
tail -5 $OUT/ncu_e.err
