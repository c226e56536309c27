"""Asynchronous saves: host staging, background write, commit only when every rank is durable, waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.background import AsyncSave, stage_to_host
from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager
from fabricx.train import TrainModule
from fabricx.utilities.exceptions import CheckpointError


def _setup(width: int = 64) -> tuple[Fabric, Any, Any]:
    fabric = Fabric(accelerator="cpu")
    model = nn.Sequential(nn.Linear(width, width), nn.Linear(width, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.ones(2, width)).sum().backward()
    optimizer.step()
    return fabric, model, optimizer


# ------------------------------------------------------------------------------------------ staging


def test_staging_copies_tensors_and_keeps_sharing_and_metadata() -> None:
    linear = nn.Linear(3, 3)
    state_dict = linear.state_dict()
    base = torch.arange(12.0)
    array = np.arange(4)
    state = {
        "model": state_dict,
        "tied": [state_dict["weight"], state_dict["weight"]],
        "views": (base[2:6], base[4:10].view(2, 3)),
        "plain": {"step": 3, "name": "x", "array": array, "raw": bytearray(b"ab")},
    }
    staged = stage_to_host(state)
    assert isinstance(staged["model"], OrderedDict) and staged["model"]._metadata == state_dict._metadata
    # Copies, not references: changing the originals does not change the staged state.
    with torch.no_grad():
        linear.weight.fill_(5.0)
    base.fill_(-1.0)
    array[:] = 7
    assert not torch.equal(staged["model"]["weight"], linear.weight)
    assert staged["views"][0].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert staged["plain"]["array"].tolist() == [0, 1, 2, 3] and staged["plain"]["raw"] == b"ab"
    # Memory shared before is shared after (tied weights stay tied, overlapping views overlap).
    assert staged["tied"][0] is staged["tied"][1] is staged["model"]["weight"]
    first, second = staged["views"]
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    first[3] = 100.0  # element 5 of the base, which is also the second view's second element
    assert second[0, 1].item() == 100.0


def test_staging_refuses_unsaveable_values_before_anything_runs(tmp_path: Path) -> None:
    fabric, model, _ = _setup()
    with pytest.raises(CheckpointError, match="without pickling"):
        fabric.save(tmp_path / "ckpt", {"model": model, "bad": object()}, async_save=True)
    assert fabric.checkpointer.pending is None or fabric.checkpointer.pending.done()
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------------- one process


def test_async_save_writes_the_state_of_the_call_while_training_goes_on(tmp_path: Path) -> None:
    fabric, model, optimizer = _setup(width=256)
    expected = {name: value.clone() for name, value in model.state_dict().items()}
    moments = [value["exp_avg"].clone() for value in optimizer.state.values()]
    handle = fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer, "step": 7}, async_save=True)
    assert isinstance(handle, AsyncSave)
    for _ in range(2):  # the next training steps change weights and moments in place
        fabric.backward(model(torch.randn(4, 256)).square().sum())
        optimizer.step()  # waits until the save has copied what it changes
        optimizer.zero_grad()
    assert not torch.equal(model.state_dict()["0.weight"], expected["0.weight"])
    assert handle.step_wait_s >= 0.0 and handle.wait_staged()
    assert handle.wait() == os.fspath(tmp_path / "ckpt") and handle.done()
    loaded = read_checkpoint(tmp_path / "ckpt").shared
    assert loaded["step"] == 7
    for name, value in expected.items():
        assert torch.equal(loaded["model"][name], value), name
    saved_moments = [entry["exp_avg"] for entry in loaded["optimizer"]["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(saved_moments, moments, strict=True))
    # ... and it loads back through fabric, like a synchronous checkpoint.
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(tmp_path / "ckpt", state)
    assert state["step"] == 7 and torch.equal(model.state_dict()["0.weight"], expected["0.weight"])


def _hold_background_copy(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The background copy of parameters and optimizer state starts only once the returned event is set."""
    from fabricx.checkpoint import background

    go = threading.Event()
    original = background._Stager.finish_deferred

    def held(self: Any) -> None:
        if self.pending:
            assert go.wait(60)
        original(self)

    monkeypatch.setattr(background._Stager, "finish_deferred", held)
    return go


