"""Every caller that names checkpoints reserves the name through the one checkpoint manager (issue 24):
`Fabric.save_checkpoint` and the Accelerate adapter's automatic naming (`Accelerator.save_state()`) take
numbered names from `CheckpointManager.reserve`; the Trainer's `save_checkpoint` (so ModelCheckpoint's
Lightning-named files) claims its file with `claim_path`. A process killed (SIGKILL) between the
reservation and the commit leaves the previous checkpoint the latest, loadable and unchanged, and the
next job saves again.

The kill comes from inside the save: an entry whose ``state_dict()`` kills the process, which the
pipeline calls after the name was reserved and before anything is committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager

REPO = Path(__file__).resolve().parents[2]

JOB = textwrap.dedent(
    """
    import os, signal, sys, torch

    class KillOnSave:
        def state_dict(self):
            os.kill(os.getpid(), signal.SIGKILL)
        def load_state_dict(self, state):
            pass

    caller, project, value, kill = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "kill"
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, value)
    if caller == "trainer":
        from torch.utils.data import DataLoader, TensorDataset
        from fabricx.callbacks import ModelCheckpoint
        from fabricx.train import Trainer, TrainModule

        class Module(TrainModule):
            def __init__(self):
                super().__init__()
                self.layer = model

            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.0)  # the saved weight stays `value`

            def on_save_checkpoint(self, checkpoint):
                if kill:
                    os.kill(os.getpid(), signal.SIGKILL)

        callback = ModelCheckpoint(dirpath=project, filename="fixed", enable_version_counter=False)
        trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[callback], logger=False,
                          enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Module(), DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2))
        print(callback.best_model_path)
    elif caller == "fabric":
        from fabricx import Fabric

        fabric = Fabric(accelerator="cpu")
        state = {"model": model, "value": value}
        if kill:
            state["bomb"] = KillOnSave()
        print(fabric.save_checkpoint(project, state))
    else:
        from fabricx.compat.accelerate import Accelerator
        from fabricx.compat.accelerate.config import ProjectConfiguration

        config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True)
        accelerator = Accelerator(cpu=True, project_config=config)
        accelerator.project_configuration.iteration = int(sys.argv[5])
        model = accelerator.prepare(model)
        if kill:
            accelerator.register_for_checkpointing(KillOnSave())
        print(accelerator.save_state())
    """
)


def _run(caller: str, project: Path, value: float, kill: bool, iteration: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", JOB, caller, str(project), str(value), "kill" if kill else "ok", str(iteration)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def _weight(path: Path) -> torch.Tensor:
    shared = read_checkpoint(path).shared
    return shared["model"]["weight"]  # Fabric's key, and the adapter's for its first model


def test_the_trainers_claim_survives_a_kill_and_refuses_a_running_writer(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from fabricx.checkpoint.manager import claim_path
    from fabricx.train import Trainer, TrainModule
    from fabricx.utilities.exceptions import CheckpointError

    class Module(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)
            torch.nn.init.constant_(self.layer.weight, 1.0)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    project = tmp_path / "ckpts"
    target = project / "fixed.ckpt"
    trainer = Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2))
    trainer.save_checkpoint(target)
    before = target.read_bytes()
    # A job whose ModelCheckpoint writes the same name is killed inside the save (its on_save_checkpoint).
    killed = _run("trainer", project, 2.0, kill=True)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-3000:])
    # It had claimed the name (its marker is left) and committed nothing: the file is the previous one.
    assert (project / "fixed.ckpt.reserved").exists(), sorted(p.name for p in project.iterdir())
    assert target.read_bytes() == before
    assert torch.equal(torch.load(target, weights_only=True)["state_dict"]["layer.weight"], torch.full((2, 2), 1.0))
    # A running writer's claim (held through another open file, as another process's lock is) is refused.
    holder = claim_path(target)
    assert holder is not None
    try:
        with pytest.raises(CheckpointError, match="being written by another running job"):
            trainer.save_checkpoint(target)
        assert target.read_bytes() == before
    finally:
        holder.release()
    # The dead claim does not block the next save, which replaces the file and gives the name up.
    trainer.save_checkpoint(target, weights_only=True)
    assert "optimizer_states" not in torch.load(target, weights_only=True)
    assert sorted(p.name for p in project.iterdir()) == ["fixed.ckpt"]


@pytest.mark.parametrize("caller", ["fabric", "accelerate"])
def test_a_kill_between_reservation_and_commit_leaves_the_previous_checkpoint(tmp_path: Path, caller: str) -> None:
    project = tmp_path / "project"
    first = _run(caller, project, 1.0, kill=False)
    assert first.returncode == 0, first.stderr[-3000:]
    killed = _run(caller, project, 2.0, kill=True, iteration=1)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-3000:])
    manager = CheckpointManager(project)
    checkpoints = project / "checkpoints"
    # The killed save had claimed checkpoint_1: its reservation is on disk, its name never committed.
    assert (checkpoints / "checkpoint_1.reserved").exists(), sorted(p.name for p in checkpoints.iterdir())
    assert manager.latest() == checkpoints / "checkpoint_0"
    assert torch.equal(_weight(checkpoints / "checkpoint_0"), torch.full((2, 2), 1.0))
    # The next job takes a name again (the dead claim does not block it) and its save becomes the latest.
    again = _run(caller, project, 3.0, kill=False, iteration=1)
    assert again.returncode == 0, again.stderr[-3000:]
    latest = manager.latest()
    assert latest is not None and latest != checkpoints / "checkpoint_0"
    assert torch.equal(_weight(latest), torch.full((2, 2), 3.0))
    assert not (checkpoints / "checkpoint_1.reserved").exists() or latest.name != "checkpoint_1"
