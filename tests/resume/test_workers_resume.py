"""A shuffled loader with two persistent workers resumes from a checkpoint at the next unseen sample, in a new
loader, without reading again what was consumed before the save (the position is in the checkpoint; nothing is
skipped by iterating)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from fabricx import Fabric

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


def test_persistent_workers_resume_exactly_without_rereading(tmp_path: Path) -> None:
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
    seen_before = {index for batch in consumed for index in batch}
    read_after = _reads(tmp_path / "second")
    assert sorted(read_after) == sorted(index for batch in rest for index in batch)  # each unseen sample once
    assert not seen_before & set(read_after)
