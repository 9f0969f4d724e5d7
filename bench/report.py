"""Markdown tables and PNG plots from the benchmark's results."""
import os


def _fmt(c, key):
    if c.get("status") != "ok":
        s = c.get("status", "—")
        return "fails" if s.startswith("cannot") else ("wrong" if s.startswith("wrong") else s)
    v = c.get(key)
    return f"{v:.0f}" if v is not None else "—"


def _ratio(fg, peer, key):
    if fg.get("status") != "ok" or peer.get("status") != "ok" or key not in fg or key not in peer:
        return "—"
    return f"{fg[key] / peer[key]:.2f}x"


def training_table(rows):
    names = []
    for r in rows:
        for n in r["contenders"]:
            if n not in names:
                names.append(n)
    peers = [n for n in names if n != "flashgate"]
    keys = ("fwd_tflops", "bwd_tflops", "fwdbwd_tflops")
    lines = ["| case | " + " | ".join(f"{n} fwd / bwd / fwd+bwd" for n in names) + " | " +
             " | ".join(f"vs {p} fwd / bwd / fwd+bwd" for p in peers) + " |",
             "|---" * (1 + len(names) + len(peers)) + "|"]
    for r in rows:
        cs = r["contenders"]
        fg = cs.get("flashgate", {})
        cells = [" / ".join(_fmt(cs.get(n, {}), k) for k in keys) for n in names]
        ratios = [" / ".join(_ratio(fg, cs.get(p, {}), k) for k in keys) for p in peers]
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def serving_table(rows, copy_gbps, copy_gbps_back_to_back=None):
    """Each contender timed after do_bench's L2 flush (the figures of record) and back to back (no flush), each
    against the copy ceiling timed the same way."""
    lines = ["| op | KV | case | contender | GB/s | ms | of copy ceiling | flashgate / contender | "
             "back to back: GB/s | of copy | flashgate / contender |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fg = r["contenders"].get("flashgate", {})
        for n, c in r["contenders"].items():
            head = f"| {r['op']} | {r['kv']} | {r['row']} | {n} | "
            if c.get("status") != "ok":
                lines.append(head + f"{c.get('status', '—')} | | | | | | |")
                continue
            def of_copy(key, ceiling):
                return f"{c[key] / ceiling:.2f}" if c.get(key) and ceiling else "—"

            def vs(key):  # flashgate / this contender (blank on flashgate's own line)
                return _ratio(fg, c, key) if n != "flashgate" else ""
            lines.append(head + f"{c['gbps']:.0f} | {c['ms']:.3f} | {of_copy('gbps', copy_gbps)} | {vs('gbps')} | "
                         f"{_fmt(c, 'gbps_back_to_back')} | {of_copy('gbps_back_to_back', copy_gbps_back_to_back)} | "
                         f"{vs('gbps_back_to_back')} |")
    return "\n".join(lines)


def fp8_table(rows):
    """flashgate's fp8 KV rows against its bf16 row of the same case: tokens/s ratio (target >= 1.8x)."""
    bf16 = {(r["op"], r["row"]): r["contenders"].get("flashgate", {}) for r in rows if r["kv"] == "bf16"}
    modes = [k for k in dict.fromkeys(r["kv"] for r in rows) if k.startswith("fp8")]
    cases = [k for k in dict.fromkeys((r["op"], r["row"]) for r in rows if r["kv"] in modes)]
    if not cases:
        return ""
    fp8 = {(r["op"], r["row"], r["kv"]): r["contenders"].get("flashgate", {}) for r in rows if r["kv"] in modes}
    lines = ["| op | case | bf16 ms | " + " | ".join(f"{m} ms (x bf16 tokens/s)" for m in modes) + " |",
             "|---" * (3 + len(modes)) + "|"]
    for op, row in cases:
        b = bf16.get((op, row), {})
        cells = []
        for m in modes:
            f = fp8.get((op, row, m), {})
            if f.get("status") != "ok":
                cells.append(_fmt(f, "ms"))
                continue
            b2b = _ratio(f, b, "tokens_per_s_back_to_back")
            cells.append(f"{f['ms']:.3f} ({_ratio(f, b, 'tokens_per_s')}" +
                         (f"; back to back {b2b})" if b2b != "—" else ")"))
        bms = f"{b['ms']:.3f}" if b.get("status") == "ok" else _fmt(b, "ms")
        lines.append(f"| {op} | {row} | {bms} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(out):
    lines = []
    for section in ("training", "serving"):
        for r in out.get(section, []):
            for n, c in r["contenders"].items():
                if c.get("status", "ok") != "ok":
                    lines.append(f"- {section} / {r['row']} / {n}: {c['status']}")
    return "\n".join(lines) or "- none"


def plots(out, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return []
    made = []
    tr = {r["row"]: r for r in out.get("training", [])}

    def series(row_names, xs, key, path, xlabel, title):
        names = sorted({n for rn in row_names if rn in tr for n in tr[rn]["contenders"]})
        if not names:  # a run without these rows (e.g. --only serving) gets no empty plot
            return
        fig, ax = plt.subplots(figsize=(7, 4))
        for n in names:
            pts = [(x, tr[rn]["contenders"][n].get(key)) for x, rn in zip(xs, row_names)
                   if rn in tr and tr[rn]["contenders"].get(n, {}).get("status") == "ok"]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=n)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, path), dpi=110)
        plt.close(fig)
        made.append(path)

    series(["MHA D64, B2 H32 T8192", "MHA D128, B2 H16 T8192", "MHA D256, B2 H8 T8192"], [64, 128, 256],
           "fwd_tflops", "fwd_by_headdim.png", "head dim", "causal forward, T8192, bf16")
    series(["MHA D128, B8 H16 T2048", "MHA D128, B2 H16 T8192", "MHA D128, B1 H16 T16384",
            "MHA D128, B1 H16 T32768"], [2048, 8192, 16384, 32768], "fwd_tflops", "fwd_by_seqlen.png",
           "sequence length", "causal forward, D128, bf16")
    series(["MHA D128, B8 H16 T2048", "MHA D128, B2 H16 T8192", "MHA D128, B1 H16 T16384",
            "MHA D128, B1 H16 T32768"], [2048, 8192, 16384, 32768], "bwd_tflops", "bwd_by_seqlen.png",
           "sequence length", "causal backward, D128, bf16")
    sv = out.get("serving", [])
    if sv:
        fig, ax = plt.subplots(figsize=(9, 4))
        labels, vals = [], []
        for r in sv:
            c = r["contenders"].get("flashgate", {})
            if c.get("status") == "ok":
                labels.append(f"{r['op']} {r['kv']}\n{r['row']}")
                vals.append(c["gbps"])
        ax.bar(range(len(vals)), vals)
        ax.axhline(out["ceilings"]["copy_gbps"], color="r", ls="--", label="copy ceiling")
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels(labels, rotation=90, fontsize=6)
        ax.set_ylabel("GB/s of KV read")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "serving_gbps.png"), dpi=110)
        plt.close(fig)
        made.append("serving_gbps.png")
    return made


