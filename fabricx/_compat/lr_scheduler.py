"""torch's private LR-scheduler step tracking.

``torch.optim.lr_scheduler.LRScheduler.__init__`` wraps ``optimizer.step`` so that a call sets
``optimizer._opt_called``, and marks the wrapper with ``_wrapped_by_lr_sched``; ``scheduler.step()``
reads both to warn when it runs before the first ``optimizer.step()``. A strategy that replaces
the optimizer a scheduler drives (FSDP rebuilds it over sharded parameters) must install the same
tracking on the new optimizer, or every run warns. Those two private names live here only.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from torch.optim import Optimizer

STEP_WRAPPED_FLAG = "_wrapped_by_lr_sched"
STEP_CALLED_FLAG = "_opt_called"


def retarget_scheduler(scheduler: Any, old: Optimizer, new: Optimizer) -> None:
    """Make ``scheduler`` drive ``new`` instead of ``old``, with torch's step tracking on ``new``.

    Example:
        ```python
        retarget_scheduler(scheduler, user_optimizer, rebuilt_optimizer)
        ```
    """
    scheduler.optimizer = new
    step = type(new).step
    new_ref = weakref.ref(new)

    @functools.wraps(step)
    def tracked_step(*args: Any, **kwargs: Any) -> Any:
        optimizer = new_ref()
        assert optimizer is not None, "the optimizer was collected while its step was running"
        setattr(optimizer, STEP_CALLED_FLAG, True)
        return step(optimizer, *args, **kwargs)

    setattr(tracked_step, STEP_WRAPPED_FLAG, True)
    new.step = tracked_step  # type: ignore[method-assign]
    if getattr(old, STEP_CALLED_FLAG, False):
        setattr(new, STEP_CALLED_FLAG, True)


def scheduler_step_count(scheduler: Any) -> int:
    """How many times torch's `LRScheduler` counts itself stepped (its private ``_step_count``; the
    constructor's initial step counts as one).

    Example:
        ```python
        if scheduler_step_count(scheduler) > scheduler.total_steps: ...
        ```
    """
    return int(scheduler._step_count)


def count_scheduler_step(scheduler: Any) -> None:
    """Count one step on ``scheduler`` without changing its learning rates (as Accelerate does for the
    micro-batches of an accumulation window when ``adjust_scheduler`` is on).

    Example:
        ```python
        count_scheduler_step(scheduler)
        ```
    """
    scheduler._step_count += 1
