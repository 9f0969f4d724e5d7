"""Tables of slice sweeps (sweep_slices.py's TSVs), one column per sweep, medians over rounds:

    python3 sweep_table.py A.tsv [B.tsv ...]

Each cell: us after do_bench's flush / us back to back, and in brackets the flushed time over the first sweep's
for the same (row, kind, slices). Slices 0: the planner's own count."""
import collections
import csv
import os
import statistics
import sys


def load(path):
    times = collections.defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            times[(r["row"], r["kind"], r["slices"])].append((float(r["ms_flushed"]), float(r["ms_back_to_back"])))
    return {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in times.items()}


def main():
    sweeps = [load(p) for p in sys.argv[1:]]
    names = [os.path.basename(p).removesuffix(".tsv") for p in sys.argv[1:]]
    print("| row | kind | slices | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for key, first in sweeps[0].items():
        cells = []
        for s in sweeps:
            t = s.get(key)
            cells.append(f"{t[0] * 1e3:.1f} / {t[1] * 1e3:.1f} ({t[0] / first[0]:.3f})" if t else "-")
        print(f"| {key[0]} | {key[1]} | {'plan' if key[2] == '0' else key[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
