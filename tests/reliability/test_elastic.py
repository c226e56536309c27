"""Elastic restarts: under ``fabricx run --max-restarts 1`` (torchrun's elastic agent) a worker killed
with SIGKILL makes the agent restart the job, which resumes from the latest complete checkpoint and ends
with the weights of an uninterrupted run.

``fabricx run`` selects the c10d rendezvous with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` when restarts
are allowed: with a store shared across restarts the restarted workers can read the previous attempt's
gloo addresses and fail to connect (pytorch/pytorch#135712).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fabricx.checkpoint import CheckpointManager
from fabricx.environments.local import find_free_port

JOB = r"""
import json, os, signal, sys
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.environments.local import find_free_port
from fabricx.strategies import DDPStrategy

out = Path(sys.argv[1])
TOTAL, EVERY, DIE_AT = 20, 4, 10
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60))
fabric.launch()
torch.set_num_threads(1)


def build():
    fabric.seed_everything(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1, generator=g))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4, shuffle=True))
    return {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}


def train(state, manager=None):
    model, optimizer = state["model"], state["optimizer"]
    while state["step"] < TOTAL:
        for x, y in state["loader"]:
            fabric.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            state["step"] += 1
            if manager is not None:
                if state["step"] % EVERY == 0:
                    fabric.save_checkpoint(manager, state)
                if attempt == 0 and state["step"] == DIE_AT and fabric.global_rank == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
            if state["step"] >= TOTAL:
                break


manager = CheckpointManager(out / "project", total_limit=2)
state = build()
resumed_from = fabric.load_latest(manager, state)
with open(out / f"attempts_rank{fabric.global_rank}.jsonl", "a") as log:
    log.write(json.dumps({"attempt": attempt, "resumed_from": str(resumed_from), "step": state["step"]}) + "\n")
train(state, manager)
reference = build()
train(reference)
if fabric.is_global_zero:
    torch.save({k: v.detach().clone() for k, v in state["model"].state_dict().items()}, out / "resumed.pt")
    torch.save({k: v.detach().clone() for k, v in reference["model"].state_dict().items()}, out / "reference.pt")
"""


@pytest.mark.distributed
def test_killed_worker_is_restarted_and_resumes_from_the_latest_checkpoint(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "fabricx", "run", "--max-restarts", "1", "--accelerator", "cpu"]
    command += ["--devices", "2", "--main-port", str(find_free_port()), str(script), str(out)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    # The agent reports the failure (the killed rank, or rank 0 whose collective broke first).
    assert "failed (exitcode:" in log, log

    manager = CheckpointManager(out / "project", total_limit=2)
    for rank in (0, 1):
        lines = (out / f"attempts_rank{rank}.jsonl").read_text().splitlines()
        attempts = [json.loads(line) for line in lines]
        assert attempts[0] == {"attempt": 0, "resumed_from": "None", "step": 0}
        # Saved at steps 4 and 8 before the kill at step 10: the restart resumes from step 8.
        assert attempts[1] == {"attempt": 1, "resumed_from": str(manager.path_for(1)), "step": 8}
        assert len(attempts) == 2
    assert len(manager.list_complete()) == 2, "retention kept the last two"

    resumed = torch.load(out / "resumed.pt", weights_only=True)
    reference = torch.load(out / "reference.pt", weights_only=True)
    for key in reference:
        assert torch.equal(resumed[key], reference[key]), f"{key} differs from the uninterrupted run"
