#!/bin/bash
# Session 12 run 6: ncu full sections of cuDNN's decode kernel against ours on the same rows (B1/131072 split
# kernels; B128/1024 one pass), main's binary (d9800c2).
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s12f.log) 2>&1
SECONDS=0
for f in .devbin/xz12b/main/*.xz; do d=.devbin/run/main; mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/$(basename $f .xz); chmod +x $d/*; done
N="ncu --set full --import-source no"
timeout 150 $N --nvtx --nvtx-include "cudnn1/" --nvtx-include "cudnn128/" --kernel-name regex:sdpa --launch-count 6 -o $OUT/cudnn python3 .devbin/probe_s12a.py cudnn > $OUT/ncu_cudnn_run.log 2>&1; echo "cudnn rc=$? ${SECONDS}s"
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 1"
timeout 60 $N --kernel-name regex:paged_mma --launch-count 1 -o $OUT/ours_b1 .devbin/run/main/flashgate run $P --op paged --batch 1 --seqlen 131072 > /dev/null 2>&1; echo "ours b1 rc=$? ${SECONDS}s"
timeout 60 $N --kernel-name regex:paged_mma --launch-count 1 -o $OUT/ours_b128 .devbin/run/main/flashgate run $P --op decode --batch 128 --seqlen 1024 > /dev/null 2>&1; echo "ours b128 rc=$? ${SECONDS}s"
for r in cudnn ours_b1 ours_b128; do ncu -i $OUT/$r.ncu-rep --page details --print-units base > $OUT/$r.txt 2>&1; echo "$r: $(wc -l < $OUT/$r.txt) lines"; done
ls -la $OUT
echo "took $SECONDS s"
