"""Data loaders that know their epoch and position, move batches to the device, and resume exactly."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler

from fabricx.data.sampler import distributed_sampler_for
from fabricx.utilities.apply import move_data_to_device
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.seed import global_seed, seed_workers_requested, worker_init_function

if TYPE_CHECKING:
    from fabricx.wrappers import _AccumulationState

_LOADER_SETTINGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def _has_default_batch_sampler(loader: DataLoader) -> bool:
    return loader.batch_size is not None and type(loader.batch_sampler) in (BatchSampler, StatefulBatchSampler)


def build_stateful_loader(
    loader: DataLoader, *, num_replicas: int = 1, rank: int = 0, use_distributed_sampler: bool = True
) -> StatefulDataLoader:
    """A ``StatefulDataLoader`` with the same settings as ``loader`` (and per-rank sampling).

    A ``StatefulDataLoader`` passed in without the need for a distributed sampler is kept as it is.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(
            f"setup_dataloaders expects torch.utils.data.DataLoader objects, got {type(loader).__name__}. "
            "Wrap your dataset in a DataLoader (or torchdata's StatefulDataLoader) first."
        )
    distributed = num_replicas > 1 and use_distributed_sampler
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        if distributed:
            raise FabricxError(
                f"The dataloader reads an IterableDataset ({type(dataset).__name__}); every one of the "
                f"{num_replicas} ranks would read all of it. Split it by rank inside the dataset "
                "(torch.distributed.get_rank()/get_world_size()) and pass use_distributed_sampler=False."
            )
        if isinstance(loader, StatefulDataLoader):
            return loader
        return StatefulDataLoader(dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **_settings(loader))
    if not distributed and isinstance(loader, StatefulDataLoader):
        return loader
    if not _has_default_batch_sampler(loader):
        if distributed:
            raise FabricxError(
                f"The dataloader uses a custom batch_sampler ({type(loader.batch_sampler).__name__}), which "
                "fabricx cannot split across ranks. Give each rank its own batch sampler and pass "
                "use_distributed_sampler=False."
            )
        return StatefulDataLoader(dataset, batch_sampler=loader.batch_sampler, **_settings(loader))
    sampler = loader.sampler
    kwargs = _settings(loader)
    if distributed:
        sampler = distributed_sampler_for(sampler, dataset, num_replicas, rank, seed=global_seed())
        return StatefulDataLoader(
            dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=sampler, **kwargs
        )
    if type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None:
        # torchdata's own RandomSampler records its generator, so the shuffle order resumes too.
        kwargs["generator"] = sampler.generator
        return StatefulDataLoader(dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, shuffle=True, **kwargs)
    if type(sampler) is SequentialSampler:
        return StatefulDataLoader(dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **kwargs)
    return StatefulDataLoader(dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=sampler, **kwargs)


def _settings(loader: DataLoader) -> dict[str, Any]:
    kwargs = {name: getattr(loader, name) for name in _LOADER_SETTINGS if hasattr(loader, name)}
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        if kwargs.get("worker_init_fn") is None and seed_workers_requested():
            kwargs["worker_init_fn"] = functools.partial(worker_init_function, rank=None)
    return kwargs


class FabricDataLoader:
    """A data loader that moves each batch to the device and can save and restore its exact
    position: epoch, batches consumed, shuffle generator and worker states (per rank).

    ``state_dict()``/``load_state_dict()`` make the next ``iter()`` continue with the next unseen
    batch; put the loader into ``fabric.save(path, {"loader": loader, ...})`` to checkpoint it.

    Example::

        loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=32, shuffle=True))
        for batch in loader: ...
        state = loader.state_dict()
    """

    _fabricx_per_rank = True

    def __init__(
        self, loader: StatefulDataLoader, device: torch.device | None, accumulation: _AccumulationState | None = None
    ) -> None:
        self._loader = loader
        self._device = device if device is not None and device.type != "cpu" else None
        self._accumulation = accumulation
        self._epoch = 0
        self._started = False
        self._finished = False
        self._resume_pending = False
        self._yielded = 0
        self._fabricx_unwrapped = loader

    # -- what the user's loader had -------------------------------------------------------------
    @property
    def loader(self) -> StatefulDataLoader:
        return self._loader

    @property
    def epoch(self) -> int:
        """Index of the current (or last) epoch of this loader, counting from 0."""
        return self._epoch

    @property
    def batches_consumed(self) -> int:
        """How many batches of the current epoch were handed out."""
        return self._yielded

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next ``iter()`` starts (shuffle order of distributed samplers)."""
        self._epoch = epoch
        self._started = False
        self._resume_pending = False

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self._resume_pending:
            self._resume_pending = False
        else:
            if self._started:
                self._epoch += 1
            self._yielded = 0
        self._started = True
        self._finished = False
        for holder in (self._loader.sampler, getattr(self._loader.batch_sampler, "sampler", None)):
            set_epoch = getattr(holder, "set_epoch", None)
            if set_epoch is not None:
                set_epoch(self._epoch)
        if self._accumulation is not None:
            self._accumulation.active_loader = self
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        device = self._device
        for batch in self._loader:
            self._yielded += 1
            yield batch if device is None else move_data_to_device(batch, device)
        self._finished = True

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "started": self._started,
            "finished": self._finished,
            "batches_consumed": self._yielded,
            "loader": self._loader.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._epoch = int(state_dict["epoch"])
        self._started = bool(state_dict["started"])
        self._finished = bool(state_dict["finished"])
        self._yielded = int(state_dict.get("batches_consumed", 0))
        self._loader.load_state_dict(state_dict["loader"])
        # Mid-epoch: the next iter() continues this epoch; otherwise it starts the next one.
        self._resume_pending = self._started and not self._finished

    def __repr__(self) -> str:
        return f"FabricDataLoader({self._loader!r}, epoch={self._epoch})"
