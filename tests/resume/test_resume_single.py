"""Bit-exact resumption in one process: stop anywhere, resume in a NEW process, get the same weights.

The uninterrupted runs and the interrupted first halves run in the test process; every resumption
runs in one fresh Python process launched once for all scenarios (this file run as a script).
Random generators are exercised everywhere: shuffling, dropout, augmentation noise in
``__getitem__`` (in the main process with ``num_workers=0``, in workers with ``num_workers=2``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from fabricx import Fabric

SAMPLES, BATCH, EPOCHS = 40, 4, 2
BATCHES_PER_EPOCH = SAMPLES // BATCH


class NoisyDataset(Dataset):
    """Sample ``i`` is its id, a feature vector with random augmentation, and a target."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        base = torch.linspace(-1, 1, 4) * (index / SAMPLES)
        noise = 0.05 * torch.randn(4) + 0.01 * float(np.random.rand()) + 0.01 * random.random()
        return index, base + noise, base.sum(0, keepdim=True)


def build(config: dict):
    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true", grad_accum_steps=config["accum"])
    fabric.seed_everything(1234)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler = fabric.setup(model, optimizer, scheduler=scheduler)
    loader = DataLoader(NoisyDataset(), batch_size=BATCH, shuffle=True, num_workers=config["workers"])
    loader = fabric.setup_dataloaders(loader)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "loader": loader, "step": 0, "epoch": 0}
    return fabric, state


def train(config: dict, checkpoint: str | None = None, stop: int | str | None = None, resume: bool = False) -> dict:
    """Train EPOCHS epochs; ``stop`` = a step count (save right after that batch) or "end:<epoch>"
    (save after that epoch's loop finished). Returns the sample ids seen and the final weights."""
    fabric, state = build(config)
    if resume:
        torch.manual_seed(999)  # the checkpoint's random state must win over whatever the process had
        fabric.load(checkpoint, state)
    model, optimizer, scheduler, loader = state["model"], state["optimizer"], state["scheduler"], state["loader"]
    seen: list[int] = []
    for epoch in range(state["epoch"], EPOCHS):
        for ids, x, y in loader:
            with fabric.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                fabric.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
            seen.extend(ids.tolist())
            state["step"] += 1
            if state["step"] == stop:
                fabric.save(checkpoint, state)
                return {"seen": seen}
        state["epoch"] = epoch + 1
        if stop == f"end:{epoch}":
            fabric.save(checkpoint, state)
            return {"seen": seen}
    return {"seen": seen, "weights": [p.detach().clone() for p in model.parameters()], "step": state["step"]}


def _scenarios(tmp_path: Path) -> list[dict]:
    rng = random.Random()
    plain_mid = rng.randrange(1, BATCHES_PER_EPOCH)  # inside epoch 0
    late_mid = BATCHES_PER_EPOCH + rng.randrange(1, BATCHES_PER_EPOCH)  # inside epoch 1
    # With accumulation a save must fall on a window end (4, 8, 10 | 14, 18, 20).
    accum_mid = rng.choice([4, 8, 14, 18])
    configs = {
        "workers0": ({"accum": 1, "workers": 0}, [plain_mid, BATCHES_PER_EPOCH, "end:0"]),
        "workers2": ({"accum": 1, "workers": 2}, [late_mid, BATCHES_PER_EPOCH]),
        "accum4": ({"accum": 4, "workers": 0}, [accum_mid, BATCHES_PER_EPOCH, "end:0"]),
    }
    scenarios = []
    for name, (config, stops) in configs.items():
        for stop in stops:
            scenarios.append(
                {
                    "name": f"{name}-stop{stop}",
                    "config": config,
                    "stop": stop,
                    "checkpoint": str(tmp_path / f"{name}-{stop}".replace(":", "_")),
                }
            )
    return scenarios


def test_resume_in_new_process_is_bit_exact(tmp_path):
    scenarios = _scenarios(tmp_path)
    uninterrupted = {}
    for scenario in scenarios:
        key = json.dumps(scenario["config"], sort_keys=True)
        if key not in uninterrupted:
            uninterrupted[key] = train(scenario["config"])
        first = train(scenario["config"], scenario["checkpoint"], stop=scenario["stop"])
        scenario["first_seen"] = first["seen"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(scenarios))
    results_file = tmp_path / "results.pt"
    process = subprocess.run(
        [sys.executable, __file__, str(plan), str(results_file)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    resumed = torch.load(results_file)
    assert len(resumed) == len(scenarios)
    for scenario in scenarios:
        reference = uninterrupted[json.dumps(scenario["config"], sort_keys=True)]
        after = resumed[scenario["name"]]
        label = f"{scenario['name']} (stopped after {scenario['stop']})"
        done = len(scenario["first_seen"])
        assert scenario["first_seen"] == reference["seen"][:done], label
        # Exactly the samples the uninterrupted run saw after the stop, in the same order, none twice.
        assert after["seen"] == reference["seen"][done:], label
        assert after["step"] == reference["step"] == EPOCHS * BATCHES_PER_EPOCH, label
        for index, (expected, got) in enumerate(zip(reference["weights"], after["weights"], strict=True)):
            assert torch.equal(expected, got), f"{label}: parameter {index} differs by {(expected - got).abs().max()}"


def test_stop_positions_cover_the_issue(tmp_path):
    # Mid-epoch and exact epoch-boundary stops, with workers and with accumulation, are all planned.
    scenarios = _scenarios(tmp_path)
    stops = {(s["config"]["workers"], s["config"]["accum"], s["stop"]) for s in scenarios}
    assert any(w == 0 and a == 1 and isinstance(k, int) and k < BATCHES_PER_EPOCH for w, a, k in stops)
    assert (0, 1, BATCHES_PER_EPOCH) in stops and (2, 1, BATCHES_PER_EPOCH) in stops
    assert any(w == 2 and isinstance(k, int) and k > BATCHES_PER_EPOCH for w, _, k in stops)
    assert any(a == 4 and k == BATCHES_PER_EPOCH for _, a, k in stops)


def _resume_all(plan_file: str, results_file: str) -> None:
    results = {}
    for scenario in json.loads(Path(plan_file).read_text()):
        out = train(scenario["config"], scenario["checkpoint"], resume=True)
        results[scenario["name"]] = out
    torch.save(results, results_file)


if __name__ == "__main__":
    _resume_all(sys.argv[1], sys.argv[2])
    os._exit(0)  # skip interpreter teardown (worker shutdown), results are on disk
