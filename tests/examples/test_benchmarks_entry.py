"""``python -m benchmarks`` runs the selected benchmarks in fresh processes and writes the JSON and the chart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `benchmarks` is a top-level folder of the repository, not installed

pytestmark = pytest.mark.timeout(600)


def test_entry_point_writes_json_and_chart_and_skips_what_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "loop_overhead", "checkpoint_io", "--out",
         str(tmp_path), "--no-docs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=500,
    )
    assert process.returncode == 0, (process.stdout + process.stderr)[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    assert set(report["benchmarks"]) == {"loop_overhead", "checkpoint_io"}
    for record in report["benchmarks"].values():
        assert record["status"] == "ok", record
    ratios = report["ratios"]
    assert {"loop_overhead.ratio", "checkpoint_io.save_fabricx_ratio", "checkpoint_io.load_fabricx_ratio"} <= set(
        ratios
    )
    assert all(value > 0 for value in ratios.values())
    assert report["benchmarks"]["checkpoint_io"]["result"]["state_mb"] > 3
    assert (tmp_path / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_benchmarks_are_reported_not_fatal(tmp_path: Path) -> None:
    from benchmarks import run_all

    broken = run_all.Benchmark("does_not_exist_yet", "Missing")
    assert run_all.run_one(broken, quick=True)["status"] == "missing"
    record = run_all.run_one(run_all.Benchmark("common", "no measure()"), quick=True)
    assert record["status"] == "missing" and "measure" in record["note"]
    found = run_all.ratios({"a": {"result": {"ratio": 1.5, "x_ratio": 2, "nested": {"ratio": 0.5}, "s": 3}}})
    assert found == {"a.ratio": 1.5, "a.x_ratio": 2.0, "a.nested.ratio": 0.5}
    with pytest.raises(SystemExit, match="Unknown benchmark"):
        run_all.run(names=["nope"], out=tmp_path)


def test_markdown_table_lists_every_ratio(tmp_path: Path) -> None:
    from benchmarks import run_all

    report = {
        "machine": {"date": "today", "python": "3", "torch": "2", "cpus": 2, "load_average": 1.0},
        "quick": True,
        "benchmarks": {
            "loop_overhead": {"title": "Loop", "status": "ok", "seconds": 1.0, "kwargs": {}, "result": {"ratio": 1.02}},
            "resume": {"title": "Resume", "status": "missing", "note": "not yet"},
        },
        "ratios": {"loop_overhead.ratio": 1.02},
    }
    page = tmp_path / "benchmarks.md"
    run_all.write_markdown(report, "chart.png", page)
    text = page.read_text()
    assert "| `loop_overhead.ratio` | 1.020 |" in text
    assert "Not measured in this run (missing: not yet)" in text
    assert "![Ratios to plain PyTorch](chart.png)" in text


def test_gpu_check_dry_run_writes_its_tables_on_the_cpu(tmp_path: Path) -> None:
    """`python -m benchmarks.gpu_check --dry-run`: every part of the GPU check runs on the CPU with tiny sizes."""
    process = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(tmp_path)],
        cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=560,
    )
    assert process.returncode == 0, (process.stdout + process.stderr)[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["status"] == "ok" and report["dry_run"] is True
    assert set(report["parts"]) == {"tests", "throughput", "checkpoint"}
    tests = report["parts"]["tests"]["result"]
    assert tests["counts"]["skipped"] == len(tests["cases"]) >= 10  # collected, skipped with the reason on a CPU
    assert all("CUDA" in case["detail"] for case in tests["cases"])
    rows = report["parts"]["throughput"]["result"]["rows"]
    assert {(row["kind"], row["candidate"]) for row in rows} >= {
        (kind, name) for kind in ("eager", "compiled") for name in ("raw", "fabricx")
    }
    assert all(row["tokens_per_s"] > 0 and row["tokens_per_s_ratio"] > 0 for row in rows)
    assert next(row for row in rows if row["candidate"] == "fabricx")["monitor_mfu"] > 0
    saves = {row["key"]: row for row in report["parts"]["checkpoint"]["result"]["rows"]}
    assert set(saves) == {"torch_save", "torch_save_fsync", "dcp_async", "sync", "async"}
    assert all(0 < row["blocked_s"] <= row["complete_s"] for row in saves.values())
    page = (tmp_path / "gpu-check.md").read_text()
    assert "| eager | fabricx |" in page and "| fabricx save(async_save=True) |" in page


def test_gpu_check_exits_non_zero_when_a_part_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import gpu_check

    monkeypatch.setattr(gpu_check, "run_tests", lambda out, limit, on_gpu: {"status": "failed", "seconds": 0.0,
                        "result": {"counts": {"passed": 0, "failed": 1, "error": 0, "skipped": 0},
                                   "cases": [{"test": "t::x", "outcome": "failed", "seconds": 0, "detail": "boom"}]}})
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path), "--skip", "throughput", "checkpoint"]) == 1
    assert "| `t::x` | failed | boom |" in (tmp_path / "gpu-check.md").read_text()
