"""Helpers that make something happen on the global rank zero process only."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import lightning_utilities.core.rank_zero as _utilities_rank_zero

_RANK_ENV_VARS = (
    "RANK",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "JSM_NAMESPACE_RANK",
    "PMI_RANK",
    "OMPI_COMM_WORLD_RANK",
)


def _rank_from_environment() -> int:
    # A process started by a launcher knows its rank before any process group exists.
    for name in _RANK_ENV_VARS:
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return 0


#: Run a function only where ``rank_zero_only.rank == 0``; elsewhere return ``None`` (or ``default``).
#: It is lightning_utilities' decorator itself, as in Lightning, so that helpers users decorate with
#: ``lightning_utilities.core.rank_zero.rank_zero_only`` see the same rank: set here at import from the
#: launcher's environment (unless already set), and by the strategy once the process group exists.
#:
#: Example:
#:     ```python
#:     @rank_zero_only
#:     def write_summary(path): ...
#:     ```
rank_zero_only = _utilities_rank_zero.rank_zero_only
rank_zero_only.rank = getattr(rank_zero_only, "rank", _rank_from_environment())  # type: ignore[attr-defined]


def set_global_rank(rank: int) -> None:
    """Tell the rank-zero helpers which global rank this process has."""
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


@rank_zero_only
def rank_zero_print(*args: Any, **kwargs: Any) -> None:
    print(*args, **kwargs)


@rank_zero_only
def rank_zero_warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 3) -> None:
    warnings.warn(message, category, stacklevel=stacklevel)


@rank_zero_only
def rank_zero_info(message: str) -> None:
    print(message, flush=True)


@rank_zero_only
def rank_zero_log_info(logger: logging.Logger, message: str) -> None:
    """Log ``message`` at INFO on ``logger`` (as Lightning's callbacks do); printed when INFO is not enabled."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(message)
    else:
        print(message, flush=True)
