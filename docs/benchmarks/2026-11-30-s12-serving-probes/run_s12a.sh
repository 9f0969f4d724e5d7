#!/bin/bash
# Session 12 run 1: read floors in the benchmark harness, cuDNN decode kernels under ncu, ours beside them.
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s12a.log) 2>&1
SECONDS=0
python3 .devbin/probe_s12a.py; echo "probe rc=$? ${SECONDS}s"
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__shared_mem_per_block_static,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_active.avg
timeout 200 ncu --clock-control none --nvtx --nvtx-include "cudnn128/" --nvtx-include "cudnn1/" --nvtx-include "cudnn8/" --metrics $M python3 .devbin/probe_s12a.py cudnn > $OUT/ncu_cudnn.log 2>&1; echo "ncu cudnn rc=$? ${SECONDS}s"
grep -E "^  [a-zA-Z_].*\(|gpu__time|grid_size|block_size|registers_per|shared_mem_per|occupancy_limit|dram__|warps_active|inst_executed|cycles_active" $OUT/ncu_cudnn.log | grep -v -E "reduce_kernel|elementwise|distribution|copy|gemm|sm90_xmma|cutlass|nvjet|Memcpy|fill" | tail -150
echo "took $SECONDS s"
for f in .devbin/xz8/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 2"
for a in "--op decode --batch 128 --seqlen 1024" "--op paged --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor"; do
  echo "######## ours $a"
  timeout 40 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 1 --metrics $M .devbin/run/new/flashgate run $P $a 2>&1 | grep -E "gpu__time|grid_size|block_size|registers_per|shared_mem_per|occupancy_limit|dram__|warps_active|inst_executed|cycles_active"
done
echo "took $SECONDS s"
