"""DataLoader worker processes end when the loop that read them is done, not at some later garbage collection.

A set-up loader that still holds its iterator keeps that iterator's worker processes. If a reference cycle keeps
the loader alive, only a garbage collection frees it, and there torch waits 5 s for each worker (the collector
has closed the queues the stop message goes through) before it kills them: a stall at a random later point of
the user's program. So: a loop of one's own that breaks out of a pass and drops the loader frees its workers at
once (no cycle between a loader and the accumulation state), `FabricDataLoader.shutdown_workers()` ends them on
request, and the Trainer ends them when `fit`/`validate`/`test`/`predict` returns, as Lightning does, keeping
the exact position for a checkpoint written afterwards.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.train import Trainer, TrainModule


@contextmanager
def _no_garbage_collection() -> Iterator[None]:
    """What ends the workers must not be a collection that happens to run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _new_children(before: set) -> list:
    return [child for child in multiprocessing.active_children() if child not in before]


def _dataset(samples: int = 64) -> TensorDataset:
    x = torch.arange(samples, dtype=torch.float32).unsqueeze(1)
    return TensorDataset(x, x * 0.5)


def _loader(persistent: bool = False, shuffle: bool = True, samples: int = 64) -> DataLoader:
    return DataLoader(
        _dataset(samples), batch_size=4, shuffle=shuffle, num_workers=2, persistent_workers=persistent,
        generator=torch.Generator().manual_seed(3),
    )


def _break_out_of_a_pass(stop: int) -> list[list[float]]:
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=2)
    loader = fabric.setup_dataloaders(_loader())
    seen = []
    for step, (x, _) in enumerate(loader):
        seen.append(x.flatten().tolist())
        if step == stop:
            break
    return seen


def test_a_loop_that_breaks_out_and_drops_its_loader_frees_the_workers_at_once() -> None:
    before = set(multiprocessing.active_children())
    with _no_garbage_collection():
        assert len(_break_out_of_a_pass(stop=2)) == 3
        assert _new_children(before) == []


@pytest.mark.parametrize("persistent", [False, True])
def test_shutdown_workers_ends_them_and_keeps_the_exact_position(persistent: bool) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    expected = [x.flatten().tolist() for x, _ in fabric.setup_dataloaders(_loader(persistent))]

    before = set(multiprocessing.active_children())
    with _no_garbage_collection():
        loader = fabric.setup_dataloaders(_loader(persistent))
        iterator = iter(loader)
        consumed = [next(iterator)[0].flatten().tolist() for _ in range(5)]
        del iterator
        state = loader.state_dict()
        assert len(_new_children(before)) == 2
        loader.shutdown_workers()
        assert _new_children(before) == []
        parked = loader.state_dict()
        assert parked.keys() == state.keys() and parked["batches_consumed"] == state["batches_consumed"] == 5

    resumed = fabric.setup_dataloaders(_loader(persistent))
    torch.manual_seed(999)  # the saved state decides the order, not what the process drew since
    resumed.load_state_dict(parked)
    assert consumed + [x.flatten().tolist() for x, _ in resumed] == expected
    # The loader that shut its workers down starts its next pass as it would have: the next epoch, whole.
    assert len(list(loader)) == len(expected)


class _Recorder(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[float]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(x.flatten().tolist())
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(root: Path, **flags) -> Trainer:
    return Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, num_sanity_val_steps=0, **flags,
    )


@pytest.mark.parametrize("persistent", [False, True])
def test_each_trainer_entry_point_ends_its_loaders_workers_when_it_returns(tmp_path: Path, persistent: bool) -> None:
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2,
                       limit_predict_batches=2)
    module = _Recorder()
    before = set(multiprocessing.active_children())
    with _no_garbage_collection():
        trainer.fit(module, _loader(persistent), _loader(persistent, shuffle=False))
        assert _new_children(before) == []
        trainer.validate(module, _loader(persistent, shuffle=False))
        assert _new_children(before) == []
        trainer.test(module, _loader(persistent, shuffle=False))
        assert _new_children(before) == []
        trainer.predict(module, _loader(persistent, shuffle=False))
        assert _new_children(before) == []


def test_a_checkpoint_written_after_fit_returns_still_resumes_at_the_next_unseen_batch(tmp_path: Path) -> None:
    uninterrupted = _Recorder()
    _trainer(tmp_path / "whole", max_steps=10).fit(uninterrupted, _loader(samples=32))

    first = _Recorder()
    trainer = _trainer(tmp_path / "first", max_steps=3)
    trainer.fit(first, _loader(samples=32))  # stops inside the first epoch; its workers end here
    trainer.save_checkpoint(tmp_path / "after_fit.ckpt")

    resumed = _Recorder()
    _trainer(tmp_path / "second", max_steps=10).fit(resumed, _loader(samples=32), ckpt_path=tmp_path / "after_fit.ckpt")
    assert first.seen + resumed.seen == uninterrupted.seen
    for name, value in uninterrupted.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name
