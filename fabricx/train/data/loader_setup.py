"""The Trainer's loaders set up on its Fabric, their batch counts under the ``limit_*_batches`` flags, and the
rebuilt loaders Lightning's rules ask for (training data shuffled across processes, ``overfit_batches`` in order).
"""

from __future__ import annotations

import math
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, cast

import torch

from fabricx.train.data import loaders as setup
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.strategies.strategy import Strategy
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer


def setup_loaders(trainer: Trainer, run: RunContext, flat: list[Any], where: str) -> list[Any]:
    """Each of `flat` set up: a DataLoader on the Fabric, any other iterable as an `IterableLoader`."""
    if not flat:
        raise MisconfigurationError(f"{where} got an empty list of DataLoaders.")
    fabric, move = run.fabric, run.batch_processor is None
    use_distributed_sampler = trainer.use_distributed_sampler

    def setup_dataloader(loader: Any) -> Any:
        return fabric.setup_dataloaders(loader, use_distributed_sampler=use_distributed_sampler, move_to_device=move)

    return [setup.setup_one(loader, setup_dataloader, fabric.to_device if move else None, where) for loader in flat]


def setup_eval_loaders(
    trainer: Trainer, run: RunContext, raw: Any, where: str, overfit_prefix: str | None = None
) -> list[Any]:
    """One entry per `dataloader_idx`: each loader of a collection (or of a sequential `CombinedLoader`), or
    one `LoaderGroup` for a `CombinedLoader` in another mode (its batches combined, `dataloader_idx` 0)."""
    flat, spec, mode, source = setup.flatten_loaders(raw)
    if overfit_prefix is not None and trainer.overfit_batches:
        flat = without_shuffle(flat, overfit_prefix)
    loaders = setup_loaders(trainer, run, flat, where)
    if mode is not None and mode != "sequential":
        return [setup.LoaderGroup(loaders, spec, mode, source)]
    return loaders


def has_len_all_ranks(
    dataloader: object, strategy: Strategy, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether `dataloader` has a length (``False`` for an iterable dataset or a generator), as Lightning's
    function of the same name decides it; a collective call over the processes of `strategy`.

    The lengths of all processes are summed: a total of zero is warned about, and an empty loader in one process
    while others have batches raises, since that process would wait for the others' collectives (with
    ``allow_zero_length_dataloader_with_multiple_devices=True`` it is a warning).

    Example:
        ```python
        if has_len_all_ranks(loader, trainer.strategy):
            batches = len(loader)
        ```
    """
    local_length = setup.sized_length(dataloader)
    if math.isinf(local_length):
        return False
    name = type(dataloader).__name__
    total = strategy.all_reduce(torch.tensor(int(local_length), device=strategy.root_device), reduce_op="sum")
    if total == 0:
        rank_zero_warn(f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.")
    elif local_length == 0:
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(
                f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch."
            )
        rank_zero_warn(
            f"Total length of `{name}` across ranks is zero, but local rank has zero length. Please be cautious of "
            "uneven batch length."
        )
    if isinstance(getattr(dataloader, "dataset", None), torch.utils.data.IterableDataset):
        rank_zero_warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
            "num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to "
            "avoid having duplicate data."
        )
    return True


def limited_length(loader: Any, limit: int | float | None, flag: str) -> float:
    """Batches of a pass under the ``limit_*_batches`` flag ``flag`` (``inf`` for a loader without a length)."""
    length = setup.sized_length(loader)
    if limit is None:
        return length
    if isinstance(limit, float):
        if math.isinf(length):
            if limit in (0.0, 1.0):
                return 0 if limit == 0.0 else length
            raise MisconfigurationError(
                f"When using an `IterableDataset`, `Trainer({flag})` must be `1.0` or an int (got {limit}): a "
                "fraction needs a loader with a length. An int specifies the number of batches to use."
            )
        return int(length * limit) if limit < 1.0 else length
    return min(length, limit)


def per_iterable(loaders: list[Any] | None, limits: list[float], limit: int | float | None, flag: str) -> list[float]:
    """Lightning's ``num_*_batches``: one figure per iterable (those of a combined loader each counted)."""
    figures: list[float] = []
    for loader, run_limit in zip(loaders or [], limits, strict=False):
        if isinstance(loader, setup.LoaderGroup):
            figures.extend(limited_length(inner, limit, flag) for inner in loader.loaders)
        else:
            figures.append(run_limit)
    return figures


def user_view(loaders: list[Any] | None) -> Any:
    """Lightning's `trainer.val_dataloaders` (and test/predict): the user's loader, or a list of several."""
    if not loaders:
        return None
    views = [setup.user_loader(loader) for loader in loaders]
    return views[0] if len(views) == 1 else views


def drop_rest_of_epoch(loader: Any) -> None:
    """After a resume at the end of a cut epoch: the loaders start their next pass."""
    for inner in loader.loaders if isinstance(loader, setup.LoaderGroup) else [loader]:
        state = inner.state_dict()
        if state["started"] and not state["finished"] and isinstance(inner.loader, torch.utils.data.DataLoader):
            iter(inner.loader)


def shuffled(loader: Any) -> Any:
    """A training loader in sequential order rebuilt with a ``RandomSampler`` (the trainer distributes it)."""
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

    if type(loader) is not DataLoader or type(loader.sampler) is not SequentialSampler:
        return loader
    return _rebuilt(loader, RandomSampler(cast(Sized, loader.dataset)))


def without_shuffle(loaders: list[Any], prefix: str) -> list[Any]:
    """``overfit_batches``: the same first batches every epoch (a loader not in order is rebuilt in order)."""
    from torch.utils.data import DataLoader, SequentialSampler

    def in_order(loader: Any) -> bool:
        return not isinstance(loader, DataLoader) or isinstance(loader.sampler, SequentialSampler)

    if all(in_order(loader) for loader in loaders):
        return loaders
    rank_zero_warn(
        f"You requested to overfit but enabled {prefix} dataloader shuffling."
        f" We are turning off the {prefix} dataloader shuffling for you."
    )

    def rebuild(loader: Any) -> Any:
        # A loader with its own batch sampler keeps it: only the sampler of automatic batching can be swapped.
        if in_order(loader) or loader.batch_size is None:
            return loader
        return _rebuilt(loader, SequentialSampler(cast(Sized, loader.dataset)))

    return [rebuild(loader) for loader in loaders]


def _rebuilt(loader: Any, sampler: Any) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers if loader.num_workers > 0 else False,
    )


__all__ = [
    "drop_rest_of_epoch",
    "has_len_all_ranks",
    "limited_length",
    "per_iterable",
    "setup_eval_loaders",
    "setup_loaders",
    "shuffled",
    "user_view",
    "without_shuffle",
]