def test_the_next_step_waits_for_the_background_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fabric, model, optimizer = _setup(width=256)
    expected = model.state_dict()["0.weight"].clone()
    go = _hold_background_copy(monkeypatch)
    handle = fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer}, async_save=True)
    fabric.backward(model(torch.randn(4, 256)).square().sum())  # forward/backward run meanwhile
    assert not handle.wait_staged(timeout=0.05)
    threading.Timer(0.3, go.set).start()
    optimizer.step()  # held until the copy is done
    assert handle.step_wait_s >= 0.25 and handle.wait_staged(timeout=0)
    handle.wait()
    assert torch.equal(read_checkpoint(tmp_path / "ckpt").shared["model"]["0.weight"], expected)
    assert not torch.equal(model.state_dict()["0.weight"], expected)


def test_in_place_changes_outside_the_step_fail_the_save_or_wait_for_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabricx.checkpoint.step_guard import defer_optimizer_tensors

    fabric, model, optimizer = _setup(width=256)
    state = {"model": model, "optimizer": optimizer}
    fabric.save(tmp_path / "ckpt", state)
    committed = read_checkpoint(tmp_path / "ckpt").shared["model"]["0.weight"].clone()
    # A weight changed by hand (not by optimizer.step()) before the background copy: refused, never mixed.
    go = _hold_background_copy(monkeypatch)
    handle = fabric.save(tmp_path / "ckpt", state, async_save=True)
    with torch.no_grad():
        model.module[0].weight.add_(1.0)
    go.set()
    with pytest.raises(CheckpointError, match=r"state\['model'\]\['0.weight'\] changed in place"):
        handle.wait()
    assert torch.equal(read_checkpoint(tmp_path / "ckpt").shared["model"]["0.weight"], committed)
    # After wait_staged() the state may change freely; without deferral the call copies everything itself.
    for defer in (True, False):
        defer_optimizer_tensors(defer)
        try:
            expected = model.state_dict()["0.weight"].clone()
            handle = fabric.save(tmp_path / f"ckpt_{defer}", state, async_save=True)
            assert handle.wait_staged(timeout=60)
            with torch.no_grad():
                model.module[0].weight.add_(1.0)
            handle.wait()
            assert torch.equal(read_checkpoint(tmp_path / f"ckpt_{defer}").shared["model"]["0.weight"], expected)
        finally:
            defer_optimizer_tensors(True)


def test_next_save_and_load_wait_for_the_unfinished_one(tmp_path: Path) -> None:
    fabric, model, _ = _setup(width=256)
    first = fabric.save(tmp_path / "a", {"model": model, "step": 1}, async_save=True)
    fabric.save(tmp_path / "b", {"model": model, "step": 2})  # synchronous: waits first
    assert first is not None and first.done() and fabric.checkpointer.pending is None
    second = fabric.save(tmp_path / "a", {"model": model, "step": 3}, async_save=True)
    state = {"model": model, "step": 0}
    fabric.load(tmp_path / "a", state)  # loading the path being written gets the new checkpoint
    assert second is not None and second.done() and state["step"] == 3


