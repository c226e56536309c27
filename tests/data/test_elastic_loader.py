"""Loader positions that survive a change in the number of processes (saved at N ranks mid-epoch,
resumed at M): every remaining sample of the epoch exactly once across the new ranks, the same order,
the next epoch as an uninterrupted run has it. Ranks are simulated in one process (each rank its own
loader with its own ``rank``/``num_replicas``), states pass through ``state_dict``/``load_state_dict``
as a checkpoint carries them (a rank the saving run did not have receives rank 0's entry)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fabricx.data.loader import FabricDataLoader, build_stateful_loader
from fabricx.data.sampler import ElasticDistributedSampler

LENGTH = 48


class Ids(Dataset):
    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> int:
        return index


def _ranks(world: int, batch: int, workers: int = 0, shuffle: bool = True) -> list[FabricDataLoader]:
    loaders = []
    for rank in range(world):
        plain = DataLoader(Ids(), batch_size=batch, shuffle=shuffle, num_workers=workers)
        stateful = build_stateful_loader(plain, num_replicas=world, rank=rank)
        loaders.append(FabricDataLoader(stateful, None, rank=rank, world_size=world))
    return loaders


def _steps(iterators: list, count: int | None = None) -> list[list[list[int]]]:
    """Global steps in lockstep: each is the list of every rank's batch."""
    steps = []
    while count is None or len(steps) < count:
        try:
            steps.append([next(it).tolist() for it in iterators])
        except StopIteration:
            break
    return steps


def _samples(steps: list[list[list[int]]]) -> list[int]:
    return [i for step in steps for batch in step for i in batch]


def _epoch_order(epoch: int) -> list[int]:
    return ElasticDistributedSampler(Ids(), 2, 0, shuffle=True, seed=0).epoch_order(epoch)


def _move(states: list[dict], world: int, batch: int, workers: int = 0) -> list[FabricDataLoader]:
    loaders = _ranks(world, batch, workers)
    for rank, loader in enumerate(loaders):
        loader.load_state_dict(states[rank] if rank < len(states) else states[0])
    return loaders


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    monkeypatch.setenv("FABRICX_GLOBAL_SEED", "0")


def _uninterrupted(world: int = 2, batch: int = 6) -> list[list[list[int]]]:
    loaders = _ranks(world, batch)
    return [step for _ in range(2) for step in _steps([iter(loader) for loader in loaders])]


