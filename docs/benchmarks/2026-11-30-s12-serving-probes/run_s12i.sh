#!/bin/bash
# Session 12 run 9: the fixed cost's dependence on the partition (heads per CTA, at once, splits).
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s12i.log) 2>&1
SECONDS=0
for f in .devbin/xz12c/main/*.xz .devbin/xz12/new/flashgate.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 2"
m() {  # bin env args
  r=$(env $2 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 2 --metrics gpu__time_duration.sum .devbin/run/$1/flashgate run $P $3 2>&1 | grep -E "gpu__time_duration" | awk '{print $NF}' | paste -sd' ')
  echo "$1 $2 $3: $r"
}
for h in 1 2 8; do for L in 512 2048; do m main FLASHGATE_HEADS_PER_CTA=$h "--op decode --batch 128 --seqlen $L"; done; done
for L in 512 2048; do m new FLASHGATE_HEADS_PER_CTA=4 "--op decode --batch 128 --seqlen $L"; done
for s in 16 66; do for L in 32768 131072; do m main FLASHGATE_NUM_SPLITS=$s "--op paged --batch 1 --seqlen $L"; done; done
for L in 512 2048; do m main FLASHGATE_NUM_SPLITS=2 "--op decode --batch 128 --seqlen $L"; done
echo "took $SECONDS s"
