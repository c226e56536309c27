"""A fit resumed from a checkpoint written inside its validation, `dataloader_iter` steps, and the loader helpers
Lightning's tests import (`has_len_all_ranks`), each checked against Lightning where Lightning's behaviour is ours."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, TensorDataset

import fabricx.train as fx
from fabricx.callbacks import OnExceptionCheckpoint


class _Crash(Exception):
    pass


def _data(samples: int, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(samples, 2, generator=generator)), batch_size=1)


def _crashing_module(base: type, crash_at: tuple[int, int] | None, seen: list[tuple[int, int]]) -> torch.nn.Module:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            if (dataloader_idx, batch_idx) == crash_at:
                raise _Crash
            seen.append((dataloader_idx, batch_idx))
            self.log("val_loss", self.layer(batch[0]).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module()


def _crash_then_resume(trainer_class: type, module_class: type, callback_class: type, folder) -> tuple[dict, list]:
    """Crash in the second validation loader's second batch, resume from the exception checkpoint."""
    flags = dict(default_root_dir=folder, max_epochs=1, val_check_interval=0.5, logger=False,
                 enable_progress_bar=False, enable_model_summary=False)
    seen: list[tuple[int, int]] = []
    trainer = trainer_class(**flags, num_sanity_val_steps=0, callbacks=[callback_class(folder)])
    with pytest.raises(_Crash):
        trainer.fit(_crashing_module(module_class, (1, 1), seen), _data(4), [_data(3, 1), _data(3, 2)])
    seen.clear()
    trainer = trainer_class(**flags)
    trainer.fit(_crashing_module(module_class, None, seen), _data(4), [_data(3, 1), _data(3, 2)],
                ckpt_path=str(folder / "on_exception.ckpt"))
    loops = trainer.fit_loop.state_dict()
    counters = {key: value for key, value in loops.items() if key.endswith("progress")}
    return counters, seen


def test_a_fit_resumed_inside_its_validation_counts_as_lightnings_and_validates_everything_again(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import OnExceptionCheckpoint as LightningOnException

    theirs, _ = _crash_then_resume(pl.Trainer, pl.LightningModule, LightningOnException, tmp_path / "lightning")
    ours, seen = _crash_then_resume(fx.Trainer, fx.TrainModule, OnExceptionCheckpoint, tmp_path / "fabricx")
    assert ours == theirs
    assert theirs["epoch_loop.val_loop.batch_progress"]["total"]["ready"] == 13  # 2 passes of 6, 1 interrupted
    # The interrupted validation ran again from its start (Lightning runs only as many batches as were left,
    # from the first loader's start), then the second validation of the epoch.
    every_batch = [(loader, batch) for loader in (0, 1) for batch in range(3)]
    assert seen == every_batch + every_batch


def _iter_module(base: type, fetched: list) -> torch.nn.Module:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, dataloader_iter):
            # Two batches per step: the step decides how much it reads.
            (first, index, _), (second, _, _) = next(dataloader_iter), next(dataloader_iter)
            fetched.append(("train", index))
            return self.layer(torch.cat([first[0], second[0]])).sum()

        def validation_step(self, dataloader_iter):
            _, batch_idx, dataloader_idx = next(dataloader_iter)
            fetched.append(("val", batch_idx, dataloader_idx))

        def predict_step(self, dataloader_iter):
            _, batch_idx, dataloader_idx = next(dataloader_iter)
            return batch_idx, dataloader_idx

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module()


