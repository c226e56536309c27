"""A loader with workers snapshots its position every N batches; a resume at any offset from a snapshot reads the
batches since it again and then yields, bit for bit, what the uninterrupted run yielded: the same shuffled order and
the same random draws made in the workers (Python, NumPy and torch). Where a worker's state cannot change a batch,
the workers record nothing."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset, WeightedRandomSampler, default_collate

from fabricx import Fabric
from fabricx.data.loader import FabricDataLoader, build_stateful_loader
from fabricx.data.worker_state import worker_state_matters

INTERVAL, SAMPLES, BATCH, EPOCHS = 4, 24, 4, 2
EPOCH_BATCHES = SAMPLES // BATCH


class AugmentedReads(Dataset):
    """Sample ``i``: its index and one draw from each generator a worker has (random augmentation); each read is
    logged to a file per worker process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        with open(self.folder / f"reads-{os.getpid()}.txt", "a") as log:
            log.write(f"{index}\n")
        return torch.tensor([index, torch.rand(()).item(), random.random(), np.random.rand()], dtype=torch.float64)


def _reads(folder: Path) -> int:
    return sum(len(path.read_text().split()) for path in folder.glob("reads-*.txt"))


def _loader(
    fabric: Fabric, folder: Path, rank: int | None = None, weighted: bool = False, **kwargs
) -> FabricDataLoader:
    """A shuffled loader with two persistent workers; with ``rank``, that rank's of two (a distributed sampler);
    ``weighted``: a ``WeightedRandomSampler`` with its own generator instead of shuffling."""
    folder.mkdir(parents=True)
    dataset = kwargs.pop("dataset", None) or AugmentedReads(folder)
    if weighted:
        generator = torch.Generator().manual_seed(4)
        kwargs["sampler"] = WeightedRandomSampler(torch.linspace(1, 2, SAMPLES).tolist(), SAMPLES, generator=generator)
    else:
        kwargs["shuffle"] = True
    kwargs["generator"] = torch.Generator().manual_seed(3)  # the workers' base seed
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True, **kwargs)
    if rank is None:
        return fabric.setup_dataloaders(loader)
    return FabricDataLoader(build_stateful_loader(loader, num_replicas=2, rank=rank), None, rank=rank, world_size=2)


def _read(loader, stop: int | None = None) -> list[torch.Tensor]:
    """The training loop: the epochs left from the loader's epoch on, stopping after ``stop`` batches."""
    batches: list[torch.Tensor] = []
    if stop == 0:
        return batches
    for _ in range(loader.epoch, EPOCHS):
        for batch in loader:
            batches.append(batch)
            if len(batches) == stop:
                return batches
    return batches


def _resumed_runs(tmp_path: Path, stops: Iterable[int], **kwargs) -> tuple[list[torch.Tensor], dict[int, tuple]]:
    """The uninterrupted run's batches, and for each stop: the batches before it, those after the resume, and how
    many samples the resumed loader's workers read."""
    fabric = Fabric(accelerator="cpu", devices=1)
    expected = _read(_loader(fabric, tmp_path / "uninterrupted", **kwargs))
    runs = {}
    for stop in stops:
        first = _loader(fabric, tmp_path / f"first-{stop}", **kwargs)
        before = _read(first, stop)
        fabric.save(tmp_path / f"ckpt-{stop}", {"loader": first})
        first.shutdown_workers()
        resumed = _loader(fabric, tmp_path / f"resumed-{stop}", **kwargs)
        torch.manual_seed(999)  # what the process drew since: the checkpoint decides
        fabric.load(tmp_path / f"ckpt-{stop}", {"loader": resumed})
        after = _read(resumed)
        resumed.shutdown_workers()
        runs[stop] = (before, after, _reads(tmp_path / f"resumed-{stop}"))
    return expected, runs


def test_resume_is_exact_at_every_offset_from_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr("fabricx.data.loader.WORKER_SNAPSHOT_INTERVAL", INTERVAL)
    expected, runs = _resumed_runs(tmp_path, range(2 * INTERVAL + 2))
    assert len(expected) == EPOCHS * EPOCH_BATCHES and len({batch[0, 1].item() for batch in expected}) == len(expected)
    for stop, (before, after, reads) in runs.items():
        assert torch.equal(torch.stack(before + after), torch.stack(expected)), f"stopped after {stop} batches"
        # Read again: the batches of the epoch since its last snapshot (fewer than the interval).
        since_snapshot = (stop if stop <= EPOCH_BATCHES else stop - EPOCH_BATCHES) % INTERVAL
        assert reads == (since_snapshot + len(after)) * BATCH, f"stopped after {stop} batches"


