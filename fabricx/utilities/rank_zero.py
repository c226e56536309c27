"""Helpers that make something happen on the global rank zero process only."""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from typing import Any

import lightning_utilities.core.rank_zero as _utilities_rank_zero

# fabricx's own folder: a warning is shown at the first line outside it (the user's), not at fabricx's call.
_PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The `rank_zero_only` wrapper around fabricx's rank-zero functions is lightning_utilities' own.
_RANK_ZERO_WRAPPER_FILE = _utilities_rank_zero.__file__


def _is_ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE_FOLDER) or filename == _RANK_ZERO_WRAPPER_FILE

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


def warn_at_user_line(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` shown at the first calling line outside fabricx: the user's line that led to it.

    Python prints the source line a warning is attributed to; attributed to fabricx's own call, that line
    would be ``rank_zero_warn(`` under every message.

    Example:
        ```python
        warn_at_user_line("`max_epochs` is 0: nothing will be trained.")
        ```
    """
    level, frame = 1, inspect.currentframe()
    while frame is not None and frame.f_back is not None and _is_ours(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    del frame  # no reference cycle through the frames
    warnings.warn(message, category, stacklevel=level)


@rank_zero_only
def rank_zero_warn(message: str, category: type[Warning] = UserWarning, stacklevel: int | None = None) -> None:
    """Warn on global rank zero only, at the user's line (or ``stacklevel`` frames up, when given).

    Example:
        ```python
        rank_zero_warn("The dataloader has few workers.", PossibleUserWarning)
        ```
    """
    if stacklevel is None:
        warn_at_user_line(message, category)
    else:
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
