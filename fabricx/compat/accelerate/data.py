"""Prepared data loaders for the Accelerate adapter, with Accelerate's semantics: one order from the
user's generator, whole batches dealt to the processes in turn (or split, or dispatched from the main
process), the last round evened out, and an exact position for ``save_state``/``load_state``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from fabricx._compat.sampler import given_num_samples
from fabricx.compat.accelerate.elastic import consumed_samples, rank_batches_of_the_rest, resizable_batch_sampler
from fabricx.compat.accelerate.sharding import (
    BatchShard,
    IterableShard,
    SeedableRandomSampler,
    check_split_batches,
    loader_sampler,
)
from fabricx.data.loader import DATALOADER_SETTINGS
from fabricx.utilities.apply import move_data_to_device
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.rng import capture_loader_rng, restore_loader_rng, set_generator_states

__all__ = ["AcceleratedDataLoader", "GradientState", "LoaderOptions", "SkipBatchesLoader"]

_STATE_VERSION = 2


class GradientState:
    """What Accelerate's ``accelerator.gradient_state`` tells a loop: the loader being read (innermost
    last), whether its last batch was handed out, and how many real samples the last round holds.

    Example:
        ```python
        if accelerator.gradient_state.end_of_dataloader: ...
        ```
    """

    def __init__(self, num_steps: int = 1, adjust_scheduler: bool = True, sync_with_dataloader: bool = True) -> None:
        self.dataloaders: list[AcceleratedDataLoader] = []
        self.num_steps = num_steps
        self.adjust_scheduler = adjust_scheduler
        self.sync_with_dataloader = sync_with_dataloader
        self.sync_gradients = True

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        """Accelerate's setter, which its ``Accelerator.accumulate`` and Transformers' ``Trainer`` call."""
        self.sync_gradients = sync_gradients

    @classmethod
    def _reset_state(cls) -> None:
        """Accelerate's singleton reset; each fabricx Accelerator has its own state, so nothing to do."""

    @property
    def active_dataloader(self) -> AcceleratedDataLoader | None:
        return self.dataloaders[-1] if self.dataloaders else None

    @property
    def in_dataloader(self) -> bool:
        return bool(self.dataloaders)

    @property
    def end_of_dataloader(self) -> bool:
        loader = self.active_dataloader
        return False if loader is None else loader.end_of_dataloader

    @property
    def remainder(self) -> int:
        loader = self.active_dataloader
        return -1 if loader is None else loader.remainder

    def _remove(self, loader: AcceleratedDataLoader) -> None:
        for index in range(len(self.dataloaders) - 1, -1, -1):
            if self.dataloaders[index] is loader:
                del self.dataloaders[index]
                return


@dataclass
class LoaderOptions:
    """How `AcceleratedDataLoader` shares a loader between processes (Accelerate's options)."""

    num_processes: int = 1
    process_index: int = 0
    device: torch.device | None = None
    split_batches: bool = False
    even_batches: bool = True
    dispatch_batches: bool | None = None
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    #: ``use_stateful_dataloader=True``: the first pass's iterator is built at ``prepare`` time, as
    #: torchdata's StatefulDataLoader builds it there for its first ``state_dict()``.
    iterator_at_prepare: bool = False


