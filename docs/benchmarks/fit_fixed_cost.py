# Least-squares fit of kernel time against context length, per row (the same partition at every length), from the
# ncu logs of the serving probes: slope -> streaming rate (K/V bytes per us), intercept -> fixed cost per launch.
# Usage: python3 fit_fixed_cost.py LOG... (lines "[binary] ENV=VALUE --op ... --seqlen L ...: t1 t2 t3", in us; the
# fastest of each line counts). Shapes: 8 kv heads, head dim 128 (the benchmark's rows).
import re
import sys

rows = {}
for fn in sys.argv[1:]:
    for line in open(fn):
        m = re.match(r"(?:(\w+) )?(\S+=\S+) (--op .*?): ([\d. ]+)$", line.strip())
        if not m:
            continue
        binary, env, args, times = m.groups()
        L = int(re.search(r"--seqlen (\d+)", args).group(1))
        key = (binary or "main", env, re.sub(r"--seqlen \d+ ?", "", args).strip())
        rows.setdefault(key, []).append((L, min(float(x) for x in times.split())))
for (binary, env, args), pts in rows.items():
    pts.sort()
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)  # us per key
    batch = int(re.search(r"--batch (\d+)", args).group(1))
    scales = 8 * 2 * 4 if "per-token" in args else 0  # a K and a V scale per kv head and token
    bytes_per_key = batch * (8 * 128 * 2 * (1 if "fp8" in args else 2) + scales)
    print(f"{binary:5s} {env:26s} {args:40s} {n} lengths {pts[0][0]}-{pts[-1][0]}: stream "
          f"{bytes_per_key / slope / 1e6:.2f} TB/s, fixed {my - slope * mx:.1f} us; "
          + ", ".join(f"{L}: {t:.1f}" for L, t in pts))
