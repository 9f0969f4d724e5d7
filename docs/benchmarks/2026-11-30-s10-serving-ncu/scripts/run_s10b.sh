#!/bin/bash
# Session 10 run 2: exp-loadonly (the serving loop streams the ring without computing) against main: ncu
# kernel durations and DRAM read rates. carry: [".devbin/xz", ".devbin/run_s10b.sh"]
cd "$(dirname "$0")/.."
exec > >(tee $OUT/s10b.log) 2>&1
SECONDS=0
for f in .devbin/xz/*/flashgate.xz; do d=.devbin/run/$(basename $(dirname $f)); mkdir -p $d; python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $d/flashgate; chmod +x $d/*; done
P="--heads 32 --kv-heads 8 --head-dim 128 --backend cuda --no-check --iters 3"
m() {  # label, binary, env, args
  r=$(env $3 timeout 30 ncu --clock-control none --kernel-name regex:paged_mma --launch-count 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum.per_second .devbin/run/$2/flashgate run $P $4 2>&1 | grep -E "gpu__time_duration|dram__bytes" | awk '{print $(NF-1) $NF}' | paste -sd' ')
  echo "$1 | $2 $3: $r (${SECONDS}s)"
}
for a in "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor" \
         "--op paged --batch 1 --seqlen 131072 --fp8 per-tensor" "--op paged --batch 128 --seqlen 1024" "--op paged --batch 1 --seqlen 131072"; do
  for b in main loadonly; do m "$a" $b "X=1" "$a"; done
done
for s in 2 4; do
  m "fp8 B8/32768" loadonly "FLASHGATE_SERVING_STAGES=$s" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"
  m "fp8 B128/1024" loadonly "FLASHGATE_SERVING_STAGES=$s" "--op paged --batch 128 --seqlen 1024 --fp8 per-tensor"
done
m "fp8 B8/32768" main "FLASHGATE_SERVING_STAGES=4" "--op paged --batch 8 --seqlen 32768 --fp8 per-tensor"
echo "took $SECONDS s"
