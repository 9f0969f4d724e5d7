#!/bin/bash
# Session 12 run 10: per-CTA timelines (branch exp-timeline): where a launch's fixed cost goes.
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s12j.log) 2>&1
SECONDS=0
for f in .devbin/xz12d/*/*.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
i=0
for a in "--op paged --batch 128 --seqlen 1024" "--op decode --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor" "--op paged --batch 8 --seqlen 32768" "--op decode --batch 128 --seqlen 2048"; do
  i=$((i+1))
  FLASHGATE_TIMELINE=$OUT/tl$i.bin timeout 60 .devbin/run/tl/flashgate run $P $a > $OUT/tl$i.txt 2>&1; echo "tl$i rc=$? $a: $(grep -iE 'ms|GB/s' $OUT/tl$i.txt | tail -1)"
done
echo "took $SECONDS s"
