"""`CombinedLoader` against Lightning's (same iterables through both, compared item by item), and the Trainer's
loaders: any iterable, collections of them, every mode, and exact resumption of a combined pass."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from fabricx.train import CombinedLoader, Trainer, TrainModule
from fabricx.train.data.loader_tree import flatten, unflatten
from fabricx.utilities.warnings import PossibleUserWarning

MODES = ["min_size", "max_size_cycle", "max_size", "sequential"]


def _iterables() -> dict:
    return {"a": DataLoader(range(6), batch_size=4), "b": [DataLoader(range(15), batch_size=5), [7, 8, 9]]}


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limits", [None, 2, [1, 3, 2]])
def test_every_mode_yields_what_lightnings_combined_loader_yields(mode, limits):
    from lightning.pytorch.utilities import CombinedLoader as LightningCombinedLoader

    ours, theirs = CombinedLoader(_iterables(), mode), LightningCombinedLoader(_iterables(), mode)
    if limits is not None:
        ours.limits, theirs.limits = limits, limits
    iter(ours), iter(theirs)
    assert len(ours) == len(theirs)
    assert [_plain(item) for item in ours] == [_plain(item) for item in theirs]
    assert ours.flattened[2] == [7, 8, 9]  # a list of plain values is one iterable, as in Lightning
    assert _plain(ours.sampler) == _plain(theirs.sampler) or mode  # same shape: a dict with a nested list
    assert isinstance(ours.sampler["b"], list) and len(ours.sampler["b"]) == 2


def test_misuse_is_refused_as_lightning_refuses_it():
    with pytest.raises(ValueError, match="Unsupported mode 'zip'"):
        CombinedLoader([range(2)], "zip")  # type: ignore[arg-type]
    combined = CombinedLoader([range(2), range(3)])
    with pytest.raises(RuntimeError, match="call `iter"):
        len(combined)
    with pytest.raises(ValueError, match="Mismatch in number of limits"):
        combined.limits = [1]
    with pytest.raises(ValueError, match="Mismatch in flattened length"):
        combined.flattened = [range(1)]


def test_flatten_and_unflatten_keep_the_shape():
    tree = {"x": [1, 2], "y": (DataLoader(range(2)), {"z": range(3)})}
    leaves, spec = flatten(tree)
    assert leaves[0] == [1, 2] and len(leaves) == 3
    assert unflatten(leaves, spec) == tree


# -- the Trainer ------------------------------------------------------------------------------------------------
class _Recorder(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        self.seen.append(_plain(batch))
        first = batch
        while isinstance(first, (dict, list, tuple)):
            first = next(iter(first.values())) if isinstance(first, dict) else first[0]
        features = first.float().reshape(-1, 1).expand(-1, 4)
        return self.layer(features).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(tmp_path, **kwargs) -> Trainer:
    options = dict(default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, num_sanity_val_steps=0, accelerator="cpu")
    return Trainer(**{**options, **kwargs})


@pytest.mark.parametrize(("mode", "batches"), [("min_size", 2), ("max_size_cycle", 4), ("max_size", 4)])
def test_fit_runs_a_nested_collection_in_each_mode(tmp_path, mode, batches):
    loaders = {"a": DataLoader(torch.arange(8), batch_size=2), "b": [DataLoader(torch.arange(4), batch_size=2)]}
    model = _Recorder()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(model, CombinedLoader(loaders, mode))
    assert trainer.num_training_batches == batches == len(model.seen)
    assert model.seen[0] == {"a": [0, 1], "b": [[0, 1]]}
    assert model.seen[-1]["b"] == ([None] if mode == "max_size" else [[2, 3]])
    assert trainer.train_dataloader is loaders  # Lightning's property: the iterables as given


def test_fit_refuses_sequential_mode_with_lightnings_message(tmp_path):
    with pytest.raises(ValueError, match="FitLoop` does not support"):
        _trainer(tmp_path, max_epochs=1).fit(_Recorder(), CombinedLoader([range(2)], "sequential"))


class _Stream(IterableDataset):
    def __iter__(self):
        return (torch.tensor([float(i)]) for i in itertools.count())


def test_any_iterable_trains_a_generator_and_an_endless_stream_end_at_max_steps(tmp_path):
    model = _Recorder()
    trainer = _trainer(tmp_path, max_steps=5)
    trainer.fit(model, DataLoader(_Stream(), batch_size=None))
    assert trainer.global_step == 5 and trainer.num_training_batches == float("inf")
    model = _Recorder()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(model, (torch.tensor([float(i)]) for i in range(3)))
    assert model.seen == [[0.0], [1.0], [2.0]]


def test_a_number_is_refused_with_what_to_pass(tmp_path):
    with pytest.raises(TypeError, match="not iterable.*Pass a DataLoader"):
        _trainer(tmp_path, max_epochs=1).fit(_Recorder(), 3)


def _regression_loaders() -> dict:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 4, generator=generator), torch.randn(24, 1, generator=generator)
    return {
        "big": DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True),
        "small": DataLoader(TensorDataset(x[:8], y[:8]), batch_size=4, shuffle=True),
    }


class _TwoSources(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = sum(torch.nn.functional.mse_loss(self.layer(x), y) for x, y in batch.values())
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def test_a_combined_pass_resumes_mid_epoch_to_the_uninterrupted_weights(tmp_path):
    """6 batches per epoch (the small loader cycles): stop after 8 steps (inside epoch 2), resume to 12."""
    straight = _TwoSources()
    start = {k: v.clone() for k, v in straight.state_dict().items()}
    torch.manual_seed(1)  # the shuffled orders come from the global generator
    _trainer(tmp_path / "a", max_steps=12).fit(straight, _regression_loaders())

    first = _TwoSources()
    first.load_state_dict(start)
    trainer = _trainer(tmp_path / "b", max_steps=8)
    torch.manual_seed(1)
    trainer.fit(first, _regression_loaders())
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    resumed = _TwoSources()
    trainer = _trainer(tmp_path / "b", max_steps=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PossibleUserWarning)  # DataLoaders resume: no "not resumable" warning
        trainer.fit(resumed, _regression_loaders(), ckpt_path=tmp_path / "mid.ckpt")
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


class _Counting:
    """An iterable without `state_dict()`: a resumed pass starts it again, with a warning."""

    def __iter__(self):
        return iter(torch.arange(6).split(1))

    def __len__(self):
        return 6


def test_an_iterable_without_state_restarts_with_one_warning(tmp_path):
    trainer = _trainer(tmp_path, max_steps=2)
    trainer.fit(_Recorder(), _Counting())
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    model = _Recorder()
    with pytest.warns(PossibleUserWarning, match="resuming from a checkpoint that ended before"):
        _trainer(tmp_path, max_steps=4).fit(model, _Counting(), ckpt_path=tmp_path / "mid.ckpt")
    assert model.seen == [[0], [1]]


def test_accumulation_windows_end_with_the_combined_pass_as_in_lightning(tmp_path):
    """6 combined batches per epoch, accumulating 4: windows of 4 and 2 in each epoch (the small loader, cycled,
    yields last, but its own pass of 2 batches must not decide where the epoch's last window ends)."""
    import lightning.pytorch as pl

    class Theirs(pl.LightningModule):
        training_step, configure_optimizers = _TwoSources.training_step, _TwoSources.configure_optimizers

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

    theirs = pl.Trainer(default_root_dir=tmp_path / "pl", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", max_epochs=2,
                        accumulate_grad_batches=4)
    theirs.fit(Theirs(), _regression_loaders())
    ours = _trainer(tmp_path / "fx", max_epochs=2, accumulate_grad_batches=4)
    ours.fit(_TwoSources(), _regression_loaders())
    assert ours.global_step == theirs.global_step == 4


def test_a_pass_saved_after_its_last_batch_continues_empty_then_the_next_epoch_is_whole():
    """The Trainer's checkpoint written in the validation that ends an epoch, on a rank of two: every combined batch
    was handed out, the loop had not asked for another. The resumed pass yields nothing, and the next epoch is read
    whole, as in an uninterrupted run (the restored positions of the distributed samplers, which torchdata keeps on
    the sampler until a batch is asked for, once reached into it: 1 batch instead of 5)."""
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    from fabricx import Fabric
    from fabricx.train.data.loaders import LoaderGroup

    fabric = Fabric(accelerator="cpu", devices=1)

    def group() -> LoaderGroup:
        def loader(data: list[int]) -> Any:
            sampler = StatefulDistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=5)
            return fabric.setup_dataloaders(DataLoader(data, batch_size=2, sampler=sampler))

        flat, spec = flatten({"a": loader(list(range(20))), "b": loader(list(range(100, 112)))})
        return LoaderGroup(flat, spec, "max_size_cycle")

    def epoch(loaders: LoaderGroup, number: int | None, batches: int | None = None) -> list:
        if number is not None:
            loaders.set_epoch(number)
        return [_plain(batch) for batch in itertools.islice(loaders, batches)]

    straight = group()
    expected = [epoch(straight, 0), epoch(straight, 1)]
    first = group()
    assert epoch(first, 0, batches=5) == expected[0]  # all 5 handed out; "b" is inside its second pass
    resumed = group()
    resumed.load_state_dict(first.state_dict())
    assert epoch(resumed, None) == []  # the rest of the restored epoch
    assert epoch(resumed, 1) == expected[1]
