"""Seeding every random number generator, in the main process and in dataloader workers."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from fabricx.utilities.rank_zero import rank_zero_warn

_SEED_ENV = "FABRICX_GLOBAL_SEED"
_WORKERS_ENV = "FABRICX_SEED_WORKERS"
_MAX_SEED = 2**32 - 1


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and CUDA); return the seed used.

    ``workers=True`` makes every dataloader worker derive its own seed from this one, its
    worker id and the process rank, so runs repeat exactly with ``num_workers > 0``.
    The seed is also exported in ``FABRICX_GLOBAL_SEED`` so that processes started later agree.

    Example::

        seed_everything(42, workers=True)
    """
    if seed is None:
        env = os.environ.get(_SEED_ENV)
        seed = int(env) if env is not None and env.lstrip("-").isdigit() else 0
        if env is None:
            rank_zero_warn(f"No seed given; using {seed}.")
    if not 0 <= int(seed) <= _MAX_SEED:
        raise ValueError(f"seed={seed} is out of range; give an int between 0 and {_MAX_SEED}.")
    seed = int(seed)
    os.environ[_SEED_ENV] = str(seed)
    os.environ[_WORKERS_ENV] = "1" if workers else "0"
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def global_seed(default: int = 0) -> int:
    """The seed last given to :func:`seed_everything` (in this or a parent process); Lightning's
    ``PL_GLOBAL_SEED`` when fabricx's own variable is not set."""
    value = os.environ.get(_SEED_ENV, os.environ.get("PL_GLOBAL_SEED"))
    return int(value) if value is not None and value.lstrip("-").isdigit() else default


def seed_workers_requested() -> bool:
    return os.environ.get(_WORKERS_ENV) == "1"


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed ``random`` and NumPy inside a dataloader worker from torch's per-worker seed.

    torch already gives each worker a distinct torch seed; NumPy and ``random`` would otherwise
    repeat the parent's state in every worker.
    """
    process_seed = torch.initial_seed()
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    sequence = np.random.SeedSequence([process_seed & _MAX_SEED, worker_id, rank])
    torch_seed, numpy_seed = sequence.generate_state(2, dtype=np.uint64)
    np.random.seed(int(numpy_seed) & _MAX_SEED)
    random.seed(int(torch_seed))
