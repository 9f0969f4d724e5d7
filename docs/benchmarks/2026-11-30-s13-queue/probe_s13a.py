# Session 13 probe: the queue kernel (FLASHGATE_SERVING_QUEUE=1, paged_queue.cuh) against the static kernel on
# the bf16 serving rows, at several unit splits (PROBE_CONFIGS="head units,tail units,tail permille;...", see
# serving.cpp), graph replays after the L2 flush (bench/measure.py). Prints us, GB/s of KV, the ratio to the
# static kernel and the largest difference to its output.
import os, sys, torch
sys.path.insert(0, "bench")
from measure import graph_median_ms
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun
import flashgate

def case(op, row):
    t = benchrun.serving_inputs(row, None)
    fn = benchrun.flashgate_decode(row, t) if op == "decode" else benchrun.flashgate_paged(row, t, None)
    return t, fn

configs = [c.split(",") for c in os.environ.get("PROBE_CONFIGS", "2,3,100;2,0,0;1,4,150;3,6,100").split(";")]
for op, rows in (("paged", PAGED_ROWS), ("decode", DECODE_ROWS)):
    for row in rows:
        t, fn = case(op, row)
        nbytes = row.kv_bytes(2)
        os.environ["FLASHGATE_SERVING_QUEUE"] = "0"
        ref = fn(); torch.cuda.synchronize()
        base = graph_median_ms(fn)
        line = f"{op} bf16 {row.name}: static {base*1e3:.1f} us {nbytes/base/1e6:.0f} GB/s"
        for head, tail, permille in configs:
            os.environ["FLASHGATE_SERVING_QUEUE"] = "1"
            os.environ["FLASHGATE_QUEUE_HEAD_UNITS"] = head
            os.environ["FLASHGATE_QUEUE_TAIL_UNITS"] = tail
            os.environ["FLASHGATE_QUEUE_TAIL_PERMILLE"] = permille
            ck = f"{head},{tail},{permille}"
            o = fn(); torch.cuda.synchronize()
            tm = graph_median_ms(fn)
            diff = (o.float() - ref.float()).abs().max().item()
            line += f" | queue/{ck} {tm*1e3:.1f} us {nbytes/tm/1e6:.0f} GB/s x{base/tm:.3f} (diff {diff:.1e})"
        os.environ["FLASHGATE_SERVING_QUEUE"] = "0"
        print(line, flush=True)
        del t
        torch.cuda.empty_cache()