class _PlannedBatches:
    """A batch sampler that draws the whole pass's batches at once (so the draws happen at a known
    moment), tells ``on_planned``, then hands them out from batch ``skip`` on. ``replan`` (once)
    draws the pass's batches instead (a pass continued at another number of processes)."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.skip = 0
        self.on_planned: Callable[[], None] | None = None
        self.replan: Callable[[], list[Any]] | None = None
        self.plans_drawn = 0

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        replan, self.replan = self.replan, None
        plan = list(self.batch_sampler) if replan is None else replan()
        self.plans_drawn += 1
        skip, self.skip = self.skip, 0
        hook, self.on_planned = self.on_planned, None
        if hook is not None:
            hook()
        yield from plan[skip:]


def _plain_batch(batch: Any) -> bool:
    """Whether a checkpoint can hold ``batch`` as data: tensors, numbers and strings in lists, tuples and dicts."""
    if batch is None or isinstance(batch, Tensor | int | float | str | bool):
        return batch is not None
    if isinstance(batch, list | tuple):
        return all(_plain_batch(item) for item in batch)
    if isinstance(batch, dict):
        return all(isinstance(key, str) and _plain_batch(value) for key, value in batch.items())
    return False


def _concatenate(batches: list[Any]) -> Any:
    first = batches[0]
    if isinstance(first, Tensor):
        return torch.cat(batches)
    if isinstance(first, dict):
        return type(first)({key: _concatenate([b[key] for b in batches]) for key in first})
    if isinstance(first, tuple | list):
        if (
            first
            and all(isinstance(b, list | tuple) and len(b) == len(first) for b in batches)
            and any(isinstance(x, Tensor | dict | list | tuple) for x in first)
        ):
            parts = [_concatenate([b[i] for b in batches]) for i in range(len(first))]
            return type(first)(parts) if isinstance(first, list) else tuple(parts)
        return [item for b in batches for item in b]
    raise TypeError(
        f"dispatch_batches=True joins batches of tensors (or dicts/lists/tuples of them); got {type(first).__name__}. "
        "Use dispatch_batches=False so every process reads its own batches."
    )


def _slice(batch: Any, part: slice) -> Any:
    if isinstance(batch, Tensor | list):
        return batch[part]
    if isinstance(batch, dict):
        return type(batch)({key: _slice(value, part) for key, value in batch.items()})
    if isinstance(batch, tuple):
        return tuple(_slice(value, part) for value in batch)
    return batch


def _batch_length(batch: Any) -> int:
    if isinstance(batch, Tensor | list):
        return len(batch)
    if isinstance(batch, dict):
        return _batch_length(next(iter(batch.values())))
    if isinstance(batch, tuple):
        return _batch_length(batch[0])
    raise TypeError(f"Cannot tell the batch size of a {type(batch).__name__}.")


class AcceleratedDataLoader:
    """A loader returned by ``Accelerator.prepare``: this process's share of the data as Accelerate gives
    it, batches on the device, and an exact position (``state_dict``/``load_state_dict``).

    * One process: exactly the user's loader (same order, same random draws).
    * Several processes: the user's batches dealt to the processes in turn, so gathering a step's
      batches gives consecutive data (``split_batches=True`` cuts each batch instead); a shuffling
      sampler without a generator gets one seeded from the global generator at ``prepare`` time and
      its state is copied from the main process at the start of every pass; an ``IterableDataset`` is
      read whole by the main process and its batches sent to the others (``dispatch_batches``, the
      default for them) or read by every process, each keeping its slice.

    Example:
        ```python
        loader = accelerator.prepare(DataLoader(dataset, batch_size=8, shuffle=True))
        for inputs, targets in loader: ...
        ```
    """

    # Each process's position is its own in a checkpoint: the batch it read ahead is its share of the data.
    _fabricx_per_rank = True

    def __init__(self, loader: DataLoader, options: LoaderOptions, gradient_state: GradientState) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f"prepare() expects a torch DataLoader, got {type(loader).__name__}.")
        self._loader = loader
        self._options = options
        self._gradient_state = gradient_state
        self.on_batch: Callable[[AcceleratedDataLoader], None] | None = None
        n = options.num_processes
        dataset = loader.dataset
        self._iterable = isinstance(dataset, IterableDataset)
        dispatch = options.dispatch_batches
        if dispatch is None:
            dispatch = self._iterable and options.device is not None
        self._dispatch = bool(dispatch) and n > 1
        self._synchronized: torch.Generator | None = None
        kwargs = {name: getattr(loader, name) for name in DATALOADER_SETTINGS if hasattr(loader, name)}
        if loader.num_workers > 0:
            kwargs["prefetch_factor"] = loader.prefetch_factor
        self._planned: _PlannedBatches | None = None
        self.dataset = dataset
        self.batch_sampler: Any = None
        self._inner = self._build_iterable(loader, kwargs) if self._iterable else self._build_map_style(loader, kwargs)
        self._generators = self._find_generators()
        self.iteration = 0
        self.end_of_dataloader = False
        self.remainder = -1
        self._yielded = 0
        self._in_pass = False
        self._resume: dict[str, Any] | None = None
        self._pass_start: dict[str, Any] | None = None
        # The batch read ahead of the one handed out (Accelerate reads one ahead to know the last batch): it was
        # read, its random draws made, before the step that a checkpoint follows, so the checkpoint holds it.
        self._lookahead: Any = None
        # A pass continued from another number of processes: samples consumed, and steps counted, before it.
        self._consumed_base = 0
        self._yielded_base = 0
        self._prebuilt: tuple[Iterator[Any], dict[str, Any], int] | None = None
        # Continuing the pass of one process, whose shuffle drew from the global generator, on several.
        self._order_of_one_process = False
        if options.iterator_at_prepare:
            self._build_first_iterator()

    # -- building the per-process loader ---------------------------------------------------------
    def _build_map_style(self, loader: DataLoader, kwargs: dict[str, Any]) -> DataLoader:
        options, n = self._options, self._options.num_processes
        sampler_is_batch_sampler = isinstance(loader.sampler, BatchSampler)
        batch_sampler: Any = loader.sampler if sampler_is_batch_sampler else loader.batch_sampler
        sampler: Any = loader_sampler(loader)
        if isinstance(sampler, RandomSampler) and options.use_seedable_sampler:
            seedable = SeedableRandomSampler(
                sampler.data_source,
                replacement=sampler.replacement,
                num_samples=given_num_samples(sampler),
                generator=sampler.generator,
                data_seed=options.data_seed,
            )
            batch_sampler = copy.copy(batch_sampler)
            batch_sampler.sampler = seedable
            sampler = seedable
        elif n > 1 and not self._dispatch and sampler is not None and hasattr(sampler, "generator"):
            if sampler.generator is None:
                # Accelerate's convention: one generator for the sampler, seeded from the global one now,
                # and copied from the main process at the start of every pass.
                sampler.generator = torch.Generator()
                sampler.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            self._synchronized = sampler.generator
        self._user_sampler = sampler
        if n > 1 and not self._dispatch:
            batch_sampler = BatchShard(
                batch_sampler,
                num_processes=n,
                process_index=options.process_index,
                split_batches=options.split_batches,
                even_batches=options.even_batches,
            )
        elif options.split_batches and n > 1:
            check_split_batches(getattr(batch_sampler, "batch_size", None), n)
        self.batch_sampler = batch_sampler
        self._planned = _PlannedBatches(batch_sampler)
        if sampler_is_batch_sampler:
            return DataLoader(loader.dataset, sampler=self._planned, batch_size=None, **kwargs)
        return DataLoader(loader.dataset, batch_sampler=self._planned, **kwargs)

    def _build_iterable(self, loader: DataLoader, kwargs: dict[str, Any]) -> DataLoader:
        options, n = self._options, self._options.num_processes
        dataset = loader.dataset
        batch_size = loader.batch_size
        self._user_sampler = None
        if n > 1 and not self._dispatch:
            generator = getattr(dataset, "generator", None)
            if isinstance(generator, torch.Generator):
                self._synchronized = generator
            dataset = IterableShard(
                dataset,
                batch_size=batch_size or 1,
                drop_last=loader.drop_last,
                num_processes=n,
                process_index=options.process_index,
                split_batches=options.split_batches,
            )
            if options.split_batches and batch_size is not None:
                batch_size //= n
        elif self._dispatch and options.split_batches and batch_size is not None:
            check_split_batches(batch_size, n)
        self.dataset = dataset
        return DataLoader(dataset, batch_size=batch_size, drop_last=loader.drop_last, **kwargs)

    def _find_generators(self) -> list[torch.Generator]:
        found: list[torch.Generator] = []
        holders = (self._loader, self._user_sampler, self._loader.dataset)
        for generator in [getattr(h, "generator", None) for h in holders] + [self._synchronized]:
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
                found.append(generator)
        return found

    def _build_first_iterator(self) -> None:
        """Accelerate's stateful loader asks torchdata's StatefulDataLoader for a ``state_dict()`` when it is
        built, which builds the first pass's iterator then (drawing the loader's base seed from the global
        generator, and with workers the whole order) and hands it out at the first ``iter()``. Doing the same
        keeps the global generator's draws where Accelerate's are, so later loaders and user draws match."""
        before = capture_loader_rng(self._generators)
        plans = self._planned.plans_drawn if self._planned is not None else 0
        self._prebuilt = (iter(self._inner), before, plans)

    # -- what the user's loader had ----------------------------------------------------------------
    @property
    def base_dataloader(self) -> DataLoader:
        """The torch loader this process reads."""
        return self._inner

    @property
    def batch_size(self) -> int | None:
        return self._loader.batch_size

    @property
    def sampler(self) -> Any:
        return self._inner.sampler

    @property
    def device(self) -> torch.device | None:
        return self._options.device

    @property
    def split_batches(self) -> bool:
        return self._options.split_batches

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes."""
        size = getattr(self.batch_sampler, "batch_size", None) if self.batch_sampler is not None else None
        if size is None:
            size = self._loader.batch_size
        if size is None:
            return None
        return size if self._options.split_batches else size * self._options.num_processes

    @property
    def total_dataset_length(self) -> int:
        return len(self._loader.dataset)  # type: ignore[arg-type]

    @property
    def batches_consumed(self) -> int:
        """Batches handed out in the current pass (restored by ``load_state``)."""
        return self._yielded

    @property
    def epoch(self) -> int:
        return self.iteration

    def set_epoch(self, epoch: int) -> None:
        """Choose the pass the next ``iter()`` starts (the order of seedable and epoch-aware samplers)."""
        self.iteration = epoch
        for holder in (self.batch_sampler, self._user_sampler):
            holder_set_epoch = getattr(holder, "set_epoch", None)
            if holder_set_epoch is not None:
                holder_set_epoch(epoch)
        dataset_set_epoch = getattr(self.dataset, "set_epoch", None)
        if (self.batch_sampler is None or self._user_sampler is None) and dataset_set_epoch is not None:
            dataset_set_epoch(epoch)

    def __len__(self) -> int:
        n = self._options.num_processes
        if not self._dispatch:
            return len(self._inner)
        whole = len(self._inner)
        if self._options.split_batches:
            return whole
        return whole // n if self._loader.drop_last else -(-whole // n)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loader", "_inner"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    # -- iteration -----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        if resume is None:
            self._synchronize()
        self.end_of_dataloader = False
        self.remainder = -1
        if not self._loader.drop_last:
            try:
                total = self.total_batch_size
                if total:
                    self.remainder = self.total_dataset_length % total
            except TypeError:
                pass
        self.set_epoch(self.iteration)
        self._gradient_state.dataloaders.append(self)
        try:
            batches = self._dispatched(resume) if self._dispatch else self._own(resume)
            yield from batches
            self.iteration += 1
            self._in_pass = False
        finally:
            self._gradient_state._remove(self)

    def _synchronize(self) -> None:
        generator = self._synchronized
        if generator is None or self._options.num_processes == 1 or not dist.is_initialized():
            return
        state = generator.get_state()
        dist.broadcast(state, src=0)
        generator.set_state(state)

    def _start_pass(self, resume: dict[str, Any] | None, read: bool = True, read_ahead: bool = False) -> Iterator[Any]:
        """``iter()`` of the inner loader, replaying the random state of the interrupted pass when resuming."""
        if resume is None:
            self._yielded = 0
            self._consumed_base = self._yielded_base = 0
            self._order_of_one_process = False
            self._in_pass = True
            now = capture_loader_rng(self._generators)
            prebuilt, self._prebuilt = self._prebuilt, None
            if prebuilt is None:
                self._pass_start = now
                return iter(self._inner)
            iterator, built_from, plans = prebuilt
            # Replayed as: the state the iterator was built from, then (unless building it drew the order
            # already, as workers do) the state the pass began reading from.
            self._pass_start = dict(built_from)
            if self._planned is None or self._planned.plans_drawn == plans:
                self._pass_start["reading"] = now
            return iterator
        now = capture_loader_rng(self._generators)
        start = resume["pass_start"]
        self._pass_start = start
        restore_loader_rng(start, self._pass_generators())
        skip = int(resume["yielded"])
        self._yielded = skip
        self._in_pass = True

        def back_to_now() -> None:
            restore_loader_rng(now, self._generators)

        def to_reading() -> None:
            reading = start.get("reading")
            if reading is not None:  # the pass's iterator was built at prepare time (see _build_first_iterator)
                restore_loader_rng(reading, self._pass_generators())

        # Dispatched batches are read again and not handed out (the padding of the last round needs the
        # pass's first samples); the others skip the indices (map-style) or read again (iterable).
        inner_skip = 0 if self._dispatch else skip + int(read_ahead)  # the read-ahead batch came with the state
        if self._planned is not None:
            if "consumed" in resume:  # continued at another size: this process's share of the rest
                inner_skip = 0
                self._planned.replan = self._rest_of_pass
            # Workers draw their random numbers (augmentation) batch by batch: they read the skipped batches again,
            # so that each continues from the state it had, instead of the plan skipping them.
            read_again = inner_skip if read and self._loader.num_workers > 0 else 0
            self._planned.skip = inner_skip - read_again
            self._planned.on_planned = back_to_now
            iterator = iter(self._inner)
            to_reading()
            if not read:
                self._planned.on_planned = None
                self._planned.skip = 0
                back_to_now()
            for _ in range(read_again):
                next(iterator, None)
            # Otherwise the plan is drawn (and the random state put back) at the first batch, or
            # already now when workers prefetch.
            return iterator
        iterator = iter(self._inner)
        to_reading()
        if not read:
            back_to_now()
            return iterator
        for _ in range(inner_skip):  # an iterable dataset: read again up to the position
            next(iterator, None)
        back_to_now()
        return iterator

    def _deliver(self, batch: Any) -> Any:
        self._yielded += 1
        if self.on_batch is not None:
            self.on_batch(self)
        device = self._options.device
        if device is not None and device.type != "cpu":
            batch = move_data_to_device(batch, device)
        return batch

    def _own(self, resume: dict[str, Any] | None) -> Iterator[Any]:
        saved_lookahead = None if resume is None else resume.get("lookahead")
        iterator = self._start_pass(resume, read_ahead=saved_lookahead is not None)
        if saved_lookahead is not None:
            current = saved_lookahead
        else:
            try:
                current = next(iterator)
            except StopIteration:
                return
        try:
            while True:
                try:
                    following = next(iterator)
                except StopIteration:
                    self.end_of_dataloader = True
                    self._lookahead = None
                    yield self._deliver(current)
                    return
                self._lookahead = following
                yield self._deliver(current)
                current = following
        finally:
            self._lookahead = None

    def _dispatched(self, resume: dict[str, Any] | None) -> Iterator[Any]:
        """Rank 0 reads, every process receives its slice (Accelerate's ``dispatch_batches=True``)."""
        n, rank = self._options.num_processes, self._options.process_index
        split = self._options.split_batches
        iterator = self._start_pass(resume) if rank == 0 else None
        if rank != 0:
            # The other processes still start (and so seed) the loader, as Accelerate does.
            self._start_pass(resume, read=False)

        def fetch() -> Any:
            payload: list[Any] = [None]
            if rank == 0:
                assert iterator is not None
                group = []
                for _ in range(1 if split else n):
                    try:
                        group.append(next(iterator))
                    except StopIteration:
                        break
                if group:
                    payload = [_concatenate(group) if len(group) > 1 else group[0]]
            dist.broadcast_object_list(payload, src=0)
            return payload[0]

        first_samples = None
        not_yet = int(resume["yielded"]) if resume is not None else 0
        current = fetch()
        while current is not None:
            following = fetch()
            observed = _batch_length(current)
            if first_samples is None:
                first_samples = _slice(current, slice(0, n))
            per_process = observed // n
            if following is None:
                self.end_of_dataloader = True
                self.remainder = observed
                if not self._loader.drop_last and observed % n:
                    current = _concatenate([current, first_samples])
                    per_process += 1
            mine = _slice(current, slice(rank * per_process, (rank + 1) * per_process))
            if not_yet:
                not_yet -= 1
            else:
                yield self._deliver(mine)
            current = following

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This process's position: pass number, batches handed out, and the random state the pass began with."""
        return {
            "version": _STATE_VERSION,
            "iteration": self.iteration,
            "in_pass": self._in_pass,
            "yielded": self._yielded,
            "pass_start": self._pass_start,
            "generators": [g.get_state() for g in self._generators],
            "process_index": self._options.process_index,
            "num_processes": self._options.num_processes,
            "position": self._position(),
            "lookahead": self._saved_lookahead(),
            "order_of_one_process": self._order_of_one_process and self._in_pass,
        }

    def _saved_lookahead(self) -> Any:
        # Read (its random draws made) before the step the checkpoint follows: reading it again would draw anew.
        lookahead = self._lookahead
        return lookahead if _plain_batch(lookahead) else None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a `state_dict()`: the next ``iter()`` continues with the next unseen batch."""
        if state_dict.get("version") != _STATE_VERSION:
            raise FabricxError(
                f"This is not an Accelerate-adapter loader state (keys: {sorted(state_dict)}). Pass what the "
                "prepared loader's state_dict() returned, or load the checkpoint with accelerator.load_state()."
            )
        self._prebuilt = None  # as torchdata drops its iterator: the next pass starts from the loaded state
        saved = list(state_dict["generators"])
        resized = bool(state_dict["in_pass"]) and self._resized(state_dict)
        one_process_order = resized and bool(state_dict.get("order_of_one_process"))
        if resized:
            self._check_resizable(state_dict)
        saved_n = int(state_dict["num_processes"])
        targets = self._generators
        if len(saved) == len(self._generators) + 1 and saved_n > 1:
            self._adopt_synchronized_generator()
            targets = self._generators
        elif len(saved) + 1 == len(self._generators) and saved_n == 1 and self._synchronized is not None:
            # The processes' shared generator keeps the seed it was given at prepare. One process shuffled from
            # the global generator: mid-pass, the rest of its order is drawn from there again (`_rest_of_pass`).
            targets = [g for g in self._generators if g is not self._synchronized]
            one_process_order = resized
        if len(saved) != len(targets):
            raise FabricxError(
                f"The saved loader state has {len(saved)} random generator(s) but this loader has "
                f"{len(self._generators)}: it was built differently (shuffle, sampler or generator changed). "
                "Build the loader with the same settings as the run that saved it."
            )
        set_generator_states(targets, [torch.as_tensor(state) for state in saved])
        self._order_of_one_process = one_process_order
        self.iteration = int(state_dict["iteration"])
        self._yielded = int(state_dict["yielded"])
        self._in_pass = bool(state_dict["in_pass"])
        self._pass_start = state_dict["pass_start"]
        self._resume = dict(state_dict) if self._in_pass and self._pass_start is not None else None
        self._consumed_base = self._yielded_base = 0
        if resized and self._resume is not None:
            consumed = int(state_dict["position"]["consumed"])
            self._resume["consumed"] = consumed
            # Steps counted as the steps of this size that the consumed samples make (the same count
            # as before when the global batch is kept).
            self._yielded = self._yielded_base = consumed // self._samples_per_step()
            self._resume["yielded"] = self._yielded
            self._resume["lookahead"] = None  # the rest of the pass is dealt again at this size
            self._consumed_base = consumed

    # -- continuing a pass at another number of processes (fabricx/compat/accelerate/elastic.py) ----
    def _samples_per_step(self) -> int:
        size = int(self._loader.batch_size or 1)
        return size if self._options.split_batches else size * self._options.num_processes

    def _position(self) -> dict[str, Any] | None:
        """Samples of the pass's order consumed by all processes, independent of their number."""
        if self._loader.batch_size is None or self._iterable:
            return None
        steps = self._yielded - self._yielded_base
        length = self.total_dataset_length
        consumed = self._consumed_base + consumed_samples(
            steps, int(self._loader.batch_size), self._options.num_processes, self._options.split_batches, length
        )
        return {
            "consumed": min(consumed, length),
            "batch_size": self._loader.batch_size,
            "split_batches": self._options.split_batches,
            "continued": self._consumed_base > 0,
        }

    def _resized(self, state_dict: dict[str, Any]) -> bool:
        """Whether a mid-pass state comes from a run that shared the data differently."""
        position = state_dict.get("position")
        if int(state_dict["num_processes"]) != self._options.num_processes:
            return True
        if not position:
            return False
        return bool(position["continued"]) or (position["batch_size"], position["split_batches"]) != (
            self._loader.batch_size,
            self._options.split_batches,
        )

    def _check_resizable(self, state_dict: dict[str, Any]) -> None:
        saved_n, n = int(state_dict["num_processes"]), self._options.num_processes
        reason = None
        if not state_dict.get("position"):
            reason = "the loader has its own batch sampler or an iterable dataset, so no position in samples"
        elif self._dispatch or self._planned is None:
            reason = "this loader reads an iterable dataset or dispatches batches from the main process"
        elif resizable_batch_sampler(self.batch_sampler) is None:
            reason = "its batch sampler is a custom one (only torch's BatchSampler cuts the order into runs)"
        elif int(state_dict["position"]["consumed"]) > self.total_dataset_length:
            reason = f"the saved pass consumed more samples than this dataset's {self.total_dataset_length}"
        if reason is not None:
            raise FabricxError(
                f"This loader state was saved mid-pass by {saved_n} processes; this run has {n} (or another batch "
                f"size) and cannot continue that pass: {reason}. Resume with {saved_n} processes and the same "
                "loader, or from a checkpoint saved at the end of a pass."
            )

    def _adopt_synchronized_generator(self) -> None:
        """One process continuing a multi-process run: the sampler gets the generator the processes
        shared (Accelerate gives one only to multi-process loaders), so this and later passes keep its order."""
        sampler = self._user_sampler
        if self._options.num_processes == 1 and sampler is not None and getattr(sampler, "generator", 0) is None:
            sampler.generator = torch.Generator()
            self._generators = self._find_generators()

    def _pass_generators(self) -> list[torch.Generator]:
        """The generators whose states the resumed pass began with: a pass of one process, whose sampler drew
        from the global generator, had no sampler generator."""
        sampler_generator = getattr(self._user_sampler, "generator", None)
        if not self._order_of_one_process:
            return self._generators
        return [g for g in self._generators if g is not sampler_generator]

    def _rest_of_pass(self) -> list[list[int]]:
        """This process's batches of what the interrupted pass had not consumed (drawn under the pass's
        restored random state)."""
        user = resizable_batch_sampler(self.batch_sampler)
        assert user is not None and self._resume is None
        options = self._options
        sampler: Any = user.sampler  # where the order was one process's: a sampler with a `generator` (shuffling)
        if self._order_of_one_process:  # drawn from the global generator, as the one process drew it
            shared, sampler.generator = sampler.generator, None
            try:
                order = list(sampler)
            finally:
                sampler.generator = shared
        else:
            order = list(sampler)
        return rank_batches_of_the_rest(
            order,
            self._consumed_base,
            int(user.batch_size),
            user.drop_last,
            options.num_processes,
            options.process_index,
            options.split_batches,
            options.even_batches,
        )

    def __repr__(self) -> str:
        return f"AcceleratedDataLoader({self._loader!r}, num_processes={self._options.num_processes})"


class SkipBatchesLoader:
    """Iterates a prepared loader, dropping the first ``num_batches`` batches of each pass.

    The skipped batches count as read, so gradient-accumulation windows and the saved position are
    those of an uninterrupted epoch.

    Example:
        ```python
        for batch in accelerator.skip_first_batches(loader, 3): ...
        ```
    """

    def __init__(self, loader: Any, num_batches: int) -> None:
        if not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"num_batches={num_batches!r}; give an int >= 0.")
        self.loader = loader
        self.num_batches = num_batches

    def __len__(self) -> int:
        return max(0, len(self.loader) - self.num_batches)

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self.loader):
            if index >= self.num_batches:
                yield batch

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)