def _iter_run(trainer_class: type, module_class: type, folder) -> tuple[list, int, list, list[torch.Tensor]]:
    fetched: list = []
    trainer = trainer_class(default_root_dir=folder, max_epochs=1, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0)
    torch.manual_seed(0)
    module = _iter_module(module_class, fetched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the experimental-signature warning, given by both
        trainer.fit(module, _data(6), [_data(2, 1), _data(1, 2)])
        predictions = trainer.predict(module, [_data(2, 1), _data(1, 2)])
    return fetched, trainer.global_step, predictions, [p.detach().clone() for p in module.parameters()]


def test_dataloader_iter_steps_fetch_their_own_batches_as_in_lightning(tmp_path):
    import lightning.pytorch as pl

    theirs = _iter_run(pl.Trainer, pl.LightningModule, tmp_path / "lightning")
    ours = _iter_run(fx.Trainer, fx.TrainModule, tmp_path / "fabricx")
    assert ours[:3] == theirs[:3]
    assert ours[1] == 3  # six batches, two per step
    for mine, lightning in zip(ours[3], theirs[3], strict=True):
        torch.testing.assert_close(mine, lightning, rtol=0, atol=0)


def test_a_dataloader_iter_step_that_finds_the_data_used_up_ends_the_epoch():
    steps: list[int] = []

    class Module(fx.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, dataloader_iter):
            batch, batch_idx, _ = next(dataloader_iter)  # the fourth step finds nothing left
            steps.append(batch_idx)
            return self.layer(batch.float().view(1, 1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = fx.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), (torch.tensor([value]) for value in range(3)))
    assert steps == [0, 1, 2]  # a generator: its second epoch has nothing
    assert trainer.global_step == 3


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class _Numbers(IterableDataset):
    """No length: the Trainer learns that an epoch ended when its iterator runs out."""

    def __iter__(self):
        return iter(torch.arange(4.0).view(4, 1))


def _stream_fit(folder, crash_in_epoch: int | None, ckpt_path: str | None = None) -> tuple[list, list, torch.Tensor]:
    trained: list[tuple[int, float]] = []
    validated: list[tuple[int, int]] = []

    class Module(fx.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            trained.append((self.current_epoch, batch.item()))
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx):
            if self.current_epoch == crash_in_epoch and batch_idx == 1:
                raise _Crash
            validated.append((self.current_epoch, batch_idx))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    module = Module()
    trainer = fx.Trainer(default_root_dir=folder, max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[OnExceptionCheckpoint(folder)])
    loaders = (DataLoader(_Numbers(), batch_size=1), DataLoader(_Numbers(), batch_size=2))
    if crash_in_epoch is None:
        trainer.fit(module, *loaders, ckpt_path=ckpt_path)
    else:
        with pytest.raises(_Crash):
            trainer.fit(module, *loaders)
    return trained, validated, module.layer.weight.detach().clone()


def test_a_fit_resumed_inside_the_validation_after_a_loader_without_length_ran_out_goes_on_with_the_next_epoch(
    tmp_path,
):
    """The epoch-end validation of a loader without a length runs after its last batch (its end is known then): a
    checkpoint written inside it resumes with that validation, whole, then the next epoch; the stopped epoch's data
    is not read again."""
    straight_trained, straight_validated, straight_weight = _stream_fit(tmp_path / "straight", None)
    assert [epoch for epoch, _ in straight_trained] == [0] * 4 + [1] * 4
    first_trained, _, _ = _stream_fit(tmp_path / "stopped", crash_in_epoch=0)
    resumed_trained, resumed_validated, resumed_weight = _stream_fit(
        tmp_path / "resumed", None, ckpt_path=str(tmp_path / "stopped" / "on_exception.ckpt")
    )
    assert first_trained + resumed_trained == straight_trained
    assert resumed_validated == straight_validated == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert torch.equal(resumed_weight, straight_weight)


def test_has_len_all_ranks_tells_sized_loaders_and_warns_about_empty_ones():
    from lightning.pytorch.utilities.data import has_len_all_ranks as lightning_has_len

    trainer = fx.Trainer(logger=False, enable_progress_bar=False)
    sized = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)
    assert fx.has_len_all_ranks(sized, trainer.strategy) is True
    assert fx.has_len_all_ranks(DataLoader(_Stream()), trainer.strategy) is False
    assert fx.has_len_all_ranks(itertools.count(), trainer.strategy) is False
    empty = DataLoader(TensorDataset(torch.zeros(0, 1)))
    with pytest.warns(UserWarning, match="across ranks is zero"):
        assert fx.has_len_all_ranks(empty, trainer.strategy) is True
    with pytest.warns(UserWarning, match="across ranks is zero"):
        lightning_has_len(empty, _LightningSingleDevice())


