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


def test_markdown_leads_with_the_comparison_per_workload_and_lists_every_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import run_all

    monkeypatch.setattr(run_all, "GPU_LAST_RUN", tmp_path / "absent.json")
    report = {
        "machine": {"date": "today", "python": "3", "torch": "2", "cpus": 2, "load_average": 1.0},
        "quick": True,
        "benchmarks": {
            "loop_overhead": {"title": "Loop", "status": "ok", "seconds": 1.0, "kwargs": {},
                              "result": {"ratio": 1.02, "fabricx_us_per_step": 5.0}},
            "peers": {"title": "Peers", "status": "ok", "seconds": 1.0, "kwargs": {},
                      "result": {"lightning_ratio": 1.25, "accelerate_ratio": 1.8}},
            "resume": {"title": "Resume", "status": "missing", "note": "not yet"},
        },
        "ratios": {"loop_overhead.ratio": 1.02, "peers.lightning_ratio": 1.25, "peers.accelerate_ratio": 1.8},
    }
    page = tmp_path / "benchmarks.md"
    run_all.write_markdown(report, "chart.png", page)
    text = page.read_text()
    lead = text.index("## fabricx, Lightning and Accelerate against plain PyTorch")
    assert "| Training loop, 1 CPU process | the loop in plain PyTorch (time per step) | 1.02 | 1.25 | 1.80 |" in text
    assert "| GPT-2 small on one GPU (eager, compiled) |" in text and "no GPU run is recorded yet) | not run |" in text
    assert lead < text.index("## Every ratio") < text.index("## Loop")
    assert "| Loop | ratio | 1.020 |" in text and "| fabricx µs per step | 5 |" in text
    assert "`loop_overhead.ratio`" not in text  # no internal keys
    assert "Not measured in this run (missing: not yet)" in text
    run_all.write_chart(report["ratios"], tmp_path / "chart.png", report)
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpu_rows_come_from_the_last_gpu_run_with_its_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import run_all

    gpu = {
        "environment": {"date": "2026-11-30 10:00 UTC", "python": "3.12", "versions": {"torch": "2.11"},
                        "cuda": "13.0", "gpu": "NVIDIA H200", "fabricx_commit": "abc"},
        "dry_run": False, "status": "ok", "seconds": 300.0,
        "parts": {"throughput": {"status": "ok", "seconds": 100.0, "result": {
            "device": "NVIDIA H200", "parameters": 124e6, "batch": 8, "sequence": 1024, "steps_per_turn": 10,
            "rounds": 5, "compile_backend": "inductor", "peak_flops": 989e12, "missing": [], "rows": [
                {"kind": kind, "candidate": name, "tokens_per_s": 1e5 * ratio, "tokens_per_s_ratio": ratio,
                 "peak_memory_mb": 9000.0, "peak_memory_ratio": 1.0, "mfu": 0.4}
                for kind in ("eager", "compiled") for name, ratio in (("raw", 1.0), ("fabricx", 0.99),
                                                                       ("lightning", 0.97), ("accelerate", 0.95))
            ]}}},
    }
    last = tmp_path / "gpu_last_run.json"
    last.write_text(json.dumps(gpu))
    monkeypatch.setattr(run_all, "GPU_LAST_RUN", last)
    report = {"machine": {"date": "today", "python": "3", "torch": "2", "cpus": 2, "load_average": 1.0},
              "quick": True, "benchmarks": {}, "ratios": {}}
    page = tmp_path / "benchmarks.md"
    run_all.write_markdown(report, "chart.png", page)
    text = page.read_text()
    row = "| GPT-2 small on one GPU, compiled | raw PyTorch, bf16-mixed (time per token) | 1.01 | 1.03 | 1.05 |"
    assert row in text
    assert "2026-11-30 10:00 UTC" in text and "| compiled | fabricx | 99,000 | 0.990 |" in text


def test_instructions_degrade_to_not_available_and_parse_callgrind_dumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import instructions

    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert instructions.measure_instructions(world=1, steps=2) == {
        "instructions": "not available: valgrind is not installed (Debian: apt-get install valgrind)"
    }
    totals = {}
    for variant in ("plain", "accumulation", "clipping"):
        for side, per_step in (("plain", 1000), ("fabricx", 1010)):
            for count in (5, 10):
                label = f"{variant}-{side}-{count}"
                totals[label] = 50_000 + per_step * count
                (tmp_path / f"rank0.out.{label}").write_text(
                    f"version: 1\ndesc: Trigger: Client Request: {label}\nevents: Ir\nsummary: {totals[label]}\n"
                )
    assert instructions.read_dumps(tmp_path, 0) == totals
    result = instructions.summarize([totals], steps=5)
    assert result["plain_fabricx_instructions_per_step"] == 1010
    assert result["instructions_ratio"] == result["clipping_instructions_ratio"] == pytest.approx(1.01)


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


def test_an_update_replaces_the_rerun_benchmarks_and_says_when(tmp_path: Path) -> None:
    """`python -m benchmarks --only X --update`: X's new figures replace its old ones in the full run's report,
    the others stay, and the page names what was re-run and when."""
    from benchmarks import run_all

    machine = {"python": "3", "torch": "2", "cpus": 2}

    def record(ratio: float, when: str) -> dict:
        return {"title": "T", "status": "ok", "result": {"ratio": ratio}, "seconds": 1.0, "measured_at": when}

    full = {"machine": {**machine, "date": "09:00 UTC", "load_average": 0.5}, "quick": False,
            "benchmarks": {"a": record(1.5, "09:00 UTC"), "b": record(1.2, "09:00 UTC")}}
    partial = {"machine": {**machine, "date": "11:00 UTC", "load_average": 0.7}, "quick": False,
               "benchmarks": {"a": record(1.1, "11:00 UTC")}}
    merged = run_all.merge_reports(full, partial)
    assert merged["ratios"] == {"a.ratio": 1.1, "b.ratio": 1.2}
    assert merged["machine"]["date"] == "09:00 UTC"
    page = tmp_path / "benchmarks.md"
    run_all.write_markdown(merged, "chart.png", page)
    text = page.read_text()
    assert "Re-run since: a at 11:00 UTC (load average 0.7 at the start)." in text
    assert "(measured 11:00 UTC)" in text and "(measured 09:00 UTC)" in text
    with pytest.raises(SystemExit, match="--quick run cannot update"):
        run_all.merge_reports(full, {**partial, "quick": True})


def test_trainer_instruction_summary_separates_the_log_call_and_the_trainers_own_work() -> None:
    from benchmarks.trainer_overhead import summarize_instructions

    per_step = {"fabric_loop": 1000, "fabric_step_loop": 1100, "trainer": 1200, "trainer_without_log": 1130,
                "lightning_trainer": 3000, "lightning_trainer_without_log": 2950}
    # Each side's counts over N and 2N steps from the same start, with a fixed cost the difference removes.
    labels = {f"{side}-{steps}": 10_000 + cost * steps for side, cost in per_step.items() for steps in (5, 10)}
    result = summarize_instructions(labels, 5)
    assert result["trainer_instructions_per_step"] == 1200
    assert result["log_instructions_per_call"] == 70
    assert result["lightning_log_instructions_per_call"] == 50
    assert result["own_work_instructions_ratio"] == pytest.approx(1130 / 1100)
    assert result["trainer_fixed_instructions_per_step"] == 100
    assert result["lightning_trainer_fixed_instructions_per_step"] == 1900
    assert result["instructions_ratio"] == pytest.approx(1.2)
