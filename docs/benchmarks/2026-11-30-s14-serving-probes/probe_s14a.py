# Session 14 probe: the serving rows timed as the benchmark times them (CUDA-graph replays after do_bench's L2
# flush, bench/measure.py) for flashgate builds that differ only in a compile-time setting. Each build is its
# own install folder; each (build, round) runs in its own process, builds alternating, so drift shows.
#   python3 probe_s14a.py NAME=FOLDER [NAME=FOLDER ...]   (env PROBE_ROUNDS, PROBE_ROWS: substrings of labels)
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def child():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import torch
    from measure import graph_median_ms
    from rows import PAGED_ROWS, DECODE_ROWS
    import run as benchrun
    cases = [("paged", r, m) for m in (None, "per-tensor", "per-token") for r in PAGED_ROWS] + \
            [("decode", r, None) for r in DECODE_ROWS]
    want = [w for w in os.environ.get("PROBE_ROWS", "").split(";") if w]
    out = {}
    for op, row, fp8 in cases:
        label = f"{op} {'bf16' if fp8 is None else 'fp8 ' + fp8} {row.name}"
        if want and not any(w in label for w in want):
            continue
        torch.manual_seed(1234)  # the same inputs in every build's process: outputs must agree
        t = benchrun.serving_inputs(row, fp8)
        fn = benchrun.flashgate_decode(row, t) if op == "decode" else benchrun.flashgate_paged(row, t, fp8)
        o = fn(); torch.cuda.synchronize()
        out[label] = {"us": graph_median_ms(fn) * 1e3, "sum": float(o.float().abs().sum())}
        del t, o
        torch.cuda.empty_cache()
    print("RESULT " + json.dumps(out), flush=True)


def main():
    builds = [a.split("=", 1) for a in sys.argv[1:]]
    rounds = int(os.environ.get("PROBE_ROUNDS", "2"))
    times = {}
    for rnd in range(rounds):
        for name, folder in builds:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(folder), PROBE_CHILD="1")
            p = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True, text=True)
            line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{name} round {rnd}: failed rc={p.returncode}\n{p.stderr[-2000:]}", flush=True)
                continue
            for label, r in json.loads(line[0][7:]).items():
                times.setdefault(label, {}).setdefault(name, []).append(r)
            print(f"round {rnd} {name} done", flush=True)
    names = [n for n, _ in builds]
    print("| row | " + " | ".join(f"{n} us" for n in names) + " | " +
          " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
    for label, by in times.items():
        med = {n: sorted(r["us"] for r in by.get(n, []))[len(by.get(n, [])) // 2] if by.get(n) else float("nan")
               for n in names}
        cells = [", ".join(f"{r['us']:.1f}" for r in by.get(n, [])) for n in names]
        sums = {f"{r['sum']:.6g}" for n in names for r in by.get(n, [])}
        print(f"| {label} | " + " | ".join(cells) + " | " +
              " | ".join(f"{med[n] / med[names[0]]:.3f}" for n in names[1:]) +
              f" |{'' if len(sums) == 1 else ' outputs differ: ' + ' '.join(sorted(sums))}", flush=True)


if __name__ == "__main__":
    child() if os.environ.get("PROBE_CHILD") else main()
