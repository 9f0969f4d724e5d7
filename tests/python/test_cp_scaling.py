"""bench/cp_scaling.py on the CPU: its model counts the bytes the all-gather mode really moves (every collective of a
two-rank forward + backward tallied on gloo), and the script measures one and two ranks and reports them with the
model beside. Skips without torch (with gloo)."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the scaling script is tested where it is")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

from support import fresh_seed  # noqa: E402
from test_distributed import free_port, process_group  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cp_scaling  # noqa: E402

SHAPE = {"heads": 4, "kv_heads": 2, "dim": 32}


def tally_rank(rank, world, port, seed, row, tokens, out):
    """Forward + backward of one bf16 sequence through context_parallel_attn, every all_gather and all_reduce
    counted as the bytes this rank receives (a ring all-reduce: 2 (W - 1) / W of the tensor)."""
    from flashgate import distributed as cp

    received = [0.0]
    gather, reduce = dist.all_gather, dist.all_reduce

    def counted_gather(outputs, x, *args, **kwargs):
        received[0] += (world - 1) * x.numel() * x.element_size()
        return gather(outputs, x, *args, **kwargs)

    def counted_reduce(x, *args, **kwargs):
        received[0] += 2 * (world - 1) / world * x.numel() * x.element_size()
        return reduce(x, *args, **kwargs)

    with process_group(rank, world, port):
        dist.all_gather, dist.all_reduce = counted_gather, counted_reduce
        try:
            gen = torch.Generator().manual_seed(seed)
            rand = lambda *s: torch.randn(*s, generator=gen).to(torch.bfloat16)  # noqa: E731
            H, HQ, D = SHAPE["kv_heads"], SHAPE["heads"], SHAPE["dim"]
            x = {"q": rand(1, tokens, HQ, D), "k": rand(1, tokens, H, D), "v": rand(1, tokens, H, D),
                 "do": rand(1, tokens, HQ, D)}
            if row == "gate+sink":
                x["g"] = torch.nn.functional.logsigmoid(torch.randn(1, tokens, HQ, generator=gen) + 4.0)
                x["sink"] = torch.randn(HQ, generator=gen)
            leaves = {n: (cp.shard(t) if t.dim() > 1 else t.clone()).requires_grad_() for n, t in x.items()
                      if n != "do"}
            o = cp.context_parallel_attn(leaves["q"], leaves["k"], leaves["v"], g=leaves.get("g"),
                                         sink_bias=leaves.get("sink"), backend="cpu")
            torch.autograd.grad(o, list(leaves.values()), cp.shard(x["do"]))
        finally:
            dist.all_gather, dist.all_reduce = gather, reduce
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"received": received[0]}, f)


@pytest.mark.parametrize("row", ["plain", "gate+sink"])
def test_model_counts_the_bytes_the_all_gather_mode_moves(row, tmp_path):
    tokens, out = 512, str(tmp_path / "tally.json")
    mp.start_processes(tally_rank, args=(2, free_port(), fresh_seed(), row, tokens, out), nprocs=2,
                       start_method="spawn")
    with open(out) as f:
        received = json.load(f)["received"]
    model = cp_scaling.transfer_bytes(tokens, row, 2, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["dim"])
    # The model leaves out the layout's own small exchanges (a descriptor, the gate's chunk totals, dsink).
    assert model <= received <= model * 1.01 + 4096, (received, model)


def test_scaling_script_measures_and_reports_on_the_cpu(tmp_path):
    out = str(tmp_path / "cp")
    for world in (1, 2):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", "--master_port",
               str(free_port()), os.path.join(ROOT, "bench", "cp_scaling.py"), "--device", "cpu", "--out", out,
               "--tokens", "128,256", "--reps", "1", "--link-mib", "4", "--heads", str(SHAPE["heads"]),
               "--kv-heads", str(SHAPE["kv_heads"]), "--dim", str(SHAPE["dim"])]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    with open(os.path.join(out, "cp_2.json")) as f:
        two = json.load(f)
    assert two["environment"]["allgather_gbps"] > 0
    assert not os.path.isabs(two["environment"]["command"].split()[2])  # the script named inside the repository
    assert all(r.get("flashgate_allgather_ms", 0) > 0 for r in two["results"]), two["results"]
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "cp_scaling.py"), "--report", out], check=True,
                   timeout=120)
    with open(os.path.join(out, "report.md")) as f:
        rows = [line.split("|")[1:-1] for line in f if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2 * 2 * 2, rows  # ranks x tokens x rows
    for cells in rows:
        ranks, model = int(cells[0]), cells[5].strip()
        assert model.endswith("x"), cells
        assert (float(model[:-1]) == 1.0) if ranks == 1 else (0.0 < float(model[:-1]) <= 2.0), cells
