"""``fabric.save(..., async_save=True)``: the checkpoint pipeline with its writing moved off the training loop.

In the foreground every rank turns its state into checkpoint contents (as a synchronous save does),
copies them to host memory (`fabricx.checkpoint.background.stage_to_host_deferred()`) and rank 0
creates the temporary directory. The parameters and optimizer state of the optimizers in the state are
copied at the start of the background thread instead, and the next ``optimizer.step()`` waits for that
copy (`fabricx.checkpoint.step_guard`), so the call returns at once and forward/backward go on
meanwhile. The background thread then writes the files, makes them durable, and the ranks agree (on a
dedicated gloo group) that every one of them succeeded before rank 0 commits. A failure on any rank,
or a crash, leaves the checkpoint uncommitted: the previous one stays the latest.

Example:
    ```python
    handle = save_fabric_checkpoint_async(fabric.strategy, "ckpt/step_100", state)
    ...
    handle.wait()
    ```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from fabricx.checkpoint.background import (
    AsyncSave,
    agree,
    background_group,
    stage_to_host_deferred,
    staging_buffers,
    start_background_save,
    wait_for_pending_save,
)
from fabricx.checkpoint.fabric_state import plan_directory_save, save_one_file, write_and_commit
from fabricx.checkpoint.layouts import layout_for
from fabricx.checkpoint.step_guard import StagingGuard, guarded_storages
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.host import CheckpointHost

__all__ = ["save_fabric_checkpoint_async"]


def save_fabric_checkpoint_async(
    strategy: CheckpointHost,
    path: str,
    state: dict[str, Any],
    filter: dict[str, Callable] | None = None,
    layout: str | None = None,
) -> AsyncSave:
    """Stage ``state`` in host memory and write it to ``path`` in the background; every rank calls it.

    The same pipeline as `fabricx.checkpoint.fabric_state.save_fabric_checkpoint()` (one plan, one
    writer, one `fabricx.checkpoint.fabric_state.write_and_commit()`), run from a host copy in a
    background thread: entries a strategy stores itself go through its
    `fabricx.checkpoint.fabric_state.EntryStorage`, in the background where it has a ``save_async``
    (DCP shards), otherwise in the foreground (engine files).

    Example:
        ```python
        handle = save_fabric_checkpoint_async(strategy, "ckpt", {"model": model, "step": 3})
        handle.wait()  # the checkpoint is committed on every rank once this returns
        ```
    """
    wait_for_pending_save()
    if layout_for(path, layout) == "single_file":
        return save_one_file(strategy, path, state, filter, asynchronous=True)
    group = background_group()

    def barrier() -> None:
        if not agree(True, group):  # pragma: no cover - a rank reaching a barrier always agrees
            raise CheckpointError("another rank gave up on the background save")

    plan = plan_directory_save(strategy, path, state, filter, barrier)
    buffers: list = []
    deferred = guarded_storages(plan.plain.values())  # copied in the background; optimizer.step() waits for it
    finish_shared: Callable[[], None] = _nothing
    shared_copy: dict = {}
    if strategy.is_global_zero:
        shared_copy, finish_shared = stage_to_host_deferred(plan.shared, deferred, reuse=buffers)
    rank_copy, finish_rank = stage_to_host_deferred(plan.per_rank, deferred, reuse=buffers)
    plan.shared, plan.per_rank = {}, {}  # the live state is not held past this call
    staging = plan.writer.begin()  # rank 0 creates the staging directory; no other thread uses the group now
    finish_claimed: Callable[[], dict[str, Any]] = dict
    try:
        save_async = getattr(plan.storage, "save_async", None)
        if plan.claimed and callable(save_async):  # stages now, writes in the background (DCP async_save)
            finish_claimed = cast("Callable[[], dict[str, Any]]", save_async(staging, plan.claimed, filter, group))
        else:  # the strategy's own files are written here, before the rest goes to the background
            written = plan.write_claimed(staging, filter)
            finish_claimed = lambda: written  # noqa: E731
    except BaseException:
        plan.writer.abort()
        staging_buffers.give_back(buffers)
        raise

    plan.plain, plan.claimed = {}, {}  # written or staged: the background thread needs neither
    guard = StagingGuard() if deferred else None

    def finish_staging() -> None:
        try:
            finish_shared()
            finish_rank()
        finally:
            if guard is not None:
                guard.release()  # optimizer steps may change the originals again

    def job() -> None:
        try:
            write_and_commit(plan, shared_copy, rank_copy, finish_claimed, lambda ok: agree(ok, group), finish_staging)
        finally:
            if guard is not None:
                guard.release()
            staging_buffers.give_back(buffers)  # the next save (which waits for this one) copies into them

    try:
        handle = start_background_save(path, job, guard)
    except BaseException:
        if guard is not None:
            guard.release()
        raise
    return handle


def _nothing() -> None:
    return None
