# Least-squares fit of kernel time (the fastest of each ncu triple) against context length, per partition, from
# run8_s12h.log and run9_s12i.log: slope -> streaming rate (K/V bytes per us), intercept -> fixed cost per launch.
import re

rows = {}
for fn in ("run8_s12h.log", "run9_s12i.log"):
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
    bytes_per_key = batch * 8 * 128 * 2 * (1 if "fp8" in args else 2)  # 8 kv heads, D 128, K and V
    print(f"{binary:5s} {env:26s} {args:40s} {len(pts)} lengths: stream {bytes_per_key / slope / 1e6:.2f} TB/s, "
          f"fixed {my - slope * mx:.1f} us")