def test_background_failure_is_raised_and_the_previous_checkpoint_stays(tmp_path: Path) -> None:
    fabric, model, _ = _setup()
    fabric.save(tmp_path / "ckpt", {"model": model, "step": 1})
    # A tuple key passes staging but the code-free format refuses it while writing, in the background.
    handle = fabric.save(tmp_path / "ckpt", {"model": model, "step": 2, "bad": {(1, 2): 3}}, async_save=True)
    assert handle is not None
    with pytest.raises(CheckpointError, match="background save of .* failed.*key"):
        handle.wait()
    assert read_checkpoint(tmp_path / "ckpt").shared["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # the temporary copy was removed
    # The failure was reported once; the next save goes ahead.
    fabric.save(tmp_path / "ckpt", {"model": model, "step": 3}, async_save=True).wait()  # type: ignore[union-attr]
    assert read_checkpoint(tmp_path / "ckpt").shared["step"] == 3


def test_unwaited_failure_surfaces_at_the_next_save(tmp_path: Path) -> None:
    fabric, model, _ = _setup()
    fabric.save(tmp_path / "x", {"bad": {(1,): 1}}, async_save=True)
    with pytest.raises(CheckpointError, match="background save of .*x failed"):
        fabric.save(tmp_path / "y", {"model": model})
    assert not (tmp_path / "y").exists()


def test_manager_applies_retention_only_after_the_commit(tmp_path: Path) -> None:
    fabric, model, _ = _setup()
    manager = CheckpointManager(tmp_path, total_limit=1)
    seen: list[tuple[list[str], bool]] = []
    original = manager.apply_retention

    def watched() -> list[Path]:
        newest = manager.path_for(manager.iteration - 1)
        seen.append(([p.name for p in manager.list_complete()], (newest / "meta.json").is_file()))
        return original()

    manager.apply_retention = watched  # type: ignore[method-assign]
    for step in range(3):
        fabric.save_checkpoint(manager, {"model": model, "step": step}, async_save=True)
    pending = fabric.checkpointer.pending
    assert pending is not None
    pending.wait()
    # Every retention pass ran with the new checkpoint already committed next to the older one.
    assert seen == [(["checkpoint_0"], True), (["checkpoint_0", "checkpoint_1"], True),
                    (["checkpoint_1", "checkpoint_2"], True)]
    assert [p.name for p in manager.list_complete()] == ["checkpoint_2"]
    assert read_checkpoint(manager.latest()).shared["step"] == 2  # type: ignore[arg-type]


def test_commit_callback_runs_at_once_when_already_committed(tmp_path: Path) -> None:
    fabric, model, _ = _setup()
    handle = fabric.save(tmp_path / "c", {"model": model}, async_save=True)
    assert handle is not None
    handle.wait()
    calls: list[int] = []
    handle.add_commit_callback(lambda: calls.append(threading.get_ident()))
    assert calls == [threading.get_ident()]


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from fabricx import Fabric
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup_module(nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)]))
    fabric.save(sys.argv[1], {"model": model, "step": 11}, async_save=True)
    sys.exit(0)  # no wait: the end of the process must let the background write finish and commit
    """
)


def test_process_end_waits_for_the_background_save(tmp_path: Path) -> None:
    target = tmp_path / "at_exit"
    done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(target)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    loaded = read_checkpoint(target).shared
    assert loaded["step"] == 11 and len(loaded["model"]) == 16


# ------------------------------------------------------------------------------- several processes


def _two_ranks(fabric: Fabric, root: str) -> dict[str, Any]:
    """FSDP2 on two ranks: sharded entries go through DCP async_save, plain ones through the staged copy."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4))
    model, optimizer = fabric.setup(module, torch.optim.Adam(module.parameters(), lr=0.1))
    fabric.backward(model(torch.ones(2, 16)).sum())
    optimizer.step()  # Adam's moments exist, sharded like the parameters
    rank = fabric.global_rank
    results: dict[str, Any] = {}
    # Rank 0 alone writes the shared entries: its failure must stop rank 1 from committing too.
    bad = {"bad": {(1,): 1}} if rank == 0 else {}
    handle = fabric.save(os.path.join(root, "ckpt"), {"model": model, "step": 1, **bad}, async_save=True)
    try:
        handle.wait()
        results["failed"] = False
    except CheckpointError as error:
        results["failed"] = "failed" in str(error)
    results["after_failure"] = os.path.exists(os.path.join(root, "ckpt"))
    fabric.barrier()
    state = {"model": model, "optimizer": optimizer, "step": 2}
    fabric.save(os.path.join(root, "sync"), state)
    handle = fabric.save(os.path.join(root, "ckpt"), state, async_save=True)
    with torch.no_grad():  # training changes the local shards while the background write runs
        for parameter in model.parameters():
            parameter.fill_(-9.0)
    results["path"] = handle.wait()
    results["committed_on_return"] = os.path.isfile(os.path.join(root, "ckpt", "meta.json"))
    loaded = {name: fabric.load(os.path.join(root, name))["model"] for name in ("sync", "ckpt")}
    results["same_as_sync"] = loaded["sync"].keys() == loaded["ckpt"].keys() and all(
        torch.equal(loaded["sync"][key], loaded["ckpt"][key]) for key in loaded["sync"]
    )
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(os.path.join(root, "ckpt"), state)
    results["step"] = state["step"]
    full = fabric.strategy.get_module_state_dict(fabric.unwrap(model))  # collective; rank 0 gets the tensors
    results["restored"] = all(torch.equal(full[key], loaded["sync"][key]) for key in full)
    results["full_keys"] = len(full)
    other = fabric.broadcast(results if rank == 1 else None, src=1)  # rank 0 returns both
    return {"ranks": [results, other]}


