"""Per-rank sampling, checked in one process with explicit ``num_replicas`` and ``rank``."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from fabricx.data.loader import build_stateful_loader
from fabricx.data.sampler import DistributedSamplerWrapper, distributed_sampler_for, is_shuffling

WORLD = 3


def _shares(make_sampler, epoch: int, world: int = WORLD) -> list[list[int]]:
    """Each rank's indices for ``epoch``, every rank with its own sampler object (as in separate processes)."""
    shares = []
    for rank in range(world):
        sampler = make_sampler(rank)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def _interleave(shares: list[list[int]]) -> list[int]:
    return [shares[r][i] for i in range(len(shares[0])) for r in range(len(shares))]


def test_sequential_order_is_split_round_robin() -> None:
    dataset = list(range(12))
    shares = _shares(lambda r: distributed_sampler_for(SequentialSampler(dataset), dataset, WORLD, r, seed=0), 0)
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]


@pytest.mark.parametrize("sampler_cls", [RandomSampler, StatefulRandomSampler])
def test_shuffling_each_sample_once_per_epoch_new_order_each_epoch(sampler_cls: type) -> None:
    dataset = list(range(30))

    def make(rank: int) -> Sampler:
        sampler = distributed_sampler_for(sampler_cls(dataset), dataset, WORLD, rank, seed=7)
        assert isinstance(sampler, StatefulDistributedSampler) and sampler.shuffle
        return sampler

    orders = []
    for epoch in range(3):
        shares = _shares(make, epoch)
        flat = [i for share in shares for i in share]
        assert sorted(flat) == dataset  # each sample seen once across ranks: disjoint and complete
        assert all(len(share) == 10 for share in shares)
        orders.append(_interleave(shares))
    assert orders[0] != orders[1] != orders[2] and orders[0] != orders[2]
    assert orders[0] != dataset
    # The same epoch gives the same permutation again (every rank computes it independently).
    assert _interleave(_shares(make, 1)) == orders[1]


def test_uneven_length_pads_or_drops() -> None:
    dataset = list(range(10))
    padded = _shares(lambda r: distributed_sampler_for(RandomSampler(dataset), dataset, WORLD, r, seed=0), 0)
    flat = [i for share in padded for i in share]
    assert len(flat) == 12 and set(flat) == set(dataset)  # every sample, two repeated to even out
    dropped = _shares(
        lambda r: distributed_sampler_for(RandomSampler(dataset), dataset, WORLD, r, seed=0, drop_last=True), 0
    )
    flat = [i for share in dropped for i in share]
    assert len(flat) == 9 and len(set(flat)) == 9


def test_a_distributed_sampler_given_by_the_user_is_kept() -> None:
    dataset = list(range(8))
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1)
    assert distributed_sampler_for(sampler, dataset, 2, 1, seed=0) is sampler


class _Reversed(Sampler[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

    def __len__(self) -> int:
        return self.n


def test_custom_sampler_is_wrapped_and_split() -> None:
    dataset = list(range(9))
    shares = _shares(lambda r: distributed_sampler_for(_Reversed(9), dataset, WORLD, r, seed=0), 0)
    assert shares == [[8, 5, 2], [7, 4, 1], [6, 3, 0]]
    wrapped = distributed_sampler_for(_Reversed(9), dataset, WORLD, 0, seed=0)
    assert isinstance(wrapped, DistributedSamplerWrapper) and isinstance(wrapped.sampler, _Reversed)


def test_random_sampler_subclass_is_wrapped_not_replaced() -> None:
    class EveryOther(RandomSampler):
        def __iter__(self):
            return iter(range(0, len(self.data_source), 2))

        def __len__(self) -> int:
            return (len(self.data_source) + 1) // 2

    dataset = list(range(8))
    sampler = distributed_sampler_for(EveryOther(dataset), dataset, 2, 0, seed=0)
    assert isinstance(sampler, DistributedSamplerWrapper)
    assert list(sampler) == [0, 4]


def test_sampler_on_the_global_generator_agrees_across_ranks_and_leaves_it_alone() -> None:
    weights = torch.rand(20, generator=torch.Generator().manual_seed(0)).tolist()

    def make(rank: int) -> Sampler:
        torch.manual_seed(1000 + rank)  # ranks whose global generators have drifted apart
        return distributed_sampler_for(WeightedRandomSampler(weights, 12), list(range(20)), WORLD, rank, seed=3)

    epoch0 = _shares(make, 0)
    assert all(len(share) == 4 for share in epoch0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3 + 0)  # seed + epoch
        full_draw = list(WeightedRandomSampler(weights, 12))
    assert _interleave(epoch0) == full_draw  # every rank split the same draw
    assert _shares(make, 0) == epoch0
    assert _shares(make, 1) != epoch0
    sampler = make(0)
    before = torch.get_rng_state()
    list(sampler)
    assert torch.equal(before, torch.get_rng_state())  # the user's random stream is untouched


def test_sampler_with_its_own_generator_resumes_its_order() -> None:
    weights = [1.0] * 10 + [5.0] * 10

    def make(rank: int) -> DistributedSamplerWrapper:
        generator = torch.Generator().manual_seed(42)  # built with the same seed on every rank
        sampler = distributed_sampler_for(WeightedRandomSampler(weights, 16, generator=generator), weights, 2, rank, 0)
        assert isinstance(sampler, DistributedSamplerWrapper)
        return sampler

    shares = _shares(make, 0, world=2)
    assert len(shares[0]) == len(shares[1]) == 8
    assert shares == _shares(make, 0, world=2)  # same seed on every rank: the ranks agree

    original = make(0)
    list(original)  # epoch 0 consumed: the generator moved on
    iterator = iter(original)
    head = [next(iterator) for _ in range(3)]
    state = original.state_dict()
    tail = list(iterator)

    resumed = make(0)  # a fresh process: fresh generator, state from the checkpoint
    resumed.load_state_dict(state)
    assert list(resumed) == tail
    assert head + tail != shares[0]  # epoch 1 drew a new order from the advanced generator


def test_sampler_without_length_is_refused_with_advice() -> None:
    class Endless(Sampler[int]):
        def __iter__(self):
            return iter(range(5))

    with pytest.raises(TypeError, match="use_distributed_sampler=False"):
        DistributedSamplerWrapper(Endless(), num_replicas=2, rank=0)


def test_is_shuffling() -> None:
    data = list(range(4))
    assert is_shuffling(RandomSampler(data)) and is_shuffling(StatefulRandomSampler(data))
    assert not is_shuffling(SequentialSampler(data))
    assert is_shuffling(distributed_sampler_for(RandomSampler(data), data, 2, 0, seed=0))
    assert not is_shuffling(distributed_sampler_for(SequentialSampler(data), data, 2, 0, seed=0))


@pytest.mark.parametrize("loader_cls", [DataLoader, StatefulDataLoader])
def test_loaders_built_per_rank_split_the_data(loader_cls: type) -> None:
    dataset = TensorDataset(torch.arange(20))
    seen = []
    for rank in range(2):
        loader = build_stateful_loader(loader_cls(dataset, batch_size=3, shuffle=True), num_replicas=2, rank=rank)
        loader.sampler.set_epoch(1)
        seen.append([int(i) for (batch,) in loader for i in batch])
    assert sorted(seen[0] + seen[1]) == list(range(20))
    assert seen[0] + seen[1] != list(range(20))
