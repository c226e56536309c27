"""A shuffled loader with two persistent workers resumes from a checkpoint at the next unseen sample, in a new
loader, reading again only the batches consumed since the last snapshot of its position (one every
``WORKER_SNAPSHOT_INTERVAL`` batches): nothing before it is skipped by iterating."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from fabricx import Fabric
from fabricx.data.worker_state import WORKER_SNAPSHOT_INTERVAL

SAMPLES, BATCH = 48, 4


class LoggedReads(Dataset):
    """Sample ``i`` is ``i``; every read is appended to a file per worker process (workers cannot share a list)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        with open(self.folder / f"reads-{os.getpid()}.txt", "a") as log:
            log.write(f"{index}\n")
        return index


def _reads(folder: Path) -> list[int]:
    return [int(line) for path in folder.glob("reads-*.txt") for line in path.read_text().split()]


def _loader(fabric: Fabric, folder: Path):
    folder.mkdir(exist_ok=True)
    loader = DataLoader(
        LoggedReads(folder), batch_size=BATCH, shuffle=True, num_workers=2, persistent_workers=True,
        generator=torch.Generator().manual_seed(5),
    )
    return fabric.setup_dataloaders(loader)


def test_persistent_workers_resume_exactly_rereading_only_since_the_snapshot(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    expected = [batch.tolist() for batch in _loader(fabric, tmp_path / "uninterrupted")]

    loader = _loader(fabric, tmp_path / "first")
    iterator = iter(loader)
    consumed = [next(iterator).tolist() for _ in range(5)]
    fabric.save(tmp_path / "ckpt", {"loader": loader})
    del iterator, loader

    resumed = _loader(fabric, tmp_path / "second")
    torch.manual_seed(999)  # whatever the process drew since: the checkpoint's state decides the order
    fabric.load(tmp_path / "ckpt", {"loader": resumed})
    rest = [batch.tolist() for batch in resumed]

    assert consumed + rest == expected
    since_snapshot = consumed[len(consumed) - len(consumed) % WORKER_SNAPSHOT_INTERVAL :]
    assert since_snapshot  # 5 batches: all read again from the snapshot at the epoch's start
    read_after = _reads(tmp_path / "second")
    # Each batch since the snapshot and each unseen sample read once; nothing before the snapshot.
    assert sorted(read_after) == sorted(index for batch in since_snapshot + rest for index in batch)