@pytest.mark.distributed
def test_two_fsdp_ranks_commit_only_when_both_succeeded(tmp_path: Path) -> None:
    from fabricx.strategies import FSDPStrategy

    fabric = Fabric(accelerator="cpu", devices=2, strategy=FSDPStrategy(start_method="spawn", timeout=60))
    results = fabric.launch(_two_ranks, str(tmp_path))
    for rank, result in enumerate(results["ranks"]):
        assert result["failed"] is True, (rank, result)
        assert result["after_failure"] is False, (rank, result)
        assert result["committed_on_return"] and result["same_as_sync"], (rank, result)
        assert result["step"] == 2 and result["restored"], (rank, result)
    assert results["ranks"][0]["full_keys"] == 4
    meta = json.loads((tmp_path / "ckpt" / "meta.json").read_text())
    assert any(name.startswith("sharded/") and name.endswith(".distcp") for name in meta["files"]), meta["files"]


# -------------------------------------------------------------------- Trainer and Accelerate adapter


class _Scored(TrainModule):
    """A small regression whose validation logs a scripted score per epoch."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(8, 1)
        self.scores = scores

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("score", torch.tensor(self.scores[self.current_epoch]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit_with_checkpoints(root: Path, async_save: bool) -> tuple[list[str], dict[str, torch.Tensor]]:
    from torch.utils.data import DataLoader, TensorDataset

    from fabricx.callbacks import ModelCheckpoint
    from fabricx.train import Trainer

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator))
    checkpoint = ModelCheckpoint(dirpath=root, monitor="score", save_top_k=2, save_last=True, async_save=async_save)
    trainer = Trainer(accelerator="cpu", max_epochs=5, callbacks=[checkpoint], loggers=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=root)
    trainer.fit(_Scored([0.5, 0.2, 0.9, 0.1, 0.3]), DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    pending = trainer.fabric.checkpointer.pending
    assert pending is None or pending.done()  # fit returned with everything committed
    best = read_checkpoint(checkpoint.best_model_path).shared
    return sorted(p.name for p in root.iterdir()), best["state_dict"]


def test_model_checkpoint_async_keeps_the_same_checkpoints_as_sync(tmp_path: Path) -> None:
    sync_names, sync_best = _fit_with_checkpoints(tmp_path / "sync", async_save=False)
    async_names, async_best = _fit_with_checkpoints(tmp_path / "async", async_save=True)
    assert sync_names == async_names == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt", "last.ckpt"]
    assert sync_best.keys() == async_best.keys()
    assert all(torch.equal(sync_best[k], async_best[k]) for k in sync_best)


def test_accelerate_save_state_async_with_automatic_names_and_retention(tmp_path: Path) -> None:
    from fabricx.compat.accelerate import Accelerator, ProjectConfiguration

    config = ProjectConfiguration(project_dir=tmp_path, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(nn.Linear(4, 4))
    for value in range(3):
        with torch.no_grad():
            model.weight.fill_(float(value))
        accelerator.save_state(async_save=True)
        with torch.no_grad():
            model.weight.fill_(-1.0)
    accelerator.load_state()  # waits for the unfinished save, then loads the newest
    assert torch.all(model.weight == 2.0)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_1", "checkpoint_2"]
