"""Loaders from setup_dataloaders: what they are built as, and that their state restores the exact
position and random state (custom samplers, user generators, stateful iterable datasets, workers,
distributed samplers, a changed number of processes)."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, WeightedRandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from fabricx import Fabric
from fabricx.data.loader import FabricDataLoader, build_stateful_loader
from fabricx.data.worker_state import WORKER_SNAPSHOT_INTERVAL
from fabricx.utilities.exceptions import FabricxError


class IdDataset(Dataset):
    """Returns its index and a random number drawn where the sample is loaded."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int):
        return index, torch.rand(())


class CountingStream(IterableDataset):
    """A stateful iterable dataset: it remembers how far it got (also inside workers)."""

    def __init__(self, length: int = 24) -> None:
        self.length = length
        self.position = 0

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        while self.position < self.length:
            index = self.position
            self.position += 1
            if index % workers == worker:
                yield index, torch.rand(())

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def _fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def _take(iterator, count: int) -> list:
    return [next(iterator) for _ in range(count)]


def _as_lists(batches) -> list:
    return [(ids.tolist(), values.tolist()) for ids, values in batches]


def _resume_check(make_loader, stops: int | list[int], tmp_path, epochs: int = 2) -> None:
    """Run ``epochs`` epochs uninterrupted; separately stop after ``stops`` batches (a list: stop,
    resume, stop again, ...), each time saving through fabric.save and loading into a freshly built
    loader, then finish; both must yield the same batches."""
    fabric = _fabric()
    fabric.seed_everything(3)
    loader = fabric.setup_dataloaders(make_loader())
    expected = [batch for _ in range(epochs) for batch in loader]

    fabric.seed_everything(3)
    loader = fabric.setup_dataloaders(make_loader())
    got: list = []
    iterator = iter(loader)
    for hop, stop in enumerate([stops] if isinstance(stops, int) else stops):
        got += _take(iterator, stop)
        fabric.save(tmp_path / f"ckpt{hop}", {"loader": loader})
        del iterator, loader
        torch.manual_seed(12345 + hop)  # whatever the process did since: the checkpoint's state must win
        random.seed(hop)
        loader = fabric.setup_dataloaders(make_loader())
        fabric.load(tmp_path / f"ckpt{hop}", {"loader": loader})
        iterator = iter(loader)
    got += list(iterator)
    for _ in range(epochs - 1 - loader.epoch):
        got += list(loader)
    assert _as_lists(got) == _as_lists(expected)


@pytest.mark.parametrize("stop", [2, 6])  # inside epoch 0, and exactly at its last batch
def test_shuffle_with_user_generator_resumes_exactly(stop, tmp_path):
    def make():
        return DataLoader(IdDataset(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))

    _resume_check(make, stop, tmp_path)


def test_custom_sampler_drawing_from_global_generator_resumes_exactly(tmp_path):
    def make():
        weights = torch.linspace(1, 2, 24)
        return DataLoader(IdDataset(), batch_size=4, sampler=WeightedRandomSampler(weights, 24))

    _resume_check(make, 3, tmp_path)


def test_workers_and_a_snapshot_every_interval(tmp_path):
    def make():
        return DataLoader(IdDataset(), batch_size=4, shuffle=True, num_workers=2)

    loader = build_stateful_loader(make())
    assert isinstance(loader, StatefulDataLoader) and loader.snapshot_every_n_steps == WORKER_SNAPSHOT_INTERVAL
    _resume_check(make, [2, 3], tmp_path)  # resumed, then saved and resumed again


def test_stateful_loader_passed_in_is_kept_and_resumes_with_its_own_snapshot_interval(tmp_path):
    def make():
        return StatefulDataLoader(IdDataset(), batch_size=4, shuffle=True, num_workers=2, snapshot_every_n_steps=4)

    given = make()
    assert build_stateful_loader(given) is given
    _resume_check(make, 3, tmp_path)


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_iterable_dataset_resumes_exactly(workers, tmp_path):
    def make():
        return DataLoader(CountingStream(), batch_size=3, num_workers=workers)

    _resume_check(make, 3, tmp_path, epochs=1)


