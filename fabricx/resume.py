"""Project helpers of the façade: save into a checkpoint manager, resume from its latest complete
checkpoint, save and exit when preempted, on every rank.

They live beside `fabricx.fabric` (not in `fabricx.checkpoint`, which only does file I/O).

Every rank must use the same checkpoint path, but ranks that each scan the directory can disagree
(rank 0 may already be creating the next checkpoint while another rank looks). So rank 0 decides
and broadcasts the path; the others never scan.

Example:
    ```python
    manager = CheckpointManager("runs/exp1", total_limit=3)
    state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}
    load_latest(fabric, manager, state)          # no-op on the first run
    for batch in loader:
        ...
        if state["step"] % 500 == 0:
            save_checkpoint(fabric, manager, state)
        exit_if_preempted(fabric, manager, state)
    ```
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fabricx.checkpoint.manager import CheckpointManager, reserve_on_rank_zero
from fabricx.checkpoint.storage import is_url
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.io import CheckpointIO


class _StrategyWithIO(Protocol):
    @property
    def checkpoint_io(self) -> CheckpointIO: ...


class ResumeHost(Protocol):
    """What these helpers use of a `fabricx.Fabric` (typed as a Protocol so this module does not import the
    façade that calls it).

    Example:
        ```python
        def resume(fabric: ResumeHost) -> None:
            load_latest(fabric, "runs/exp1", state)
        ```
    """

    @property
    def strategy(self) -> _StrategyWithIO: ...
    @property
    def world_size(self) -> int: ...
    @property
    def is_global_zero(self) -> bool: ...
    @property
    def preemption_requested(self) -> bool: ...
    def broadcast(self, obj: Any, src: int = 0) -> Any: ...
    def save(
        self,
        path: str | os.PathLike,
        state: dict[str, Any],
        filter: dict[str, Callable] | None = None,
        *,
        async_save: bool = False,
        layout: str | None = None,
    ) -> AsyncSave | None: ...
    def load(
        self,
        path: str | os.PathLike,
        state: dict[str, Any] | None = None,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> dict[str, Any]: ...
    def exit_for_requeue(self, code: int = ...) -> None: ...


__all__ = ["ResumeHost", "as_manager", "exit_if_preempted", "latest_checkpoint", "load_latest", "save_checkpoint"]


def as_manager(manager: CheckpointManager | str | os.PathLike[str], io: Any = None) -> CheckpointManager:
    """A `CheckpointManager`, or one for the project directory given (all checkpoints kept,
    stored through ``io``, a `fabricx.checkpoint.io.CheckpointIO`, when given).

    Example:
        ```python
        as_manager("runs/exp1").directory  # runs/exp1/checkpoints
        ```
    """
    if isinstance(manager, CheckpointManager):
        return manager
    if isinstance(manager, str | os.PathLike):
        return CheckpointManager(manager, io=io)
    raise TypeError(f"Expected a CheckpointManager or a project directory path, got {type(manager).__name__}.")


def _rank_zero_value(fabric: ResumeHost, value: Path | None) -> Path | None:
    """Rank 0's ``value`` on every rank."""
    text = os.fspath(value) if value is not None else None
    if fabric.world_size > 1:
        text = fabric.broadcast(text, src=0)
    if text is None:
        return None
    return text if is_url(text) else Path(text)  # type: ignore[return-value]  # a URL stays a string


def latest_checkpoint(fabric: ResumeHost, manager: CheckpointManager | str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint as rank 0 sees it, the same on every rank (``None`` if none).

    Every rank must call it (it is a collective with several processes).

    Example:
        ```python
        path = latest_checkpoint(fabric, "runs/exp1")
        ```
    """
    from fabricx.checkpoint.background import wait_for_pending_save

    wait_for_pending_save()  # an asynchronous save of this process may still be committing the newest
    manager = as_manager(manager, fabric.strategy.checkpoint_io)
    return _rank_zero_value(fabric, manager.latest() if fabric.is_global_zero else None)


def load_latest(
    fabric: ResumeHost,
    manager: CheckpointManager | str | os.PathLike[str],
    state: dict[str, Any],
    strict: bool = True,
) -> Path | None:
    """Restore ``state`` from the newest complete checkpoint, if there is one; return its path.

    Unfinished saves (a job killed while saving) are never picked. Every rank must call it.

    Example:
        ```python
        resumed_from = load_latest(fabric, manager, state)
        start_step = state["step"]  # 0 on a fresh start
        ```
    """
    path = latest_checkpoint(fabric, manager)
    if path is not None:
        fabric.load(path, state, strict=strict)
    return path


def save_checkpoint(
    fabric: ResumeHost,
    manager: CheckpointManager | str | os.PathLike[str],
    state: dict[str, Any],
    filter: dict[str, Any] | None = None,
    async_save: bool = False,
    index: int | None = None,
) -> Path:
    """Save ``state`` as the manager's next checkpoint (or ``checkpoint_<index>``), then let rank 0 apply
    the retention limit.

    Every rank must call it. The previous checkpoints are deleted only after the new one is complete,
    so a crash at any moment leaves at least one complete checkpoint. With ``async_save=True`` the
    checkpoint is written in the background (see ``Fabric.save``) and retention runs once it is committed.

    Example:
        ```python
        manager = CheckpointManager("runs/exp1", total_limit=2)
        path = save_checkpoint(fabric, manager, state)
        ```
    """
    manager = as_manager(manager, fabric.strategy.checkpoint_io)
    from fabricx.checkpoint.background import wait_for_pending_save

    wait_for_pending_save()  # its retention first, and its name counted
    # Rank 0 claims the name atomically, so other jobs saving into the same directory never share it.
    # The claim lives until the save has committed or failed (for an asynchronous save, until its
    # background write ends), so no other job's clean-up takes its temporary copy for a dead one.
    reserved = reserve_on_rank_zero(fabric, lambda: manager.reserve(index))
    try:
        path = _rank_zero_value(fabric, reserved)
        if path is None:  # rank 0 always sends a path; this is for type checkers
            raise RuntimeError("save_checkpoint() got no path from rank 0; every rank must call it.")
        if async_save:
            handle = fabric.save(path, state, filter=filter, async_save=True)
            if reserved is not None and handle is not None:
                claim, reserved = reserved, None
                handle.add_commit_callback(manager.apply_retention)
                handle.add_done_callback(lambda: manager.release(claim))
            return path
        fabric.save(path, state, filter=filter)
    finally:
        if reserved is not None:
            manager.release(reserved)
    if fabric.is_global_zero:
        _apply_retention(manager, path)
    return path


def _apply_retention(manager: CheckpointManager, path: Any) -> None:
    # The save has committed: a failure now is retention's own, reported as such.
    try:
        manager.apply_retention()
    except Exception as error:
        raise CheckpointError(
            f"The checkpoint {path} was saved and committed (it is the latest), but removing older checkpoints "
            f"failed: {type(error).__name__}: {error}"
        ) from error


def exit_if_preempted(
    fabric: ResumeHost, manager: CheckpointManager | str | os.PathLike[str], state: dict[str, Any]
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
        save_checkpoint(fabric, manager, state)
        fabric.exit_for_requeue()
