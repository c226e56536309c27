"""Soak: a long 2-process DDP job that checkpoints often keeps its memory flat and its checkpoint
directory bounded by the retention limit.

The default suite runs 1,000 steps (a checkpoint every 100); ``-m slow`` runs 20,000 steps (every 500)
and prints the resident memory at the start and the end and the directory size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

JOB = r"""
import json, os, sys, time
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.strategies import DDPStrategy

out, steps, every, limit = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60))
fabric.launch()
torch.set_num_threads(1)


def rss_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def directory_usage(directory):
    entries = list(directory.iterdir())
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    return len(entries), size


fabric.seed_everything(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = fabric.setup(model, optimizer)
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(512, 32, generator=g), torch.randn(512, 1, generator=g))
loader = fabric.setup_dataloaders(DataLoader(data, batch_size=8, shuffle=True))
manager = CheckpointManager(out / "project", total_limit=limit)
state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}
report = {"max_entries": 0, "max_bytes": 0, "saves": 0, "rss_setup_kb": rss_kb()}
started = time.time()
while state["step"] < steps:
    for x, y in loader:
        fabric.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        state["step"] += 1
        if state["step"] % every == 0:
            path = fabric.save_checkpoint(manager, state)
            report["saves"] += 1
            if fabric.is_global_zero:
                entries, size = directory_usage(manager.directory)
                report["max_entries"] = max(report["max_entries"], entries)
                report["max_bytes"] = max(report["max_bytes"], size)
                report["checkpoint_bytes"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            if report["saves"] == 1:
                report["rss_start_kb"] = rss_kb()  # after the first save: every code path has run once
        if state["step"] >= steps:
            break
report["rss_end_kb"] = rss_kb()
report["seconds"] = time.time() - started
report["final_entries"] = sorted(p.name for p in manager.directory.iterdir())
(out / f"report_{fabric.global_rank}.json").write_text(json.dumps(report))
"""


def _soak(tmp_path, steps: int, every: int, limit: int, timeout: float) -> list[dict]:
    script = tmp_path / "soak.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        [sys.executable, str(script), str(out), str(steps), str(every), str(limit)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads((out / f"report_{rank}.json").read_text()) for rank in (0, 1)]


def _check(reports: list[dict], steps: int, every: int, limit: int, max_growth_kb: int) -> None:
    saves = steps // every
    expected_names = [f"checkpoint_{i}" for i in range(saves - limit, saves)]
    for rank, report in enumerate(reports):
        growth = report["rss_end_kb"] - report["rss_start_kb"]
        print(
            f"rank {rank}: RSS {report['rss_setup_kb'] / 1024:.1f} MiB after setup, "
            f"{report['rss_start_kb'] / 1024:.1f} MiB after the first save -> "
            f"{report['rss_end_kb'] / 1024:.1f} MiB after {steps} steps ({growth / 1024:+.1f} MiB), "
            f"{report['seconds']:.1f} s"
        )
        assert report["saves"] == saves
        assert growth < max_growth_kb, f"rank {rank} grew by {growth} kB over {steps} steps"
    main = reports[0]  # rank 0 applies retention; another rank may look while it deletes
    assert main["final_entries"] == expected_names
    print(
        f"checkpoint directory: at most {main['max_entries']} entries, {main['max_bytes'] / 1024:.1f} KiB "
        f"(one checkpoint: {main['checkpoint_bytes'] / 1024:.1f} KiB)"
    )
    # Measured right after each save and its retention: never more than the limit, no left-overs.
    assert main["max_entries"] == limit
    assert main["max_bytes"] <= limit * main["checkpoint_bytes"] * 1.05


@pytest.mark.distributed
def test_soak_short_memory_flat_and_directory_bounded(tmp_path):
    steps, every, limit = 1000, 100, 3
    reports = _soak(tmp_path, steps, every, limit, timeout=240)
    _check(reports, steps, every, limit, max_growth_kb=8 * 1024)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(3600)
def test_soak_20000_steps(tmp_path):
    steps, every, limit = 20_000, 500, 3
    reports = _soak(tmp_path, steps, every, limit, timeout=3600)
    _check(reports, steps, every, limit, max_growth_kb=16 * 1024)
