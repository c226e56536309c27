"""``ResumableBatchSampler``: the batches, the random draws and the saved state of torch's and torchdata's
batch samplers, taken one slice per batch."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import BatchSampler as TorchdataBatchSampler

from fabricx.data.batching import ResumableBatchSampler
from fabricx.data.loader import build_stateful_loader
from fabricx.data.sampler import ElasticDistributedSampler, ResumableRandomSampler

LENGTH = 23  # not a multiple of the batch size: a short last batch


class _EveryThird(Sampler[int]):
    """A custom sampler without state (read through islice)."""

    def __iter__(self) -> Iterator[int]:
        return iter([*range(0, LENGTH, 3), *range(1, LENGTH, 3), *range(2, LENGTH, 3)])

    def __len__(self) -> int:
        return LENGTH


def _samplers() -> dict[str, Callable[[], Sampler]]:
    data = list(range(LENGTH))
    return {
        "resumable_generator": lambda: ResumableRandomSampler(data, generator=torch.Generator().manual_seed(3)),
        "resumable_more_samples": lambda: ResumableRandomSampler(
            data, num_samples=2 * LENGTH + 5, generator=torch.Generator().manual_seed(3)
        ),
        "resumable_replacement": lambda: ResumableRandomSampler(
            data, replacement=True, generator=torch.Generator().manual_seed(3)
        ),
        "elastic_rank1": lambda: ElasticDistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=5),
        "sequential": lambda: SequentialSampler(data),
        "custom": lambda: _EveryThird(),
    }


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("name", list(_samplers()))
def test_same_batches_and_draws_as_torch_and_torchdata(name: str, drop_last: bool) -> None:
    make = _samplers()[name]
    epochs = {}
    kinds = (("torch", BatchSampler), ("torchdata", TorchdataBatchSampler), ("ours", ResumableBatchSampler))
    for kind, batch_cls in kinds:
        torch.manual_seed(0)
        sampler = make()
        batches = batch_cls(sampler, 5, drop_last)
        epochs[kind] = [list(batches), list(batches)]  # two epochs: the second order depends on the first's draws
        generator = getattr(sampler, "generator", None)
        epochs[kind].append(generator.get_state().tolist() if generator is not None else None)
        epochs[kind].append(torch.get_rng_state().tolist())  # what was drawn from the global generator
    assert epochs["ours"] == epochs["torch"] == epochs["torchdata"]


@pytest.mark.parametrize("name", list(_samplers()))
def test_state_resumes_mid_epoch_and_loads_torchdata_state(name: str) -> None:
    make = _samplers()[name]
    torch.manual_seed(0)
    reference = list(ResumableBatchSampler(make(), 4, False))

    for writer in (ResumableBatchSampler, TorchdataBatchSampler):
        torch.manual_seed(0)
        iterator = iter(writer(make(), 4, False))
        head = list(itertools.islice(iterator, 3))
        state = iterator.state_dict()  # type: ignore[attr-defined]

        torch.manual_seed(1)  # the resumed run must not depend on the global generator
        resumed = iter(ResumableBatchSampler(make(), 4, False))
        resumed.load_state_dict(state)  # type: ignore[attr-defined]
        assert head + list(resumed) == reference, writer.__name__


def test_setup_loader_uses_it_and_keeps_the_loader_attributes() -> None:
    dataset = list(range(LENGTH))
    plain = DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0))
    loader = build_stateful_loader(plain)
    assert type(loader.batch_sampler) is ResumableBatchSampler
    assert loader.batch_size == 4 and loader.drop_last and isinstance(loader.sampler, RandomSampler)
    assert loader.batch_sampler.sampler is loader.sampler
    again = DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0))
    assert [b.tolist() for b in loader] == [b.tolist() for b in again]
