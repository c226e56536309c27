"""The Accelerate adapter in 2 processes started by ``fabricx run`` (gloo on CPU).

Three launches: one runs this file as a script (every multi-process check below ``_checks``, then the
tutorial example uninterrupted); the other two run the example interrupted and then resumed.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "accelerate_tutorial.py")

pytestmark = pytest.mark.distributed


class _Counter:
    def __init__(self, value=0):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def _checks(out_dir: str) -> dict:
    from fabricx.compat.accelerate import (
        Accelerator,
        DataLoaderConfiguration,
        DistributedType,
        ProjectConfiguration,
    )

    report: dict = {}
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    assert accelerator.num_processes == 2 and rank == int(os.environ["RANK"])
    assert accelerator.distributed_type == DistributedType.MULTI_CPU
    assert accelerator.is_main_process == (rank == 0)

    # gather concatenates along the first dimension; scalars become one row per process
    gathered = accelerator.gather(torch.full((2, 3), float(rank)))
    assert gathered.shape == (4, 3) and gathered[:2].eq(0).all() and gathered[2:].eq(1).all()
    assert accelerator.gather(torch.tensor(rank)).tolist() == [0, 1]
    assert accelerator.reduce(torch.tensor(rank + 1.0)).item() == 3.0
    padded = accelerator.pad_across_processes(torch.ones(2 + rank))
    assert padded.shape == (3,)
    with accelerator.split_between_processes(["a", "b", "c"]) as mine:
        assert mine == (["a", "b"] if rank == 0 else ["c"])

    # gather_for_metrics: 5 samples on 2 processes; the sampler repeats sample 0 on rank 1's last batch
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(5)), batch_size=2))
    ids, names, losses = [], [], []
    for (batch,) in loader:
        ids += accelerator.gather_for_metrics(batch).tolist()
        names += accelerator.gather_for_metrics([f"s{i}" for i in batch.tolist()])
        losses.append(accelerator.gather_for_metrics(batch.float().mean()).numel())
    assert sorted(ids) == [0, 1, 2, 3, 4], ids
    assert sorted(names) == ["s0", "s1", "s2", "s3", "s4"], names
    assert accelerator.gather(torch.tensor(len(loader))).tolist() == [2, 2]
    report["ids"] = ids

    # accumulation: no gradient sync off a boundary, synced at it
    acc2 = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.arange(24, dtype=torch.float32).reshape(8, 3), torch.ones(8, 1))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, train_loader, scheduler = acc2.prepare(
        model, optimizer, DataLoader(data, batch_size=2), scheduler
    )
    synced = []
    for x, y in train_loader:
        with acc2.accumulate(model):
            acc2.backward(nn.functional.mse_loss(model(x), y))
            grads = acc2.gather(model.weight.grad.clone()[None])
            synced.append((acc2.sync_gradients, torch.equal(grads[0], grads[1])))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    assert synced == [(False, False), (True, True)], synced
    # Accelerate's convention: a prepared scheduler steps once per process for each optimizer step
    assert scheduler.last_epoch == 2 and scheduler.get_last_lr() == [0.025]
    weights = acc2.gather(acc2.unwrap_model(model).weight.detach().clone()[None])
    assert torch.equal(weights[0], weights[1])

    # save_state / load_state with automatic names, retention and per-process loader positions
    project = os.path.join(out_dir, "project")
    config = ProjectConfiguration(project, automatic_checkpoint_naming=True, total_limit=2)
    stateful = DataLoaderConfiguration(use_stateful_dataloader=True)
    acc3 = Accelerator(cpu=True, project_config=config, dataloader_config=stateful)
    counter = _Counter()
    acc3.register_for_checkpointing(counter)
    shuffled = acc3.prepare(DataLoader(TensorDataset(torch.arange(20)), batch_size=2, shuffle=True))
    iterator = iter(shuffled)
    names = []
    for value in range(3):
        next(iterator)
        counter.value = value
        names.append(os.path.basename(acc3.save_state()))
    assert names == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    rest = [b.tolist() for (b,) in iterator]
    acc3.wait_for_everyone()
    assert sorted(os.listdir(os.path.join(project, "checkpoints"))) == ["checkpoint_1", "checkpoint_2"]

    config4 = ProjectConfiguration(project, automatic_checkpoint_naming=True, total_limit=2)
    acc4 = Accelerator(cpu=True, project_config=config4, dataloader_config=stateful)
    restored = _Counter(-1)
    acc4.register_for_checkpointing(restored)
    shuffled4 = acc4.prepare(DataLoader(TensorDataset(torch.arange(20)), batch_size=2, shuffle=True))
    assert acc4.load_state().endswith("checkpoint_2")
    assert restored.value == 2 and shuffled4.batches_consumed == 3
    assert [b.tolist() for (b,) in shuffled4] == rest
    assert os.path.basename(acc4.save_state()) == "checkpoint_3"

    # save_model: the main process writes the full weights once
    export = os.path.join(out_dir, "export")
    acc2.save_model(model, export)
    if rank == 0:
        stored = load_file(os.path.join(export, "model.safetensors"))
        assert torch.equal(stored["weight"], acc2.unwrap_model(model).weight.detach())
    return report


def _worker() -> None:
    out_dir, example_project = sys.argv[1], sys.argv[2]
    report = _checks(out_dir)
    with open(os.path.join(out_dir, f"rank_{os.environ['RANK']}.json"), "w") as handle:
        json.dump(report, handle)
    sys.argv = [EXAMPLE, "--project-dir", example_project]
    runpy.run_path(EXAMPLE, run_name="__main__")


def _launch(*args: str) -> str:
    command = [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", "2", *args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    return result.stdout


def test_accelerator_in_two_processes(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    _launch(os.path.abspath(__file__), str(tmp_path), str(full))
    reports = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
    assert reports[0]["ids"] == reports[1]["ids"]

    assert "stopping early after step 7" in _launch(EXAMPLE, "--project-dir", str(split), "--stop-after", "7")
    out = _launch(EXAMPLE, "--project-dir", str(split), "--resume")
    assert "resumed at epoch 1, step 6" in out and "finished: 15 optimizer steps" in out
    a = load_file(full / "model" / "model.safetensors")
    b = load_file(split / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert sorted(os.listdir(split / "checkpoints")) == ["checkpoint_3", "checkpoint_4"]


if __name__ == "__main__":
    _worker()
