# A/B table of the serving probes: flashgate's rows from several bench/run.py reports of one run (bench_<variant>/
# report.md, as the probe scripts' bench_variants write them), ms after do_bench's flush / GB/s back to back per
# variant, and each variant's flushed time over the first's. Usage: python3 ab_table.py RUN_DIR VARIANT...
import os
import sys

run_dir, variants = sys.argv[1], sys.argv[2:]
rows, order = {}, []
for v in variants:
    for line in open(os.path.join(run_dir, f"bench_{v}", "report.md")):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 10 and c[1] in ("decode", "paged") and c[4] == "flashgate":
            key = f"{c[1]} {c[2]} {c[3]}"
            if key not in rows:
                rows[key] = {}
                order.append(key)
            rows[key][v] = (float(c[6]), float(c[9]))
first = variants[0]
print("| row | " + " | ".join(variants) + " | " + " / ".join(f"{v}/{first}" for v in variants[1:]) + " |")
print("|---" * (len(variants) + 2) + "|")
for key in order:
    r = rows[key]
    cells = [f"{r[v][0]:.3f} / {r[v][1]:.0f}" if v in r else "-" for v in variants]
    ratios = [f"{r[v][0] / r[first][0]:.3f}" if v in r and first in r else "-" for v in variants[1:]]
    print(f"| {key} | " + " | ".join(cells) + " | " + " / ".join(ratios) + " |")