def write(out, outdir):
    env, ceil = out["env"], out["ceilings"]
    md = [f"# flashgate benchmark — {env.get('gpu')}", "",
          "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in env.items()] + [
          f"| bf16 matmul ceiling (this run) | {ceil['matmul_bf16_tflops']:.0f} TFLOP/s |",
          f"| copy ceiling (this run, read+write) | {ceil['copy_gbps']:.0f} GB/s |"] + (
          [f"| copy ceiling back to back | {ceil['copy_gbps_back_to_back']:.0f} GB/s |"]
          if "copy_gbps_back_to_back" in ceil else []) + [
          f"| wall time | {out.get('seconds', 0):.0f} s |"] + (
          [f"| peers not given | {', '.join(out['peers_not_given'])} |"] if out.get("peers_not_given") else []) + [""]
    if out.get("training"):
        md += ["## Training (TFLOP/s fwd / bwd / fwd+bwd, bf16, causal; ratios flashgate / peer)", "",
               training_table(out["training"]), ""]
    if out.get("serving"):
        md += ["## Serving (GB/s of K/V read; CUDA-graph replays)", "",
               "Timed after do_bench's L2 flush (a 256 MB fill: the figures of record), and back to back with no "
               "flush (within the protocol for inputs several times the L2; no dirty lines to write back).", "",
               serving_table(out["serving"], ceil["copy_gbps"], ceil.get("copy_gbps_back_to_back")), ""]
        table = fp8_table(out["serving"])
        if table:
            md += ["## fp8 KV against bf16 KV (flashgate, same case)", "", table, ""]
    md += ["## Cases a contender could not run or got wrong", "", failures(out), ""]
    if out.get("fatal"):
        md += ["## Fatal error", "", "```", out["fatal"], "```"]
    for p in plots(out, outdir):
        md.append(f"![{p}]({p})")
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
