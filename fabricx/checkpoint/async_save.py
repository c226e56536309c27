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

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from fabricx.checkpoint.background import (
    AsyncSave,
    _pool,
    agree,
    background_group,
    stage_to_host_deferred,
    start_background_save,
    wait_for_pending_save,
)
from fabricx.checkpoint.fabric_state import _claimed, _io, _storage, save_one_file, split_state
from fabricx.checkpoint.format import CheckpointWriter
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

    The same pipeline as `fabricx.checkpoint.fabric_state.save_fabric_checkpoint()`: entries a
    strategy stores itself go through its `fabricx.checkpoint.fabric_state.EntryStorage`, in
    the background where it has a ``save_async`` (DCP shards), otherwise in the foreground (engine files).

    Example:
        ```python
        handle = save_fabric_checkpoint_async(strategy, "ckpt", {"model": model, "step": 3})
        handle.wait()  # the checkpoint is committed on every rank once this returns
        ```
    """
    wait_for_pending_save()
    if layout_for(path, layout) == "single_file":
        return save_one_file(strategy, path, state, filter, asynchronous=True)
    storage = _storage(strategy)
    claimed = _claimed(storage, state)
    plain = {key: obj for key, obj in state.items() if key not in claimed}
    if claimed and storage is not None:
        storage.check_filter(list(claimed), filter)
    plain_filter = {key: keep for key, keep in (filter or {}).items() if key in plain} or None
    shared, per_rank = split_state(strategy, plain, plain_filter)
    extra_meta = {storage.meta_key: storage.record(claimed)} if claimed and storage is not None else None
    distributed = strategy.world_size > 1
    group = background_group()
    buffers: list = []
    deferred = guarded_storages(plain.values())  # copied in the background; optimizer.step() waits for it
    finish_shared: Callable[[], None] = _nothing
    shared_copy: dict = {}
    if strategy.is_global_zero:
        shared_copy, finish_shared = stage_to_host_deferred(shared, deferred, reuse=buffers)
    del shared
    rank_copy, finish_rank = stage_to_host_deferred(per_rank, deferred, reuse=buffers)
    token = strategy.broadcast(uuid.uuid4().hex) if distributed else None

    def barrier() -> None:
        if not agree(True, group):  # pragma: no cover - a rank reaching a barrier always agrees
            raise CheckpointError("another rank gave up on the background save")

    writer = CheckpointWriter(
        path,
        rank=strategy.global_rank,
        world_size=strategy.world_size,
        barrier=barrier if distributed else None,
        token=token,
        extra_meta=extra_meta,
        io=_io(strategy),
    )
    staging = writer.begin()  # rank 0 creates the staging directory; no other thread uses the group now
    finish_claimed: Callable[[], dict[str, Any]] = dict
    try:
        if claimed and storage is not None:
            save_async = getattr(storage, "save_async", None)
            if callable(save_async):  # stages now, writes in the background (DCP async_save)
                finish_claimed = cast("Callable[[], dict[str, Any]]", save_async(staging, claimed, filter, group))
            else:  # the strategy's own files are written here, before the rest goes to the background
                written = storage.save(staging, claimed, filter)
                finish_claimed = lambda: written  # noqa: E731
    except BaseException:
        writer.abort()
        _pool.give_back(buffers)
        raise

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
            _write_and_commit(writer, shared_copy, rank_copy, finish_claimed, group, finish_staging)
        finally:
            if guard is not None:
                guard.release()
            _pool.give_back(buffers)  # the next save (which waits for this one) copies into them

    try:
        handle = start_background_save(path, job)
    except BaseException:
        if guard is not None:
            guard.release()
        raise
    handle._guard = guard
    return handle


def _nothing() -> None:
    return None


def _write_and_commit(
    writer: CheckpointWriter,
    shared: dict,
    per_rank: dict,
    finish_claimed: Callable[[], dict[str, Any]],
    group: Any,
    finish_staging: Callable[[], None] = _nothing,
) -> None:
    """Background: finish the host copy, write this rank's files, make them durable, agree that every rank
    did, commit (rank 0)."""
    error: BaseException | None = None
    try:
        finish_staging()
        shared.update(finish_claimed())
        writer.write_shared(shared)
        writer.write_rank(per_rank)
        with writer._writing():
            writer.io.finish_rank(writer.tmp, writer.path, writer.rank)
    except BaseException as caught:
        error = caught
    if not agree(error is None, group):
        writer.abort()
        if error is not None:
            raise error
        raise CheckpointError(
            f"Another rank failed to write its part of the checkpoint {writer.path}; it was not committed."
        )
    committed: BaseException | None = None
    if writer.rank == 0:
        try:
            writer._write_meta_and_rename()
        except BaseException as caught:
            writer.abort()
            committed = caught
    if not agree(committed is None, group):
        writer._state = "aborted"
        if committed is not None:
            raise committed
        raise CheckpointError(f"Rank 0 could not commit the checkpoint {writer.path}.")
    writer._state = "committed"
