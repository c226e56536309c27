"""``fabric.save(..., async_save=True)``: the checkpoint pipeline with its writing moved off the training loop.

In the foreground every rank turns its state into checkpoint contents (as a synchronous save does),
copies them to host memory (:func:`~fabricx.checkpoint.background.stage_to_host`) and rank 0 creates
the temporary directory. A background thread then writes the files, makes them durable, and the
ranks agree (on a dedicated gloo group) that every one of them succeeded before rank 0 commits. A
failure on any rank, or a crash, leaves the checkpoint uncommitted: the previous one stays the latest.

Example::

    handle = save_fabric_checkpoint_async(fabric.strategy, "ckpt/step_100", state)
    ...
    handle.wait()
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.background import (
    AsyncSave,
    _pool,
    agree,
    background_group,
    stage_to_host,
    start_background_save,
    wait_for_pending_save,
)
from fabricx.checkpoint.fabric_state import split_state
from fabricx.checkpoint.format import CheckpointWriter
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.strategies.strategy import Strategy

__all__ = ["save_fabric_checkpoint_async"]


def save_fabric_checkpoint_async(
    strategy: Strategy,
    path: str,
    state: dict[str, Any],
    filter: dict[str, Callable] | None = None,
    on_commit: Callable[[], Any] | None = None,
) -> AsyncSave:
    """Stage ``state`` in host memory and write it to ``path`` in the background; every rank calls it.

    ``on_commit`` runs on rank 0 in the background thread right after the commit (e.g. retention).

    Example::

        handle = save_fabric_checkpoint_async(strategy, "ckpt", {"model": model, "step": 3})
        handle.wait()  # the checkpoint is committed on every rank once this returns
    """
    wait_for_pending_save()
    if type(strategy).save_checkpoint.__qualname__ != "Strategy.save_checkpoint":
        # A strategy with its own checkpoint layout (sharded, engine files) writes in the foreground.
        strategy.save_checkpoint(path, state, filter=filter)
        return _committed(path, on_commit if strategy.is_global_zero else None)
    group = background_group()
    distributed = strategy.world_size > 1
    shared, per_rank = split_state(strategy, state, filter)
    buffers: list = []
    shared_copy = stage_to_host(shared, reuse=buffers) if strategy.is_global_zero else None
    del shared
    rank_copy = stage_to_host(per_rank, reuse=buffers)
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
    )
    writer.begin()  # rank 0 creates the temporary directory; no other thread uses the group now

    def job() -> None:
        try:
            _write_and_commit(writer, shared_copy, rank_copy, group)
        finally:
            _pool.give_back(buffers)  # the next save (which waits for this one) copies into them
        if on_commit is not None and writer.rank == 0:
            on_commit()

    return start_background_save(path, job)


def _write_and_commit(writer: CheckpointWriter, shared: dict | None, per_rank: dict, group: Any) -> None:
    """Background: write this rank's files, agree that every rank did, then commit (rank 0)."""
    error: BaseException | None = None
    try:
        if shared is not None:
            writer.write_shared(shared)
        writer.write_rank(per_rank)
        _make_durable(writer)
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


def _make_durable(writer: CheckpointWriter) -> None:
    from fabricx.checkpoint.atomic import fsync_tree

    fsync_tree(writer.tmp)


def _committed(path: str, on_commit: Callable[[], Any] | None) -> AsyncSave:
    """A handle for a save that is already committed (written in the foreground)."""
    return start_background_save(path, on_commit or (lambda: None))
