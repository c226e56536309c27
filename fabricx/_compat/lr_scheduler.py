"""torch's private LR-scheduler names.

``torch.optim.lr_scheduler.LRScheduler.__init__`` wraps ``optimizer.step`` (on the instance) to track that it
ran, and marks the wrapper with ``_wrapped_by_lr_sched``; the step counter ``_step_count`` counts the
scheduler's own steps. Those private names live here only.
"""

from __future__ import annotations

from typing import Any

STEP_WRAPPED_FLAG = "_wrapped_by_lr_sched"


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
