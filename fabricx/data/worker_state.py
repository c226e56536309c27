"""What a loader's worker processes hand back for a checkpoint: their random generators (and a dataset's own
``state_dict()``), every `WORKER_SNAPSHOT_INTERVAL` batches, and nothing where it cannot change a batch."""

from __future__ import annotations

import random
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    default_collate,
    default_convert,
    get_worker_info,
)
from torchdata.stateful_dataloader import Stateful

# Batches between two snapshots of the loader's position and its workers' state (torchdata's
# ``snapshot_every_n_steps``). A snapshot costs the main process (the sampler's state, a copy of every worker's)
# and the workers (their state, sent back) work comparable to a tiny batch's own: one per batch held the loader of
# benchmarks/loader_workers.py at 0.71-0.95x a plain DataLoader's batch rate; one per 16 spreads it 16-fold.
# A resume restores the last snapshot and reads the batches after it again (at most 15), which gives the
# same batches and worker random state as the uninterrupted run.
WORKER_SNAPSHOT_INTERVAL = 16

# torch datasets whose __getitem__ only indexes what they were given (exact types: a subclass may override it).
_INDEXING_DATASETS = (TensorDataset, StackDataset, Subset, ConcatDataset, list, tuple, range)


def worker_state_matters(dataset: Any, collate_fn: Any) -> bool:
    """Whether a worker's own state can change what it yields, so that its snapshots must record it.

    Decided conservatively, from types alone: it cannot for a dataset that only indexes what it holds
    (torch's ``TensorDataset`` and ``StackDataset``, a ``list``, ``tuple`` or ``range``, and ``Subset`` or
    ``ConcatDataset`` made of those, exact types only) batched by torch's own ``default_collate`` (or
    ``default_convert``). Anything else may draw random numbers where a sample is loaded or collated
    (augmentation, random masking) or keep a ``state_dict()``, so its workers' generators are recorded.

    Example:
        ```python
        worker_state_matters(TensorDataset(x, y), default_collate)  # False: indexing draws nothing
        worker_state_matters(MyAugmentedImages(), default_collate)  # True: __getitem__ may draw
        ```
    """
    return collate_fn not in (default_collate, default_convert) or not _only_indexes(dataset)


def _only_indexes(dataset: Any) -> bool:
    if type(dataset) not in _INDEXING_DATASETS:
        return False
    if isinstance(dataset, Subset):
        return _only_indexes(dataset.dataset)
    if isinstance(dataset, ConcatDataset):
        return all(_only_indexes(part) for part in dataset.datasets)
    if isinstance(dataset, StackDataset):
        parts = dataset.datasets.values() if isinstance(dataset.datasets, dict) else dataset.datasets
        return all(isinstance(part, torch.Tensor | list | tuple | range) or _only_indexes(part) for part in parts)
    return True


def with_worker_random_state(dataset: Any, num_workers: int, collate_fn: Any) -> Any:
    """``dataset`` seen through a view whose ``state_dict()`` also holds the worker's random generators, where
    a worker's state can change what it yields (see `worker_state_matters`); else ``dataset`` itself.

    Example:
        ```python
        source = with_worker_random_state(dataset, loader.num_workers, loader.collate_fn)
        ```
    """
    if num_workers == 0:
        return dataset  # the process's own generators are in the checkpoint already
    if isinstance(dataset, IterableDataset):
        # One that is not stateful must stay so: torchdata then fast-forwards it to the position.
        return _WorkerRandomStateIterable(dataset) if isinstance(dataset, Stateful) else dataset
    return _WorkerRandomStateDataset(dataset) if worker_state_matters(dataset, collate_fn) else dataset


class _WorkerRandomStateDataset(Dataset):
    """A map-style dataset seen through a view that also records the worker's random generators.

    torchdata stores a stateful dataset's ``state_dict()`` with each worker's snapshot and restores it
    inside the worker on resume; recording Python/NumPy/torch generators there makes random
    augmentation in ``__getitem__`` continue exactly where it stopped.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[Any]) -> Any:
        getitems = getattr(self.dataset, "__getitems__", None)
        return getitems(indices) if getitems is not None else [self.dataset[i] for i in indices]

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def state_dict(self) -> dict[str, Any]:
        inner = self.dataset.state_dict() if isinstance(self.dataset, Stateful) else None
        in_worker = get_worker_info() is not None
        return {"dataset": inner, "worker_rng": _capture_flat_rng() if in_worker else None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("dataset") is not None and isinstance(self.dataset, Stateful):
            self.dataset.load_state_dict(state_dict["dataset"])
        if state_dict.get("worker_rng") is not None and get_worker_info() is not None:
            _restore_flat_rng(state_dict["worker_rng"])


class _WorkerRandomStateIterable(IterableDataset):
    """The iterable-dataset counterpart of `_WorkerRandomStateDataset` (for stateful ones)."""

    def __init__(self, dataset: IterableDataset) -> None:
        self.dataset = dataset

    def __iter__(self) -> Any:
        return iter(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    __getattr__ = _WorkerRandomStateDataset.__getattr__
    state_dict = _WorkerRandomStateDataset.state_dict
    load_state_dict = _WorkerRandomStateDataset.load_state_dict


def _capture_flat_rng() -> dict[str, Any]:
    # Leaves only (no tuples holding arrays): torchdata diffs worker states leaf by leaf with ==.
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached = cast("tuple[Any, ...]", np.random.get_state())  # the legacy tuple
    return {
        "python_version": version,
        "python_state": torch.tensor(internal, dtype=torch.int64),
        "python_gauss": gauss,
        "numpy_name": name,
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_pos": int(position),
        "numpy_has_gauss": int(has_gauss),
        "numpy_cached": float(cached),
        "torch": torch.get_rng_state(),
    }


def _restore_flat_rng(state: dict[str, Any]) -> None:
    internal = tuple(int(v) for v in state["python_state"].tolist())
    random.setstate((int(state["python_version"]), internal, state["python_gauss"]))
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (state["numpy_name"], keys, state["numpy_pos"], state["numpy_has_gauss"], state["numpy_cached"])
    )
    torch.set_rng_state(state["torch"])
