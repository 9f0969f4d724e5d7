#!/bin/bash
# Session 12 run 8: fixed cost per kernel (CTA start + tail) from kernel time against context length at a fixed
# partition (main's binary d9800c2; ncu durations).
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s12h.log) 2>&1
SECONDS=0
for f in .devbin/xz12c/main/*.xz; do d=.devbin/run/main; mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # env args
  r=$(env $1 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum .devbin/run/main/flashgate run $P $2 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$1 $2: $r"
}
for L in 32768 65536 131072 262144; do m FLASHGATE_NUM_SPLITS=33 "--op paged --batch 1 --seqlen $L"; done
for L in 32768 65536 131072 262144; do m FLASHGATE_NUM_SPLITS=66 "--op paged --batch 1 --seqlen $L --fp8 per-tensor"; done
for L in 512 1024 2048 4096; do m FLASHGATE_HEADS_PER_CTA=4 "--op decode --batch 128 --seqlen $L"; done
for L in 512 1024 2048 4096; do m FLASHGATE_HEADS_PER_CTA=4 "--op paged --batch 128 --seqlen $L"; done
for L in 512 1024 2048 4096; do m X=1 "--op paged --batch 128 --seqlen $L --fp8 per-tensor"; done
echo "took $SECONDS s"
