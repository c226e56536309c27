"""Save and exit when preempted, on every rank (a project helper of the façade).

Saving into a project and resuming from its latest checkpoint are `Fabric.save_checkpoint` and
`Fabric.load_latest` (both through ``fabric.checkpointer``).

Example:
    ```python
    manager = CheckpointManager("runs/exp1", total_limit=3)
    state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}
    fabric.load_latest(manager, state)          # no-op on the first run
    for batch in loader:
        ...
        exit_if_preempted(fabric, manager, state)
    ```
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.checkpoint.manager import CheckpointManager
    from fabricx.fabric import Fabric

__all__ = ["exit_if_preempted"]


def exit_if_preempted(
    fabric: Fabric, manager: CheckpointManager | str | os.PathLike[str], state: dict[str, Any]
) -> None:
    """If any rank received a preemption signal, save a checkpoint and exit for requeueing.

    Needs ``Fabric(preemption_signals=True)``. Call it at step boundaries on every rank; the exit
    code is `fabricx.utilities.preemption.REQUEUE_EXIT_CODE`.

    Example:
        ```python
        for batch in loader:
            train_step(batch)
            exit_if_preempted(fabric, manager, state)
        ```
    """
    if fabric.preemption_requested:
        fabric.save_checkpoint(manager, state)
        fabric.exit_for_requeue()
