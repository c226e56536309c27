"""Data loaders that know their epoch and position, move batches to the device, and resume exactly."""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Generator, Iterator, Sized
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler

from fabricx._compat.sampler import given_num_samples
from fabricx._compat.torch_internals import next_pass_resets_workers
from fabricx.data import elastic
from fabricx.data.batching import ResumableBatchSampler, replayed, with_resumable_batches
from fabricx.data.sampler import (
    ElasticDistributedSampler,
    ResumableRandomSampler,
    close_restored_epoch,
    distributed_sampler_for,
)
from fabricx.data.worker_state import WORKER_SNAPSHOT_INTERVAL, with_worker_random_state
from fabricx.utilities.apply import move_data_to_device
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_warn
from fabricx.utilities.rng import (
    capture_loader_rng,
    capture_rng_states,
    restore_loader_rng,
    restore_rng_states,
    set_generator_states,
)
from fabricx.utilities.seed import global_seed, seed_workers_requested, worker_init_function

if TYPE_CHECKING:
    from fabricx.accumulation.state import AccumulationState

# torch DataLoader settings a rebuilt loader carries over (the Accelerate adapter's loaders use them too).
DATALOADER_SETTINGS = (
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
_LOADER_SETTINGS = (*DATALOADER_SETTINGS, "snapshot_every_n_steps")
_STATE_VERSION = 2


def _has_default_batch_sampler(loader: DataLoader) -> bool:
    default_types = (BatchSampler, StatefulBatchSampler, ResumableBatchSampler)
    if loader.batch_size is None and loader.batch_sampler is None:
        return True  # batch_size=None: the dataset yields whole batches, sampled one index at a time
    return loader.batch_size is not None and type(loader.batch_sampler) in default_types


def build_stateful_loader(
    loader: DataLoader,
    *,
    num_replicas: int = 1,
    rank: int = 0,
    use_distributed_sampler: bool = True,
    batch_size: int | None = None,
) -> DataLoader:
    """A ``StatefulDataLoader`` with the same settings as ``loader`` (and per-rank sampling).

    A ``StatefulDataLoader`` passed in without the need for a distributed sampler is kept as it is, and so
    is a loader whose class has its own iteration or state (see `has_own_protocol`): under DDP it gets a
    distributed sampler by being built again with the same arguments, as Lightning Fabric does.
    A rebuilt loader with workers snapshots its position and its workers' state every
    `WORKER_SNAPSHOT_INTERVAL` batches (``snapshot_every_n_steps``; a ``StatefulDataLoader`` passed in keeps its
    own): a resume restores the last snapshot and reads the few batches after it again, to the same batches and
    worker random state. The workers record their random generators only where they can change a batch (see
    `worker_state_matters`). ``batch_size`` replaces the loader's own batch size (a loader with the default batch
    sampler).

    Example:
        ```python
        plain = DataLoader(dataset, batch_size=8, shuffle=True)
        stateful = build_stateful_loader(plain, num_replicas=2, rank=0)
        ```
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(
            f"setup_dataloaders expects torch.utils.data.DataLoader objects, got {type(loader).__name__}. "
            "Wrap your dataset in a DataLoader (or torchdata's StatefulDataLoader) first."
        )
    distributed = num_replicas > 1 and use_distributed_sampler
    if has_own_protocol(loader):
        return _kept_user_loader(loader, distributed, num_replicas, rank, batch_size)
    if batch_size is not None and (not _has_default_batch_sampler(loader) or loader.batch_size is None):
        raise FabricxError(
            "A batch size can only be set for a DataLoader built with batch_size= (not a custom "
            "batch_sampler or batch_size=None); set it on the DataLoader instead."
        )
    dataset = loader.dataset
    # What the rebuilt loader reads: the dataset, seen through a view that records worker generators.
    source = with_worker_random_state(dataset, loader.num_workers, loader.collate_fn)
    if isinstance(dataset, IterableDataset):
        if distributed:
            _note_iterable_dataset(dataset, num_replicas)
        if isinstance(loader, StatefulDataLoader) and batch_size in (None, loader.batch_size):
            return loader
        return _stateful_loader(source, **_batching(loader, batch_size), **_settings(loader))
    if not distributed and isinstance(loader, StatefulDataLoader) and batch_size in (None, loader.batch_size):
        return loader
    if not _has_default_batch_sampler(loader):
        if distributed:
            raise FabricxError(
                f"The dataloader uses a custom batch_sampler ({type(loader.batch_sampler).__name__}), which "
                "fabricx cannot split across ranks. Give each rank its own batch sampler and pass "
                "use_distributed_sampler=False."
            )
        return _stateful_loader(source, batch_sampler=replayed(loader.batch_sampler), **_settings(loader))
    sampler = loader.sampler
    kwargs = _settings(loader)
    if distributed:
        sampler = distributed_sampler_for(
            cast(Sampler, sampler), cast(Sized, dataset), num_replicas, rank, seed=global_seed()
        )
        return _batched(source, loader, batch_size, sampler=sampler, **kwargs)
    if type(sampler) is RandomSampler and "set_epoch" not in vars(sampler):
        # Draws what torch's sampler draws, when it draws it, and records its seed and position. (One the user
        # gave its own set_epoch is kept, so that the epoch reaches it; it resumes as any custom sampler does.)
        sampler = ResumableRandomSampler(
            sampler.data_source, sampler.replacement, given_num_samples(sampler), generator=sampler.generator
        )
        return _batched(source, loader, batch_size, sampler=sampler, **kwargs)
    if type(sampler) is SequentialSampler:
        return _batched(source, loader, batch_size, **kwargs)
    return _batched(source, loader, batch_size, sampler=sampler, **kwargs)


_PROTOCOL_METHODS = ("__iter__", "state_dict", "load_state_dict")


def has_own_protocol(loader: DataLoader) -> bool:
    """Whether ``loader``'s class defines its own iteration or state (``__iter__``, ``state_dict``,
    ``load_state_dict``): such a loader (a streaming loader, say) is kept as it is, not rebuilt.

    Example:
        ```python
        has_own_protocol(DataLoader(dataset))  # False
        # True: it has its own __iter__ and state_dict
        has_own_protocol(StreamingDataLoader(stream))
        ```
    """
    cls = type(loader)
    if cls in (DataLoader, StatefulDataLoader):
        return False
    base = StatefulDataLoader if isinstance(loader, StatefulDataLoader) else DataLoader
    return any(getattr(cls, name, None) is not getattr(base, name, None) for name in _PROTOCOL_METHODS)


def _kept_user_loader(
    loader: DataLoader, distributed: bool, num_replicas: int, rank: int, batch_size: int | None
) -> DataLoader:
    """The user's own loader class, with a per-rank sampler where one is needed (Lightning's rule)."""
    name = type(loader).__name__
    if batch_size is not None and batch_size != loader.batch_size:
        raise FabricxError(
            f"{name} has its own iteration and state, so fabricx keeps it as it is and cannot change its batch "
            "size: build it with the batch size each rank should read, and call setup_dataloaders() without "
            "global_batch_size."
        )
    if isinstance(loader.dataset, IterableDataset):
        if distributed:
            _note_iterable_dataset(loader.dataset, num_replicas)
        return loader
    if not distributed or isinstance(loader.sampler, DistributedSampler):
        return loader
    if not _has_default_batch_sampler(loader):
        raise FabricxError(
            f"{name} uses a custom batch_sampler ({type(loader.batch_sampler).__name__}), which fabricx cannot "
            "split across ranks. Give each rank its own batch sampler and pass use_distributed_sampler=False."
        )
    sampler = distributed_sampler_for(
        cast(Sampler, loader.sampler), cast(Sized, loader.dataset), num_replicas, rank, seed=global_seed()
    )
    return _reinstantiated(loader, sampler)


def _reinstantiated(loader: DataLoader, sampler: Sampler) -> DataLoader:
    """A new instance of ``loader``'s class with the same arguments (read back from its attributes) and
    ``sampler``, as Lightning Fabric rebuilds a DataLoader subclass to give it a distributed sampler."""
    cls = type(loader)
    parameters = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    kwargs: dict[str, Any] = {}
    missing: list[str] = []
    for name, parameter in list(parameters.items())[1:]:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if name in ("sampler", "batch_sampler", "shuffle"):
            continue
        if hasattr(loader, name):
            kwargs[name] = getattr(loader, name)
        elif parameter.default is inspect.Parameter.empty:
            missing.append(name)
    if takes_any:  # the rest goes on to DataLoader: the settings it was built with
        for name in ("dataset", "batch_size", "drop_last", *DATALOADER_SETTINGS):
            if name not in kwargs and hasattr(loader, name) and name in inspect.signature(DataLoader).parameters:
                kwargs[name] = getattr(loader, name)
        if loader.num_workers > 0:
            kwargs.setdefault("prefetch_factor", loader.prefetch_factor)
    if missing or not (takes_any or "sampler" in parameters):
        reason = f"it keeps no attribute for {', '.join(missing)}" if missing else "its __init__ takes no sampler"
        raise FabricxError(
            f"{cls.__name__} needs a distributed sampler on several processes, but fabricx cannot rebuild it "
            f"({reason}). Pass a torch.utils.data.DistributedSampler to it yourself and call "
            "setup_dataloaders(..., use_distributed_sampler=False)."
        )
    return cls(sampler=sampler, **kwargs)


_ITERABLE_NOTED = False


def _note_iterable_dataset(dataset: IterableDataset, num_replicas: int) -> None:
    """Say once per process that an IterableDataset is read as it is, on every rank (Lightning's rule)."""
    global _ITERABLE_NOTED
    if _ITERABLE_NOTED:
        return
    _ITERABLE_NOTED = True
    rank_zero_info(
        f"The dataloader reads an IterableDataset ({type(dataset).__name__}): no distributed sampler is "
        f"added, so each of the {num_replicas} ranks reads what the dataset yields in that rank. Split the "
        "stream by rank inside the dataset (torch.distributed.get_rank()/get_world_size()) unless it does so "
        "already."
    )


def _batching(loader: DataLoader, batch_size: int | None = None) -> dict[str, Any]:
    return {"batch_size": loader.batch_size if batch_size is None else batch_size, "drop_last": loader.drop_last}


def _stateful_loader(*args: Any, **kwargs: Any) -> StatefulDataLoader:
    """A ``StatefulDataLoader`` built without torchdata's own ``'set_vital' is deprecated`` warning.

    torchdata calls a deprecated torch function in its constructor: a warning about torchdata's internals the user
    can do nothing about. Only that message is filtered, only here; every other warning still shows.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
        return StatefulDataLoader(*args, **kwargs)


def _batched(source: Any, loader: DataLoader, batch_size: int | None, **kwargs: Any) -> StatefulDataLoader:
    """A ``StatefulDataLoader`` over the map-style ``source``, batching like ``loader`` (or by ``batch_size``)."""
    return with_resumable_batches(_stateful_loader(source, **_batching(loader, batch_size), **kwargs))


def _with_sampler(loader: StatefulDataLoader, sampler: Any, batch_size: int | None = None) -> StatefulDataLoader:
    """A ``StatefulDataLoader`` like ``loader`` (same dataset view and settings) reading ``sampler``."""
    return _batched(loader.dataset, loader, batch_size, sampler=sampler, **_settings(loader))


def _settings(loader: DataLoader) -> dict[str, Any]:
    kwargs = {name: getattr(loader, name) for name in _LOADER_SETTINGS if hasattr(loader, name)}
    kwargs.setdefault("snapshot_every_n_steps", WORKER_SNAPSHOT_INTERVAL)
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        if kwargs.get("worker_init_fn") is None and seed_workers_requested():
            kwargs["worker_init_fn"] = functools.partial(worker_init_function, rank=None)
    return kwargs


def _loader_generators(loader: DataLoader) -> list[torch.Generator]:
    """The CPU generators whose draws decide the order and worker seeds (deduplicated, fixed order)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    holders = (loader, loader.sampler, batch_sampler, getattr(batch_sampler, "sampler", None))
    found: list[torch.Generator] = []
    for holder in holders:
        generator = getattr(holder, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


class FabricDataLoader:
    """A data loader that moves each batch to the device and can save and restore its exact
    position: epoch, batches consumed, shuffle generators and worker states (per rank).

    ``state_dict()``/``load_state_dict()`` make the next ``iter()`` continue with the next unseen
    batch; put the loader into ``fabric.save(path, {"loader": loader, ...})`` to checkpoint it.
    The random state at the start of the current epoch is part of the state, so samplers that draw
    their order from the global generators (custom samplers, ``WeightedRandomSampler``) resume with
    the same order, and resuming draws nothing from the generators the training loop uses.

    Example:
        ```python
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        loader = fabric.setup_dataloaders(loader)
        for batch in loader: ...
        state = loader.state_dict()
        ```
    """

    _fabricx_per_rank = True

    def __init__(
        self,
        loader: DataLoader,
        device: torch.device | None,
        accumulation: AccumulationState | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        # A StatefulDataLoader fabricx built, or a user's loader kept as it is (see has_own_protocol()).
        self._loader: Any = loader
        self._target_device = device
        self._device = device if device is not None and device.type != "cpu" else None
        self._accumulation = accumulation
        self._rank = rank
        self._world_size = world_size
        self._generators = _loader_generators(loader)
        self._epoch = 0
        self._started = False
        self._finished = False
        self._resume_pending = False
        # Whether the inner loader holds an iterator restored inside a pass (until the next iter()).
        self._restored_pass = False
        # Restored at the last batch of an epoch at another number of processes: the next iter() ends that epoch.
        self._nothing_left = False
        self._yielded = 0
        # After a resume at another number of processes: the batches this rank's share of the epoch
        # would have had before the remainder it reads now (so len() and batches_consumed keep their
        # meaning for a whole epoch at this size).
        self._batch_offset = 0
        # Whether the inner loader holds an iterator of the current epoch (built or restored).
        self._inner_live = False
        # `state_dict()` as it was when `shutdown_workers()` let the pass's iterator go (until the next pass).
        self._parked_state: dict[str, Any] | None = None
        # Random state just before this epoch's iterator was built (replayed when resuming it).
        self._epoch_start: dict[str, Any] | None = None
        # len() when the current epoch's iterator was built: read by accumulation windows, which
        # would otherwise ask the loader, batch sampler and sampler for it once per window.
        self.epoch_batches: int | None = None
        self._fabricx_unwrapped = loader
        # A loader class with its own iteration and state is iterated as it is; its own state_dict() is
        # what a checkpoint holds of it (fabricx adds only its epoch and batch counters).
        self._kept = has_own_protocol(loader)
        self._own_state_noted = False

    # -- what the user's loader had -------------------------------------------------------------
    @property
    def loader(self) -> DataLoader:
        """The loader batches come from: a torchdata ``StatefulDataLoader`` fabricx built, or the user's own
        loader where its class has its own iteration or state."""
        return self._loader

    @property
    def device(self) -> torch.device | None:
        """Where batches are moved (``None`` with ``setup_dataloaders(..., move_to_device=False)``)."""
        return self._target_device

    @property
    def epoch(self) -> int:
        """Index of the current (or last) epoch of this loader, counting from 0."""
        return self._epoch

    @property
    def batches_consumed(self) -> int:
        """How many batches of the current epoch were handed out (after a resume at another number of
        processes: counted as if this rank had read its share of the whole epoch at this size)."""
        return self._yielded

    @property
    def samples_consumed(self) -> int | None:
        """Samples of the current epoch's order consumed by all ranks together (``None`` when the
        loader's order cannot be described independently of the process count).

        Example:
            ```python
            loader.samples_consumed  # 24 after 2 batches of 6 on each of 2 ranks
            ```
        """
        order = None if self._kept else elastic.describe_order(self._loader)
        if order is None or not self._started:
            return None if order is None else 0
        return elastic.consumed_samples(self._loader, order, self._yielded - self._batch_offset)

    def __len__(self) -> int:
        return len(self._loader) + self._batch_offset

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)

    def end_pass(self) -> None:
        """Stop reading the pass in progress: the next ``iter()`` starts the next epoch, also right after a resume
        inside a pass (where it would otherwise continue the restored pass).

        Example:
            ```python
            fabric.load(path, state)  # saved in the middle of an epoch
            loader.end_pass()  # this run starts with the next epoch instead
            ```
        """
        self._resume_pending = False

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next ``iter()`` starts (shuffle order of distributed samplers)."""
        if self._resume_pending and epoch == self._epoch:
            return  # a loop that tells the loader its epoch again as it resumes: the restored position stays
        self._parked_state = None
        self._epoch = epoch
        self._started = False
        self._resume_pending = False

    def _set_sampler_epoch(self) -> None:
        sampler = self._loader.sampler
        inner = getattr(self._loader.batch_sampler, "sampler", None)
        # The batch sampler of automatic batching wraps the loader's sampler: that one is told once.
        for holder in (sampler,) if inner is sampler else (sampler, inner):
            set_epoch = getattr(holder, "set_epoch", None)
            if set_epoch is not None:
                set_epoch(self._epoch)

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._parked_state = None
        resuming = self._resume_pending
        self._resume_pending = False
        if resuming and self._nothing_left:
            self._nothing_left = False
            self._finished = True
            return iter(())
        self._nothing_left = False
        if self._restored_pass and not resuming:
            # A pass restored from a checkpoint that is not continued (set_epoch(), end_pass()): torchdata would hand
            # out the restored iterator again, so it is let go and the next pass starts from its beginning.
            self._loader.load_state_dict({})
        self._restored_pass = False
        if not resuming:
            # A restored sampler position is read by the sampler's next iter() (torchdata's keeps it on the sampler),
            # which happens at the first batch asked for: a restored pass let go (set_epoch(), end_pass()) or
            # continued without asking for a batch (a combined loader's pass already at its end) must not carry it
            # into this one.
            for sampler in self._samplers():
                close_restored_epoch(sampler)
            if self._started:
                self._epoch += 1
            self._yielded = 0
            self._batch_offset = 0
        self._started = True
        self._finished = False
        self._set_sampler_epoch()
        if not resuming:
            self._epoch_start = {
                **capture_loader_rng(self._generators),
                "workers_reset": next_pass_resets_workers(self._loader),
            }
        # Built now (not at the first next()) so the draws it makes happen at a well-defined point;
        # when resuming, load_state_dict() already built it and this reuses it.
        iterator = iter(self._loader)
        self._inner_live = True
        try:
            self.epoch_batches = len(self)
        except TypeError:
            self.epoch_batches = None
        return self._iterate(iterator)

    def _iterate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        device = self._device
        accumulation = self._accumulation
        for batch in iterator:
            self._yielded += 1
            if accumulation is not None:
                # The loader that yielded the current batch measures accumulation windows (a
                # validation loader iterated in between must not).
                accumulation.set_active_loader(self)
            yield batch if device is None else move_data_to_device(batch, device)
        self._finished = True

    def shutdown_workers(self) -> None:
        """End the worker processes of the current pass now, keeping its exact position.

        ``state_dict()`` answers as before, so a checkpoint written afterwards still resumes at the next unseen
        batch; the next ``iter()`` starts new workers. The Trainer calls this when ``fit``, ``validate``,
        ``test`` or ``predict`` returns, as Lightning ends its loaders' workers then. A loop of your own needs it
        only to end the processes before you drop the loader (a pass read to its end ends its workers itself,
        unless they are persistent).

        Example:
            ```python
            for step, batch in enumerate(loader):
                if step == max_steps:
                    break
            loader.shutdown_workers()
            ```
        """
        if self._kept or not self._inner_live or getattr(self._loader, "num_workers", 0) == 0:
            return
        parked = self.state_dict()
        # torchdata's StatefulDataLoader lets go of its iterator on load_state_dict; with no other reference
        # left, torch's iterator ends its workers as it is freed (its queues still open, so at once).
        self._loader.load_state_dict({})
        self._inner_live = False
        self._parked_state = parked

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position and random state of this rank's loader (plain values and tensors).

        ``position`` holds the world-size-independent part: how the epoch's order is made and how many
        of its samples all ranks together consumed, so that a run with another number of processes
        can deal exactly the remaining ones.
        """
        if self._parked_state is not None:
            return dict(self._parked_state)
        if self._kept:
            return self._kept_state()
        try:
            num_batches: int | None = len(self)
        except TypeError:
            num_batches = None
        order = elastic.describe_order(self._loader)
        position = None
        if order is not None:
            consumed = self.samples_consumed if self._started else 0
            position = {"order": order, "consumed": consumed}
        return {
            "version": _STATE_VERSION,
            "epoch": self._epoch,
            "started": self._started,
            "finished": self._finished,
            "batches_consumed": self._yielded,
            "batch_offset": self._batch_offset,
            "num_batches": num_batches,
            "position": position,
            "rank": self._rank,
            "world_size": self._world_size,
            "epoch_start": self._epoch_start,
            "generators": [g.get_state() for g in self._generators],
            # Asking a StatefulDataLoader without an iterator for its state builds one, which draws
            # from the random generators; a save must not change the run, so nothing is asked then.
            "loader": self._loader.state_dict() if self._inner_live else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a `state_dict()`; the next ``iter()`` continues with the next unseen batch."""
        if "loader" not in state_dict or "epoch" not in state_dict:
            raise FabricxError(
                f"This is not a fabricx data loader state (keys: {sorted(state_dict)}). Pass what "
                "FabricDataLoader.state_dict() returned, or load the checkpoint through fabric.load()."
            )
        self._parked_state = None
        self._epoch = int(state_dict["epoch"])
        self._started = bool(state_dict["started"])
        self._finished = bool(state_dict["finished"])
        self._yielded = int(state_dict.get("batches_consumed", 0))
        self._batch_offset = int(state_dict.get("batch_offset", 0))
        self._epoch_start = state_dict.get("epoch_start")
        self._resume_pending = self._nothing_left = False
        self._inner_live = False
        if self._kept:
            self._load_kept_state(state_dict)
            return
        saved_world = int(state_dict.get("world_size", self._world_size))
        position = state_dict.get("position")
        current = elastic.describe_order(self._loader)
        if (
            position is not None
            and current is not None
            and (saved_world != self._world_size or position["order"]["kind"] != current["kind"])
        ):
            self._resume_elsewhere(state_dict, position, saved_world)
            return
        if saved_world != self._world_size:
            self._adapt_to_new_world_size(state_dict, saved_world)
            return
        saved_generators = list(state_dict.get("generators") or [])
        if len(saved_generators) != len(self._generators):
            raise FabricxError(
                f"The saved loader state has {len(saved_generators)} random generator(s) but this loader has "
                f"{len(self._generators)}: it was built differently (shuffle, sampler or generator changed). "
                "Build the loader with the same settings as the run that saved it."
            )
        inner = state_dict["loader"]
        if inner is None:
            # No iterator to restore; the generators (e.g. a shuffle seed drawn when the loader was
            # built) still decide the next epoch's order.
            set_generator_states(self._generators, saved_generators)
            return
        # Also restored when the epoch is over, or when set_epoch() was called after it (not started): persistent
        # workers then go on from their own state, and the next epoch's iterator is made as in the saving run.
        self._set_sampler_epoch()
        self._loader.load_state_dict(inner)
        with self._replaying_epoch_start(saved_generators):
            # state_dict() builds the restored iterator now; the next iter() reuses it.
            self._loader.state_dict()
        self._inner_live = True
        # Mid-epoch: the next iter() continues this epoch; otherwise it starts the next one.
        self._resume_pending = self._restored_pass = self._started and not self._finished
        if not self._resume_pending:
            for sampler in self._samplers():
                close_restored_epoch(sampler)

    def _samplers(self) -> list[Any]:
        """The loader's sampler and its batch sampler's, each once."""
        batch_sampler = getattr(self._loader, "batch_sampler", None)
        found: list[Any] = []
        for sampler in (self._loader.sampler, batch_sampler, getattr(batch_sampler, "sampler", None)):
            if sampler is not None and all(sampler is not s for s in found):
                found.append(sampler)
        return found

    @contextlib.contextmanager
    def _replaying_epoch_start(self, saved_generators: list[Any]) -> Generator[None, None, None]:
        """Rebuild this epoch's iterator under the random state it was first built with, then put the
        global generators back as they are now and the loader's own as they were when saved."""
        current = capture_rng_states(cuda=False)
        start = self._epoch_start
        loader_generator = self._loader.generator
        if start is not None:
            restore_loader_rng(start, self._generators, strict=False)
            if start.get("workers_reset"):
                # The pass reset persistent workers, which draws nothing; the iterator rebuilt here is new and draws
                # its workers' base seed before the sampler draws its order: from a generator of its own (the base
                # seed itself comes from the snapshot).
                self._loader.generator = torch.Generator()
        try:
            yield
        finally:
            self._loader.generator = loader_generator
            restore_rng_states(current)
            set_generator_states(self._generators, saved_generators)

    def _resume_elsewhere(self, state_dict: dict[str, Any], position: dict[str, Any], saved_world: int) -> None:
        """Continue a position saved by another number of processes (or another kind of order):
        the same epoch order, without the samples all ranks consumed, dealt across this run's ranks."""
        saved = position["order"]
        if (
            self._world_size == 1
            and saved["kind"] == "distributed"
            and not isinstance(self._loader.sampler, ElasticDistributedSampler)
        ):
            # One process continuing a multi-process order: read it through the same sampler, 1 replica.
            self._replace_loader(elastic.single_process_replacement(saved, self._loader.dataset))
        current = elastic.describe_order(self._loader)
        assert current is not None
        elastic.check_same_order(saved, current)
        consumed = int(position["consumed"] or 0)
        self._batch_offset = 0
        self._yielded = 0
        if not self._started or self._finished or consumed >= int(saved["length"]):
            # Nothing of the epoch left: the next epoch's order depends only on the seed and the epoch number.
            if self._started and not self._finished:
                with contextlib.suppress(TypeError):  # the whole epoch was read, counted at this size
                    self._yielded = len(self._loader)
            self._end_restored_epoch()
            return
        sampler = self._loader.sampler
        if not isinstance(sampler, ElasticDistributedSampler):
            raise FabricxError(
                f"This loader state was saved by {saved_world} process(es) in the middle of epoch {self._epoch}; "
                f"continuing it on {self._world_size} needs the distributed sampler fabricx builds for a "
                f"shuffled or sequential DataLoader, but this loader reads a {type(sampler).__name__}."
            )
        if consumed > 0:  # (none consumed yet: the epoch is read from its start, in this run's order)
            sampler.resume_epoch(self._epoch, consumed, elastic.saved_epoch_order(saved))
        self._set_sampler_epoch()
        self._batch_offset = elastic.full_epoch_batches(self._loader) - len(self._loader)
        self._yielded = self._batch_offset
        saved_generators = list(state_dict.get("generators") or [])
        if len(saved_generators) != len(self._generators):
            saved_generators = [g.get_state() for g in self._generators]
        with self._replaying_epoch_start(saved_generators):
            self._loader.state_dict()  # builds this epoch's iterator now; the next iter() reuses it
        self._inner_live = True
        self._resume_pending = self._restored_pass = True

    def _replace_loader(self, sampler: Any) -> None:
        self._loader = _with_sampler(self._loader, sampler)
        self._fabricx_unwrapped = self._loader
        self._generators = _loader_generators(self._loader)

    def _adapt_to_new_world_size(self, state_dict: dict[str, Any], saved_world: int) -> None:
        num_batches = state_dict.get("num_batches")
        at_boundary = (
            not self._started or self._finished or (num_batches is not None and self._yielded >= int(num_batches))
        )
        if not at_boundary:
            raise FabricxError(
                f"This loader state was saved by rank {state_dict.get('rank')} of {saved_world} processes "
                f"in the middle of epoch {self._epoch} (batch {self._yielded} of {num_batches}); this run "
                f"has {self._world_size} processes, which split the data differently, so the exact next "
                f"sample cannot be found. Resume with {saved_world} processes, or resume on "
                f"{self._world_size} from a checkpoint saved at the end of an epoch."
            )
        # At an epoch end nothing but the epoch carries over: the next epoch's order depends only on the seed
        # and the epoch number.
        self._end_restored_epoch()

    def _end_restored_epoch(self) -> None:
        """A restored epoch with nothing left to read. Saved after its ``for`` loop ended, the next ``iter()``
        starts the next epoch; saved at its last batch, still inside the loop, the next ``iter()`` is that loop's
        continuation and yields nothing, as the uninterrupted run's did."""
        self._epoch_start = None
        if self._started and not self._finished:
            self._resume_pending = self._nothing_left = True
            return
        self._finished = self._started

    # -- a loader kept as the user built it ---------------------------------------------------------------
    def _kept_state(self) -> dict[str, Any]:
        try:
            num_batches: int | None = len(self)
        except TypeError:
            num_batches = None
        return {
            "version": _STATE_VERSION,
            "kept": True,
            "epoch": self._epoch,
            "started": self._started,
            "finished": self._finished,
            "batches_consumed": self._yielded,
            "batch_offset": 0,
            "num_batches": num_batches,
            "position": None,
            "rank": self._rank,
            "world_size": self._world_size,
            "epoch_start": None,
            "generators": [g.get_state() for g in self._generators],
            "loader": self._own_loader_state(),
        }

    def _own_loader_state(self) -> Any:
        """The loader's own ``state_dict()`` where it follows the ``state_dict()``/``load_state_dict()``
        protocol (what Lightning Fabric saves of it); ``None`` when it has none or needs arguments."""
        loader = self._loader
        get, put = getattr(loader, "state_dict", None), getattr(loader, "load_state_dict", None)
        if not callable(get) or not callable(put):
            return None
        needed = [
            name
            for name, p in inspect.signature(get).parameters.items()
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if not needed:
            return get()
        if not self._own_state_noted:
            self._own_state_noted = True
            rank_zero_warn(
                f"{type(loader).__name__}.state_dict() takes arguments ({', '.join(needed)}), so a checkpoint of "
                "this loader holds its epoch and batch counters only, not the loader's own state. Call "
                "loader.state_dict(...) yourself and put the result into the state you save."
            )
        return None

    def _load_kept_state(self, state_dict: dict[str, Any]) -> None:
        saved_generators = list(state_dict.get("generators") or [])
        if len(saved_generators) == len(self._generators):
            set_generator_states(self._generators, saved_generators)
        inner = state_dict.get("loader")
        if inner is not None:
            self._loader.load_state_dict(inner)  # saved by _own_loader_state(), which checked it exists
        if not self._started or self._finished:
            return
        sampler = self._loader.sampler
        batch_size = self._loader.batch_size
        if isinstance(sampler, ElasticDistributedSampler) and batch_size and self._yielded:
            # fabricx built this rank's sampler: the loader reads on from the next unseen sample.
            sampler.load_state_dict({"epoch": self._epoch, "yielded": self._yielded * batch_size})
        self._resume_pending = True  # the next iter() continues this epoch (its counters)

    def __repr__(self) -> str:
        return f"FabricDataLoader({self._loader!r}, epoch={self._epoch})"
