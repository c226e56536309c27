"""When fit validates and reloads data: Lightning's rules for val_check_interval (batches, fractions, time),
check_val_every_n_epoch, reload_dataloaders_every_n_epochs and min_epochs/min_steps (cheap, in-process)."""

from __future__ import annotations

import logging
from datetime import timedelta
from unittest.mock import patch

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from fabricx.train import Trainer, TrainModule

FLAGS = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class Stream(IterableDataset):
    """Batches without a length (the end of an epoch is known only when it comes)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for _ in range(self.count):
            yield torch.randn(32, generator=generator)


class Recorder(TrainModule):
    """Records the epochs and batches at which validation ran and loaders were requested."""

    def __init__(self, train_length: int = 4, stream: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.train_length, self.stream = train_length, stream
        self.val_runs_per_epoch: list[int] = []
        self.val_at_total_batch: list[int] = []
        self.train_loads: list[int] = []
        self.val_loads: list[int] = []

    def training_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.layer(x).sum()

    def validation_step(self, batch, batch_idx):
        self.log("val", self.layer(batch[0]).sum())

    def on_train_epoch_start(self):
        self.val_runs_per_epoch.append(0)

    def on_validation_epoch_start(self):
        if not self.trainer.sanity_checking:
            self.val_runs_per_epoch[-1] += 1
            self.val_at_total_batch.append(self.trainer.progress.total_batch_idx + 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        self.train_loads.append(self.current_epoch)
        if self.stream:
            return DataLoader(Stream(self.train_length))
        return DataLoader(TensorDataset(torch.randn(self.train_length, 32)))

    def val_dataloader(self):
        if not self.trainer.sanity_checking:
            self.val_loads.append(self.current_epoch)
        return DataLoader(TensorDataset(torch.randn(4, 32)))


@pytest.mark.parametrize("denominator", [1, 3, 4])
def test_a_fraction_validates_that_many_times_per_epoch(tmp_path, denominator):
    module = Recorder(train_length=12)
    Trainer(default_root_dir=tmp_path, max_epochs=2, val_check_interval=1 / denominator, **FLAGS).fit(module)
    assert module.val_runs_per_epoch == [denominator, denominator]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_an_int_interval_without_epoch_gating_counts_batches_over_epochs(tmp_path, stream, accumulate):
    module = Recorder(train_length=4 if not stream else 112, stream=stream)
    trainer = Trainer(
        default_root_dir=tmp_path,
        limit_val_batches=1,
        max_steps=12 // accumulate,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        accumulate_grad_batches=accumulate,
        **FLAGS,
    )
    trainer.fit(module)
    assert trainer.global_step == 12 // accumulate
    assert trainer.current_epoch == (1 if stream else 3)
    assert module.val_at_total_batch == [3, 6, 9, 12]


def test_an_int_interval_longer_than_the_epoch_is_refused(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, limit_train_batches=2, val_check_interval=3, **FLAGS)
    with pytest.raises(ValueError, match="must be less than or equal to the number of the training batches"):
        trainer.fit(Recorder())


def test_unit_values_are_explained(caplog):
    with caplog.at_level(logging.INFO):
        Trainer(val_check_interval=1, limit_train_batches=1.0, **FLAGS)
    assert "`Trainer(val_check_interval=1)` was configured so validation will run after every batch." in caplog.text
    assert "`Trainer(limit_train_batches=1.0)` was configured so 100% of the batches per epoch" in caplog.text


@pytest.mark.parametrize("interval", ["00:00:00:02", {"seconds": 2}, timedelta(seconds=2)])
def test_a_duration_validates_when_that_much_time_passed(tmp_path, interval):
    clock = iter(range(0, 1000, 2))  # every read of the clock moves it on by 2 s
    with patch("time.monotonic", side_effect=lambda: next(clock)):
        module = Recorder(train_length=8)
        trainer = Trainer(
            default_root_dir=tmp_path,
            max_epochs=1,
            max_steps=5,
            limit_val_batches=1,
            val_check_interval=interval,
            **FLAGS,
        )
        trainer.fit(module)
    assert trainer.val_check_seconds == 2.0
    assert module.val_runs_per_epoch == [5]


@pytest.mark.parametrize(
    ("every_n_epoch", "interval", "epoch_length", "expected"),
    [
        (None, "00:00:00:04", 2, [0, 1, 0, 1, 0]),
        (1, "00:00:00:06", 8, [1, 1, 2, 1, 1]),
        (2, "00:00:00:06", 9, [0, 2, 0, 2, 0]),
        (2, "00:00:00:20", 9, [0, 0, 0, 1, 0]),
    ],
)
def test_a_duration_is_gated_by_check_val_every_n_epoch(tmp_path, every_n_epoch, interval, epoch_length, expected):
    import time

    clock = iter(range(10_000))  # one second per read of the clock

    class Ticking(Recorder):
        def on_train_batch_end(self, *args):
            every = self.trainer.check_val_every_n_epoch
            if every is not None and every > 1 and (self.current_epoch + 1) % every != 0:
                time.monotonic()  # time passes in epochs that do not look at the clock

    with patch("time.monotonic", side_effect=lambda: next(clock)):
        module = Ticking(train_length=epoch_length)
        Trainer(
            default_root_dir=tmp_path,
            max_epochs=5,
            max_steps=5 * epoch_length,
            limit_val_batches=1,
            val_check_interval=interval,
            check_val_every_n_epoch=every_n_epoch,
            **FLAGS,
        ).fit(module)
    assert module.val_runs_per_epoch == expected


@pytest.mark.parametrize(
    ("sanity", "every_n_epoch", "reload_every", "train_loads", "val_loads"),
    [
        (0, 3, 4, [0, 4, 8], [2, 8]),
        (1, 3, 4, [0, 4, 8], [2, 8]),
        (0, 2, 1, list(range(10)), [1, 3, 5, 7, 9]),
        (1, 1, 2, [0, 2, 4, 6, 8], [2, 4, 6, 8]),
        (0, 5, 2, [0, 2, 4, 6, 8], [4, 9]),
    ],
)
def test_loaders_reload_when_validation_needs_them(
    tmp_path, sanity, every_n_epoch, reload_every, train_loads, val_loads
):
    module = Recorder()
    Trainer(
        default_root_dir=tmp_path,
        limit_train_batches=1,
        limit_val_batches=1,
        check_val_every_n_epoch=every_n_epoch,
        reload_dataloaders_every_n_epochs=reload_every,
        max_epochs=10,
        num_sanity_val_steps=sanity,
        **FLAGS,
    ).fit(module)
    assert module.train_loads == train_loads
    assert module.val_loads == val_loads


def test_a_stop_before_min_epochs_is_postponed_and_said_once(tmp_path, caplog):
    class StopsAtOnce(Recorder):
        def on_train_batch_end(self, *args):
            self.trainer.should_stop = True

    module = StopsAtOnce()
    trainer = Trainer(default_root_dir=tmp_path, min_epochs=3, max_epochs=10, limit_val_batches=0, **FLAGS)
    with caplog.at_level(logging.INFO):
        trainer.fit(module)
    message = "`min_epochs=3` or `min_steps=None` has not been met. Training will continue"
    assert sum(message in record.getMessage() for record in caplog.records) == 1
    assert trainer.current_epoch == 3
