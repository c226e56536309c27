"""Seeding every random number generator, in the main process and in dataloader workers.

The seed is exported in the environment under Lightning's names (``PL_GLOBAL_SEED``,
``PL_SEED_WORKERS``) and fabricx's own (``FABRICX_GLOBAL_SEED``, ``FABRICX_SEED_WORKERS``), so
processes started later agree and scripts that read Lightning's variable keep working.
"""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch

from fabricx.utilities.rank_zero import rank_zero_warn

log = logging.getLogger(__name__)

_SEED_ENV = "FABRICX_GLOBAL_SEED"
_WORKERS_ENV = "FABRICX_SEED_WORKERS"
_PL_SEED_ENV = "PL_GLOBAL_SEED"
_PL_WORKERS_ENV = "PL_SEED_WORKERS"
min_seed_value = 0
max_seed_value = 2**32 - 1
_MAX_SEED = max_seed_value


def _seed_from_environment(verbose: bool) -> int:
    """The seed exported by an earlier call (fabricx's variable first, then Lightning's); 0 if none."""
    for name in (_SEED_ENV, _PL_SEED_ENV):
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            return int(value)
        except ValueError:
            raise ValueError(
                f"Invalid seed specified via {name}: {value!r}. Set it to an int between {min_seed_value} and "
                f"{max_seed_value}, or unset it."
            ) from None
    if verbose:
        rank_zero_warn("No seed found, seed set to 0")
    return 0


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and CUDA); return the seed used.

    ``seed=None`` reads ``PL_GLOBAL_SEED`` (or ``FABRICX_GLOBAL_SEED``) and falls back to 0 with a
    warning. A seed outside ``[0, 2**32 - 1]`` or an environment value that is not an int raises
    ``ValueError``, as in Lightning. ``workers=True`` makes every dataloader worker derive its own
    seeds from this one, its worker id and the process rank, so runs repeat exactly with
    ``num_workers > 0``. ``verbose=False`` silences the warning and the log line.

    Example:
        ```python
        seed_everything(42, workers=True)
        ```
    """
    if seed is None:
        seed = _seed_from_environment(verbose)
    elif not isinstance(seed, int):
        seed = int(seed)
    if not min_seed_value <= seed <= max_seed_value:
        raise ValueError(
            f"{seed} is not in bounds, numpy accepts from {min_seed_value} to {max_seed_value}; "
            "pass a seed in that range."
        )
    if verbose:
        log.info(f"Seed set to {seed}")
    for name in (_PL_SEED_ENV, _SEED_ENV):
        os.environ[name] = str(seed)
    for name in (_PL_WORKERS_ENV, _WORKERS_ENV):
        os.environ[name] = str(int(workers))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def reset_seed() -> None:
    """Seed again with the value `seed_everything()` exported; do nothing if it was never called.

    Example:
        ```python
        reset_seed()  # e.g. at the start of a spawned process
        ```
    """
    value = os.environ.get(_SEED_ENV, os.environ.get(_PL_SEED_ENV))
    if value is None:
        return
    workers = os.environ.get(_WORKERS_ENV, os.environ.get(_PL_WORKERS_ENV, "0"))
    seed_everything(int(value), workers=bool(int(workers)), verbose=False)


def global_seed(default: int = 0) -> int:
    """The seed last given to `seed_everything()` (in this or a parent process); Lightning's
    ``PL_GLOBAL_SEED`` when fabricx's own variable is not set."""
    for name in (_SEED_ENV, _PL_SEED_ENV):
        value = os.environ.get(name)
        if value is not None and value.lstrip("-").isdigit():
            return int(value)
    return default


def seed_workers_requested() -> bool:
    """Whether `seed_everything()` was called with ``workers=True``."""
    return os.environ.get(_WORKERS_ENV, os.environ.get(_PL_WORKERS_ENV)) == "1"


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed torch, ``random`` and NumPy inside a dataloader worker from the base seed, worker id and rank.

    torch gives each worker ``base_seed + worker_id``, but the base seed is the same on every rank
    after ``seed_everything``; mixing in the rank keeps workers of different ranks apart, and NumPy
    and ``random`` would otherwise repeat the parent's state in every worker.
    """
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    base_seed = torch.initial_seed() - worker_id
    sequence = np.random.SeedSequence([base_seed & _MAX_SEED, worker_id, rank])
    torch_seed, random_seed, numpy_seed = sequence.generate_state(3, dtype=np.uint64)
    torch.manual_seed(int(torch_seed))
    random.seed(int(random_seed))
    np.random.seed(int(numpy_seed) & _MAX_SEED)


pl_worker_init_function = worker_init_function
