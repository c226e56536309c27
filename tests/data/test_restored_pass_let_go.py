"""A pass restored from a checkpoint and then not read on (`end_pass()`, or a loop that asks for no batch of it):
the next pass starts at its beginning, also with a sampler that keeps its restored position on itself until the
next batch is asked for (torchdata's `StatefulDistributedSampler`, which fabricx builds on several processes)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from fabricx import Fabric
from fabricx.data.loader import FabricDataLoader

DATA = list(range(20))  # rank 0 of 2: 5 batches of 2 an epoch


@pytest.fixture(scope="module")
def make_loader() -> Callable[[], FabricDataLoader]:
    fabric = Fabric(accelerator="cpu", devices=1)

    def make() -> FabricDataLoader:
        sampler = StatefulDistributedSampler(DATA, num_replicas=2, rank=0, shuffle=True, seed=3)
        return fabric.setup_dataloaders(DataLoader(DATA, batch_size=2, sampler=sampler))

    return make


def _epoch(loader: FabricDataLoader, number: int, stop: int | None = None) -> list[list[int]]:
    loader.set_epoch(number)
    batches = []
    for batch in loader:
        batches.append(batch.tolist())
        if len(batches) == stop:
            break
    return batches


def test_a_pass_continued_without_asking_for_a_batch_leaves_the_next_epoch_whole(make_loader) -> None:
    straight = make_loader()
    expected = [_epoch(straight, 0), _epoch(straight, 1)]
    stopped = make_loader()
    _epoch(stopped, 0, stop=5)  # saved at the epoch's last batch, still inside its loop
    resumed = make_loader()
    resumed.load_state_dict(stopped.state_dict())
    iter(resumed)  # the loop's continuation of that epoch, which has nothing left to ask for
    assert _epoch(resumed, 1) == expected[1]


def test_end_pass_after_a_mid_epoch_restore_starts_the_next_epoch_at_its_beginning(make_loader) -> None:
    expected = _epoch(make_loader(), 1)
    stopped = make_loader()
    _epoch(stopped, 0, stop=2)
    resumed = make_loader()
    resumed.load_state_dict(stopped.state_dict())
    resumed.end_pass()
    assert _epoch(resumed, 1) == expected