def test_state_dict_before_iterating_draws_no_random_numbers():
    loader = _fabric().setup_dataloaders(DataLoader(IdDataset(), batch_size=4, shuffle=True))
    before = torch.get_rng_state()
    state = loader.state_dict()
    assert torch.equal(before, torch.get_rng_state())
    assert state["started"] is False and state["loader"] is None


def test_state_saved_before_the_first_epoch_resumes_the_same_order(tmp_path):
    """As in torch, the first epoch draws its order when it starts (from the global generator, which the
    checkpoint holds), so a save before it and a load under another random state give the same order."""
    fabric = _fabric()
    torch.manual_seed(1)
    loader = fabric.setup_dataloaders(DataLoader(IdDataset(), batch_size=4, shuffle=True))
    fabric.save(tmp_path / "ckpt", {"loader": loader})
    expected = [ids.tolist() for ids, _ in loader]
    torch.manual_seed(2)  # the resumed process builds its loader under another random state
    resumed = fabric.setup_dataloaders(DataLoader(IdDataset(), batch_size=4, shuffle=True))
    fabric.load(tmp_path / "ckpt", {"loader": resumed})
    assert [ids.tolist() for ids, _ in resumed] == expected


def test_epoch_is_restored_for_distributed_sampler_order():
    """Fabric's loader forgets the sampler epoch: a restart replays epoch 0's order. Not here."""

    def make(rank: int) -> FabricDataLoader:
        plain = DataLoader(IdDataset(), batch_size=3, shuffle=True)
        return FabricDataLoader(build_stateful_loader(plain, num_replicas=2, rank=rank), None, rank=rank, world_size=2)

    loader = make(0)
    epoch0 = [ids.tolist() for ids, _ in loader]
    epoch1 = [ids.tolist() for ids, _ in loader]
    assert epoch0 != epoch1
    iterator = iter(loader)  # epoch 2
    epoch2_head = [next(iterator)[0].tolist()]
    state = loader.state_dict()
    epoch2_tail = [ids.tolist() for ids, _ in iterator]

    restored = make(0)
    restored.load_state_dict(state)
    assert restored.epoch == 2
    assert [ids.tolist() for ids, _ in restored] == epoch2_tail
    assert epoch2_head + epoch2_tail != epoch0


def test_world_size_change_mid_epoch_with_a_custom_sampler_is_refused_and_epoch_end_carries_the_epoch():
    """A custom sampler's order cannot be rebuilt at another process count (see test_elastic_loader.py
    for the shuffled and sequential loaders, which can)."""

    def make(world: int) -> FabricDataLoader:
        plain = DataLoader(IdDataset(), batch_size=3, sampler=WeightedRandomSampler(torch.ones(24), 24))
        stateful = build_stateful_loader(plain, num_replicas=world, rank=0)
        return FabricDataLoader(stateful, None, rank=0, world_size=world)

    loader = make(2)
    iterator = iter(loader)
    next(iterator)
    assert loader.state_dict()["position"] is None
    with pytest.raises(FabricxError, match=r"saved by rank 0 of 2 processes in the middle of epoch 0 \(batch 1 of 4\)"):
        make(1).load_state_dict(loader.state_dict())
    list(iterator)
    target = make(3)
    target.load_state_dict(loader.state_dict())
    before = torch.get_rng_state()
    assert target.state_dict()["loader"] is None  # nothing restored, nothing built, nothing drawn
    assert torch.equal(before, torch.get_rng_state())
    next(iter(target))
    assert target.epoch == 1


def test_foreign_state_is_refused_with_a_hint():
    loader = _fabric().setup_dataloaders(DataLoader(IdDataset(), batch_size=4))
    with pytest.raises(FabricxError, match="not a fabricx data loader state"):
        loader.load_state_dict({"_num_yielded": 3})


def test_wrapped_dataset_still_answers_its_attributes():
    class Named(IdDataset):
        name = "ids"

    loader = _fabric().setup_dataloaders(DataLoader(Named(), batch_size=4, num_workers=2))
    assert loader.dataset.name == "ids" and len(loader.dataset) == 24