@pytest.mark.parametrize("sampler", ["distributed", "weighted"])
def test_resume_of_a_rank_is_exact_inside_and_after_the_first_epoch(sampler, tmp_path, monkeypatch):
    # A rank's share of an epoch is 3 batches: every snapshot is the one at an epoch's start, taken before the
    # sampler hands out its first index (a resume from it must not start from the epoch before).
    monkeypatch.setattr("fabricx.data.loader.WORKER_SNAPSHOT_INTERVAL", INTERVAL)
    # weighted: split across ranks by fabricx, with the generator's state at the epoch's start in the loader's state
    expected, runs = _resumed_runs(tmp_path, (2, 4, 5), rank=1, weighted=sampler == "weighted")
    assert len(expected) == EPOCHS * EPOCH_BATCHES // 2
    for stop, (before, after, _) in runs.items():
        assert torch.equal(torch.stack(before + after), torch.stack(expected)), f"stopped after {stop} batches"


class CollateDrawing:
    """Batches ``TensorDataset`` samples with a random mask drawn where the batch is made (in the worker)."""

    def __call__(self, samples: list) -> torch.Tensor:
        batch = default_collate(samples)[0]
        return batch * (torch.rand(batch.shape) > 0.5)


def test_a_worker_state_is_recorded_only_where_it_can_change_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr("fabricx.data.loader.WORKER_SNAPSHOT_INTERVAL", INTERVAL)
    tensors = TensorDataset(torch.arange(SAMPLES, dtype=torch.float64))
    fabric = Fabric(accelerator="cpu", devices=1)
    plain = _loader(fabric, tmp_path / "plain", dataset=tensors)
    masked = _loader(fabric, tmp_path / "masked", dataset=tensors, collate_fn=CollateDrawing())
    assert plain.loader.dataset is tensors  # indexing tensors with torch's collate: the workers record nothing
    assert masked.loader.dataset is not tensors  # the same data, but the collate function draws
    assert not worker_state_matters(tensors, default_collate)
    assert worker_state_matters(AugmentedReads(tmp_path), default_collate)
    plain.shutdown_workers()
    masked.shutdown_workers()
    # Both resume exactly from a stop between two snapshots: the unrecorded workers because their state changes
    # nothing, the recorded ones because it is restored.
    for name, kwargs in {"plain": {}, "masked": {"collate_fn": CollateDrawing()}}.items():
        expected, runs = _resumed_runs(tmp_path / name, range(INTERVAL + 3, INTERVAL + 4), dataset=tensors, **kwargs)
        ((before, after, _),) = runs.values()
        assert torch.equal(_joined(before + after), _joined(expected)), name


def _joined(batches: list) -> torch.Tensor:
    # TensorDataset batches come as [tensor]; the collate function's as a tensor.
    return torch.cat([batch[0] if isinstance(batch, list) else batch for batch in batches])


@pytest.mark.parametrize(
    ("dataset", "matters"),
    [
        (TensorDataset(torch.zeros(4)), False),
        (list(range(4)), False),
        (torch.utils.data.Subset(TensorDataset(torch.zeros(4)), [0, 1]), False),
        (torch.utils.data.ConcatDataset([TensorDataset(torch.zeros(4)), list(range(4))]), False),  # type: ignore[list-item]
        (torch.utils.data.StackDataset(TensorDataset(torch.zeros(4)), torch.ones(4)), False),  # type: ignore[arg-type]
        (torch.utils.data.Subset(AugmentedReads(Path()), [0, 1]), True),  # indexes a dataset that draws
        (type("MyTensors", (TensorDataset,), {})(torch.zeros(4)), True),  # a subclass may override __getitem__
    ],
)
def test_which_datasets_leave_the_worker_state_unrecorded(dataset, matters):
    assert worker_state_matters(dataset, default_collate) is matters