@pytest.mark.parametrize("new_world", [1, 3, 4])
def test_saved_at_two_ranks_mid_epoch_resumes_at_m_ranks_with_the_global_batch_kept(new_world):
    reference = _uninterrupted()  # 2 ranks x 6 = global batches of 12, 4 steps per epoch
    loaders = _ranks(2, 6)
    first = _steps([iter(loader) for loader in loaders], 1)
    assert first == reference[:1]
    assert loaders[0].samples_consumed == 12
    states = [loader.state_dict() for loader in loaders]

    resumed = _move(states, new_world, 12 // new_world)  # the same global batch at the new size
    assert all(loader.epoch == 0 for loader in resumed)
    assert [len(loader) for loader in resumed] == [4] * new_world  # a whole epoch at this size
    assert [loader.batches_consumed for loader in resumed] == [1] * new_world  # steps already taken
    rest = _steps([iter(loader) for loader in resumed])
    assert [loader.batches_consumed for loader in resumed] == [4] * new_world
    # The rest of epoch 0: every remaining sample exactly once across the new ranks ...
    assert sorted(_samples(rest)) == sorted(_epoch_order(0)[12:])
    # ... in the same global steps as the uninterrupted run (same samples in each step).
    assert [sorted(_samples([s])) for s in rest] == [sorted(_samples([s])) for s in reference[1:4]]
    # The next epoch: the order an uninterrupted run uses, the same global steps.
    nxt = _steps([iter(loader) for loader in resumed])
    assert all(loader.epoch == 1 for loader in resumed)
    assert _samples(nxt) != _samples(reference[4:]) or new_world == 2
    assert [sorted(_samples([s])) for s in nxt] == [sorted(_samples([s])) for s in reference[4:]]


def test_per_rank_batch_kept_resize_twice_and_workers():
    """2 ranks x 6 -> 3 ranks x 6 with 2 workers each (saved again mid-epoch) -> 1 process; the epoch's
    remaining samples are each seen once and the next epoch is the uninterrupted order."""
    loaders = _ranks(2, 6)
    seen = _samples(_steps([iter(loader) for loader in loaders], 1))
    three = _move([loader.state_dict() for loader in loaders], 3, 6, workers=2)
    assert [len(loader) for loader in three] == [3] * 3 and three[0].batches_consumed == 1
    iterators = [iter(loader) for loader in three]
    seen += _samples(_steps(iterators, 1))
    assert three[0].samples_consumed == 12 + 18
    one = _move([loader.state_dict() for loader in three], 1, 6)
    del iterators, three
    assert isinstance(one[0].sampler, ElasticDistributedSampler)  # one process keeps the distributed order
    seen += _samples(_steps([iter(one[0])]))
    assert sorted(seen) == list(range(LENGTH))  # none twice, none missing
    assert _samples(_steps([iter(one[0])])) == _epoch_order(1)


def test_single_process_shuffle_resumes_mid_epoch_on_two_ranks():
    torch.manual_seed(3)
    [single] = _ranks(1, 6)
    assert single.sampler.__class__.__name__ == "ResumableRandomSampler"
    iterator = iter(single)
    taken = _samples(_steps([iterator], 3))
    order = taken + _samples(_steps([iterator]))  # the uninterrupted epoch's order
    torch.manual_seed(3)
    [single] = _ranks(1, 6)
    iterator = iter(single)
    _steps([iterator], 3)
    state = single.state_dict()
    assert state["position"]["consumed"] == 18 and state["position"]["order"]["kind"] == "random"
    two = _move([state], 2, 3)
    steps = _steps([iter(loader) for loader in two])
    assert sorted(_samples(steps)) == sorted(order[18:])
    # Dealt in turn: step j holds the next 6 samples of the order, rank 0 the 1st, 3rd and 5th of them.
    assert [step[0] + step[1] for step in steps] == [
        order[18 + 6 * j : 24 + 6 * j : 2] + order[19 + 6 * j : 24 + 6 * j : 2] for j in range(5)
    ]
    assert all(loader.epoch == 0 for loader in two)


def test_not_a_divisor_pads_like_distributed_sampler_and_epoch_end_carries():
    loaders = _ranks(2, 5)  # 24 per rank: 5 batches of 5 (the last of 4)
    _steps([iter(loader) for loader in loaders], 2)  # 20 consumed
    states = [loader.state_dict() for loader in loaders]
    three = _move(states, 3, 5)
    iterators = [iter(loader) for loader in three]
    rest = _samples(_steps(iterators, 2))  # every rank at its share's last batch, still inside its loop
    remaining = _epoch_order(0)[20:]  # 28 samples over 3 ranks: 10 each, the first 2 repeated as padding
    assert sorted(rest) == sorted(remaining + remaining[:2])
    assert set(rest) == set(remaining)
    inside = [loader.state_dict() for loader in three]
    assert all(next(iterator, None) is None for iterator in iterators)  # each rank's loop ends
    after = [loader.state_dict() for loader in three]

    # Saved at the epoch's last batch inside the loop: the resumed iter() is that loop's continuation and
    # yields nothing, because an uninterrupted run's loop ends its epoch there; the next iter() starts epoch 1.
    ended = _move(inside, 4, 5)
    assert [list(iter(loader)) for loader in ended] == [[]] * 4
    assert [loader.epoch for loader in ended] == [0] * 4
    assert _samples(_steps([iter(loader) for loader in ended]))[:5] == _epoch_order(1)[0:20:4]
    assert all(loader.epoch == 1 for loader in ended)
    # Saved after the loop ended: the next iter() starts epoch 1 at once.
    ended = _move(after, 4, 5)
    assert [loader.epoch for loader in ended] == [0] * 4
    assert _samples(_steps([iter(loader) for loader in ended]))[:5] == _epoch_order(1)[0:20:4]
    assert all(loader.epoch == 1 for loader in ended)


def test_a_different_seed_or_dataset_is_refused(monkeypatch):
    loaders = _ranks(2, 6)
    _steps([iter(loader) for loader in loaders], 1)
    state = loaders[0].state_dict()
    monkeypatch.setenv("FABRICX_GLOBAL_SEED", "5")
    with pytest.raises(Exception, match=r"seeded with 0; this one uses 5.*seed_everything\(0\)"):
        _move([state], 3, 4)