class _LightningSingleDevice:
    """What Lightning's `has_len_all_ranks` reads of a one-process strategy."""

    root_device = torch.device("cpu")

    def reduce(self, tensor, reduce_op="sum"):
        return tensor


def test_a_random_sampler_given_its_own_set_epoch_is_kept_and_told_each_epoch():
    dataset = TensorDataset(torch.zeros(4, 1))
    sampler = RandomSampler(dataset)
    epochs: list[int] = []
    sampler.set_epoch = epochs.append  # type: ignore[attr-defined]

    class Module(fx.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = fx.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False)
    trainer.fit(Module(), DataLoader(dataset, sampler=sampler, batch_size=2))
    assert epochs == [0, 1, 2]


def _accumulating_iter_run(trainer_class: type, module_class: type, samples: int) -> tuple[list[int], list]:
    steps_at: list[int] = []

    class Module(module_class):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, dataloader_iter):
            batch, _, _ = next(dataloader_iter)
            return self.layer(batch[0]).pow(2).sum()

        def optimizer_step(self, *args, **kwargs):
            steps_at.append(self.trainer.fit_loop.epoch_loop.batch_progress.current.ready)
            return super().optimizer_step(*args, **kwargs)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    module = Module()
    trainer = trainer_class(max_epochs=2, accumulate_grad_batches=3, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, _data(samples))
    return steps_at, [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("samples", [6, 7])
def test_dataloader_iter_steps_accumulate_in_lightnings_windows(samples):
    """The window's end is known although the step fetches inside it; with whole windows the weights are
    Lightning's bit for bit (a shorter last window is scaled by its own length: a deliberate difference)."""
    import lightning.pytorch as pl

    theirs = _accumulating_iter_run(pl.Trainer, pl.LightningModule, samples)
    ours = _accumulating_iter_run(fx.Trainer, fx.TrainModule, samples)
    assert ours[0] == theirs[0] == ([3, 6] * 2 if samples == 6 else [3, 6, 7] * 2)
    if samples == 6:
        for mine, lightning in zip(ours[1], theirs[1], strict=True):
            torch.testing.assert_close(mine, lightning, rtol=0, atol=0)


def _reloading_fit(folder, crash_at: tuple[int, int] | None, ckpt_path: str | None = None) -> list[tuple[int, list]]:
    """A fit whose training loader is built again every epoch (`reload_dataloaders_every_n_epochs=1`); the samples
    of each batch, by epoch. ``crash_at``: (epoch, batch) after which the run raises."""
    trained: list[tuple[int, list]] = []

    class Module(fx.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.arange(8.0).view(8, 1)), batch_size=2, shuffle=True)

        def training_step(self, batch, batch_idx):
            trained.append((self.current_epoch, batch[0].flatten().tolist()))
            return self.layer(batch[0]).sum()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if (self.current_epoch, batch_idx) == crash_at:
                raise _Crash

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    trainer = fx.Trainer(default_root_dir=folder, max_epochs=3, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, reload_dataloaders_every_n_epochs=1,
                         callbacks=[OnExceptionCheckpoint(folder)])
    if crash_at is None:
        trainer.fit(Module(), ckpt_path=ckpt_path)
    else:
        with pytest.raises(_Crash):
            trainer.fit(Module())
    return trained


def test_a_fit_resumed_mid_epoch_keeps_the_position_of_a_loader_built_again_every_epoch(tmp_path):
    """The loader built for the resume holds the stopped epoch's position; building it again at that epoch's start
    (the reload it is due) would read the epoch from its start."""
    straight = _reloading_fit(tmp_path / "straight", None)
    stopped = _reloading_fit(tmp_path / "stopped", crash_at=(1, 1))
    resumed = _reloading_fit(tmp_path / "resumed", None, ckpt_path=str(tmp_path / "stopped" / "on_exception.ckpt"))
    assert stopped + resumed == straight
