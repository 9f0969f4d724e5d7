# Session 14 probe (runs 9, 10): is flashgate slower after any other kernel, or only after a large read? The
# timed replay is preceded, untimed, by nothing (none), a one-element kernel (tiny), a contiguous read of 8, 64
# or 256 MB (read8, read64, read256 = probe_s14b's clean flush), or (run 10, PROBE_STRIDED=1) a read of 64 MB in
# the K cache's own pattern, 256-byte rows every 2 KB, from another buffer (strided64), alone or followed by
# read8 (strided64+read8). Rounds alternate.
import os
import torch
from probe_timing import FLUSH, graphed, header, rounds_after, table_row
from rows import PAGED_ROWS, DECODE_ROWS
import run as benchrun
import peers

one = torch.zeros(1, device="cuda")
before = {"none": lambda: None, "tiny": lambda: one.add_(1),
          "read8": lambda: FLUSH[:8 << 20].max(), "read64": lambda: FLUSH[:64 << 20].max(),
          "read256": lambda: FLUSH.max()}
if os.environ.get("PROBE_STRIDED"):
    rows_buf = torch.zeros(256 << 10, 8, 128, device="cuda", dtype=torch.bfloat16)  # 512 MB, 2 KB per "token"
    strided = rows_buf[:, 0]  # 256 Ki rows of 256 bytes, 2 KB apart: 64 MB read
    before = {"none": lambda: None, "read8": before["read8"], "strided64": lambda: strided.max(),
              "strided64+read8": lambda: (strided.max(), FLUSH[:8 << 20].max())}
rows = [("decode", r) for r in DECODE_ROWS if r.name == "B128 ctx 1024"] + \
       [("paged", r) for r in PAGED_ROWS if r.name == "B128 ctx 1024"]
print(header("| case | contender", before), flush=True)
for op, row in rows:
    t = benchrun.serving_inputs(row, None)
    contenders = {"flashgate": benchrun.flashgate_decode(row, t) if op == "decode"
                  else benchrun.flashgate_paged(row, t, None)}
    if op == "decode":
        contenders["cuDNN"] = peers.sdpa_decode("CUDNN_ATTENTION")(row, t)
    for name, f in contenders.items():
        print(table_row(f"{op} bf16 {row.name} | {name}", rounds_after(graphed(f), before)), flush=True)
    del t, contenders
    torch.cuda.empty_cache()
