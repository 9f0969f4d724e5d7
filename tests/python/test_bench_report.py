"""bench/report.py: the fp8 table (flashgate's fp8 rows against its bf16 row of the same case, tokens/s) and
which plots a run gets."""
import importlib.util
import pathlib

import pytest

REPORT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "report.py"


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(op, kv, case, ms, tokens_per_s, status="ok"):
    fg = {"status": status}
    if status == "ok":
        fg.update(ms=ms, gbps=1.0, tokens_per_s=tokens_per_s)
    return {"op": op, "kv": kv, "row": case, "contenders": {"flashgate": fg}}


def test_fp8_rows_against_the_bf16_row_of_their_case(report):
    rows = [_row("paged", "bf16", "B8", 0.3, 1000.0), _row("paged", "fp8 per-tensor", "B8", 0.15, 2000.0),
            _row("paged", "fp8 per-token", "B8", 0.2, 1500.0), _row("decode", "bf16", "B8", 0.3, 900.0),
            _row("paged", "bf16", "B1", 0.1, 10.0), _row("paged", "fp8 per-tensor", "B1", 0.0, 0.0, "cannot run: no kernel")]
    lines = report.fp8_table(rows).splitlines()
    assert "fp8 per-tensor ms (x bf16 tokens/s)" in lines[0] and "fp8 per-token" in lines[0]
    assert lines[2] == "| paged | B8 | 0.300 | 0.150 (2.00x) | 0.200 (1.50x) |"
    assert lines[3] == "| paged | B1 | 0.100 | fails | — |"
    assert len(lines) == 4  # the decode row has no fp8 rows


def test_no_fp8_rows_no_table(report):
    assert report.fp8_table([_row("decode", "bf16", "B8", 0.3, 900.0)]) == ""


def test_serving_only_run_gets_no_training_plots(report, tmp_path):
    pytest.importorskip("matplotlib")
    out = {"ceilings": {"copy_gbps": 4000.0}, "serving": [_row("paged", "bf16", "B8", 0.3, 1000.0)]}
    assert report.plots(out, str(tmp_path)) == ["serving_gbps.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving_gbps.png"]


def test_serving_rows_show_both_timings(report):
    row = _row("paged", "bf16", "B8", 0.3, 1000.0)
    row["contenders"]["flashgate"].update(gbps=3600.0, gbps_back_to_back=3800.0)
    row["contenders"]["cuDNN (contiguous)"] = {"status": "ok", "ms": 0.28, "gbps": 4000.0, "gbps_back_to_back": 4000.0}
    lines = report.serving_table([row], 4000.0, 4000.0).splitlines()
    assert "back to back: GB/s" in lines[0]
    assert lines[2] == "| paged | bf16 | B8 | flashgate | 3600 | 0.300 | 0.90 |  | 3800 | 0.95 |  |"
    assert lines[3] == "| paged | bf16 | B8 | cuDNN (contiguous) | 4000 | 0.280 | 1.00 | 0.90x | 4000 | 1.00 | 0.95x |"
    fp8 = _row("paged", "fp8 per-tensor", "B8", 0.15, 2000.0)
    fp8["contenders"]["flashgate"]["tokens_per_s_back_to_back"] = 1900.0
    row["contenders"]["flashgate"]["tokens_per_s_back_to_back"] = 1000.0
    assert report.fp8_table([row, fp8]).splitlines()[2] == "| paged | B8 | 0.300 | 0.150 (2.00x; back to back 1.90x) |"


def test_forward_only_contender_shows_its_forward_and_ratio(report):
    fg = {"status": "ok", "fwd_tflops": 500.0, "bwd_tflops": 400.0, "fwdbwd_tflops": 420.0}
    no_grad = {"status": "ok", "fwd_tflops": 525.0}  # timed forward only: no backward figures
    lines = report.training_table([{"row": "B8", "contenders": {"flashgate": fg, "flashgate no grad": no_grad}}])
    lines = lines.splitlines()
    assert "flashgate no grad fwd / bwd / fwd+bwd" in lines[0] and "vs flashgate no grad" in lines[0]
    assert lines[2] == "| B8 | 500 / 400 / 420 | 525 / — / — | 0.95x / — / — |"
