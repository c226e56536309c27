"""The Accelerate adapter's loaders continue an interrupted pass at another number of processes (ranks
simulated in one process: each simulated rank's loader is prepared under the same seed, so their shared
generator starts equal, as the main process's copy makes it in a real run; real processes:
tests/data/test_elastic_processes.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from fabricx.compat.accelerate.data import AcceleratedDataLoader, GradientState, LoaderOptions
from fabricx.compat.accelerate.elastic import rank_batches_of_the_rest
from fabricx.utilities.exceptions import FabricxError

LENGTH, GLOBAL = 48, 12


def _loaders(n: int, batch_size: int | None = None, **options) -> list[AcceleratedDataLoader]:
    loaders = []
    for rank in range(n):
        torch.manual_seed(0)
        data = DataLoader(list(range(LENGTH)), batch_size=batch_size or GLOBAL // n, shuffle=True)
        loaders.append(AcceleratedDataLoader(data, LoaderOptions(num_processes=n, process_index=rank, **options),
                                             GradientState()))
    return loaders


def _run(loaders, passes: int, stop_after: tuple[int, int] | None = None):
    """Each step's samples over all ranks (sorted), and every rank's state at ``stop_after`` (pass, step)."""
    steps, states = [], None
    for number in range(passes):
        iterators = [iter(loader) for loader in loaders]
        while True:
            parts = [next(iterator, None) for iterator in iterators]  # every rank's pass runs to its end
            if all(part is None for part in parts):
                break
            assert all(part is not None for part in parts), "the ranks have different numbers of batches"
            steps.append(sorted(i for part in parts for i in part.tolist()))
            if (number, loaders[0].batches_consumed) == stop_after:
                states = [loader.state_dict() for loader in loaders]
    return steps, states


def _resumed(n: int, state: dict, **kwargs) -> list[AcceleratedDataLoader]:
    loaders = _loaders(n, **kwargs)
    for loader in loaders:  # every process loads the one shared loader entry, as load_state() does
        loader.load_state_dict(state)
    return loaders


def test_two_to_three_saved_again_to_one_continues_the_order_and_the_next_pass():
    reference, states = _run(_loaders(2), 2, stop_after=(0, 1))
    three = _resumed(3, states[0])
    assert [loader.batches_consumed for loader in three] == [1, 1, 1] and len(three[0]) == 4
    steps, again = _run(three, 2, stop_after=(0, 2))
    assert steps == reference[1:]  # the rest of pass 0 step by step (global batch kept), then pass 1
    one = _resumed(1, again[0])
    assert one[0].batches_consumed == 2
    steps, _ = _run(one, 2)
    assert steps == reference[2:]
    rest = [i for step in steps[:2] for i in step]
    assert sorted(rest + reference[0] + reference[1]) == list(range(LENGTH))  # nothing replayed or skipped


def test_a_different_batch_size_deals_the_rest_in_its_own_batches_and_evens_the_last_round():
    reference, states = _run(_loaders(2), 1, stop_after=(0, 1))
    five = _resumed(5, states[0], batch_size=4)  # 36 samples left, 20 per step: one full round, one of 16 + 4
    steps, _ = _run(five, 1)
    assert [len(step) for step in steps] == [20, 20]
    seen, remaining = Counter(i for step in steps for i in step), Counter(i for step in reference[1:] for i in step)
    assert not remaining - seen  # every remaining sample is dealt
    padding = seen - remaining
    assert padding.total() == 4 and set(padding) <= set(reference[0])  # the last round evened from the pass's start


def test_split_batches_continue_at_another_count():
    reference, states = _run(_loaders(2, batch_size=GLOBAL, split_batches=True), 2, stop_after=(0, 2))
    steps, _ = _run(_resumed(3, states[0], batch_size=GLOBAL, split_batches=True), 2)
    assert steps == reference[2:]


def test_a_seedable_sampler_continues_at_another_count_and_keeps_its_epoch_order():
    options = {"use_seedable_sampler": True, "data_seed": 7}
    reference, states = _run(_loaders(2, **options), 3, stop_after=(1, 2))  # inside the second pass
    steps, _ = _run(_resumed(4, states[0], **options), 2)
    assert steps == reference[6:]


def test_rest_of_a_pass_is_dealt_in_turn_with_the_last_round_completed_from_the_start():
    order = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    shares = [rank_batches_of_the_rest(order, 4, 2, False, 3, rank, False, True) for rank in range(3)]
    assert shares == [[[5, 4]], [[3, 2]], [[1, 0]]]
    shares = [rank_batches_of_the_rest(order, 6, 2, False, 3, rank, False, True) for rank in range(3)]
    assert shares == [[[3, 2]], [[1, 0]], [[9, 8]]]
    shares = [rank_batches_of_the_rest(order, 6, 2, False, 3, rank, False, False) for rank in range(3)]
    assert shares == [[[3, 2]], [[1, 0]], []]
    assert rank_batches_of_the_rest(order, 5, 2, True, 1, 0, False, True) == [[4, 3], [2, 1]]


def _custom(n: int) -> list[AcceleratedDataLoader]:
    loaders = []
    for rank in range(n):
        batches = type("Custom", (BatchSampler,), {})(SequentialSampler(range(LENGTH)), GLOBAL // n, False)
        loaders.append(AcceleratedDataLoader(DataLoader(list(range(LENGTH)), batch_sampler=batches),
                                             LoaderOptions(num_processes=n, process_index=rank), GradientState()))
    return loaders


def test_what_cannot_continue_elsewhere_is_refused_with_the_reason():
    _, states = _run(_custom(2), 1, stop_after=(0, 1))
    with pytest.raises(FabricxError, match="mid-pass by 2 processes; this run has 3.*its own batch sampler"):
        _custom(3)[0].load_state_dict(states[0])
    _custom(2)[0].load_state_dict(states[0])  # the same count continues as before


def test_one_process_continued_by_two_draws_its_order_again_from_the_global_generator():
    """One process shuffles from the global generator; two share a generator of their own (as Accelerate sets them
    up): the rest of the one process's pass is drawn again as it drew it, then their own order follows."""
    reference, single = _run(_loaders(1), 1, stop_after=(0, 1))
    steps, again = _run(_resumed(2, single[0]), 2, stop_after=(0, 2))  # every rank borrows the one state
    assert steps[:3] == reference[1:]  # the rest of pass 0 step by step (global batch kept)
    assert sorted(i for step in steps[3:] for i in step) == list(range(LENGTH))  # then a whole pass
    # Saved again inside the continued pass, it still continues the one process's order.
    steps, _ = _run(_resumed(3, again[0], batch_size=4), 1)
    assert steps == reference[2:]
