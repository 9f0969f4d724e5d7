# Session 14 probe e (run 5, under ncu --cache-control none): does a back-to-back replay read fewer DRAM bytes
# than one after a clean flush, i.e. does the L2 carry K/V from one run into the next? bf16 decode B128/1024,
# flashgate then cuDNN, each 4 times back to back and 4 times after reading a 256 MB buffer.
import torch
from probe_timing import FLUSH
from rows import DECODE_ROWS
import run as benchrun
import peers

torch.manual_seed(7)
row = [r for r in DECODE_ROWS if r.name == "B128 ctx 1024"][0]
t = benchrun.serving_inputs(row, None)
fns = {"flashgate": benchrun.flashgate_decode(row, t), "cuDNN": peers.sdpa_decode("CUDNN_ATTENTION")(row, t)}
for name, fn in fns.items():
    fn(); torch.cuda.synchronize()
    for mode in ("none", "clean"):
        for _ in range(4):
            if mode == "clean":
                FLUSH.max()
            fn()
        torch.cuda.synchronize()
print("done")
