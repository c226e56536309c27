"""The directory layout: a fabricx checkpoint directory (`fabricx.checkpoint.format`), committed atomically.

Every rank plans the save the same way (`plan_directory_save()`): entries the strategy stores itself
(DCP shards, DeepSpeed engine files) go through its `fabricx.checkpoint.contents.EntryStorage`, the
rest through the shared layout (``shared`` on rank 0, ``per_rank`` on each rank). Then the one
`write_and_commit()` job writes this rank's files and commits once every rank did. Synchronous and
asynchronous saves run exactly these steps; the `fabricx.checkpoint.save_modes.SaveMode` says where the
job runs and whether it writes from a host copy.

Example:

```python
fabric.save("ckpt/step_10", {"model": model, "step": 10})  # this layout
```
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.contents import EntryStorage, checkpoint_io_of, entry_storage_of
from fabricx.checkpoint.format import CheckpointWriter, read_checkpoint

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.checkpoint.loaded import LoadedCheckpoint
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["LAYOUT", "DirectoryLayout", "DirectorySave", "plan_directory_save", "write_and_commit"]


@dataclass
class DirectorySave:
    """One save in the directory layout, as every rank plans it before writing: what goes through the
    strategy's own storage (``claimed``), what through the shared layout (``shared`` on rank 0,
    ``per_rank`` on each rank), and the one `CheckpointWriter` of the save.
    """

    storage: EntryStorage | None
    claimed: dict[str, Any]
    plain: dict[str, Any]
    shared: dict[str, Any]
    per_rank: dict[str, Any]
    writer: CheckpointWriter


def plan_directory_save(request: SaveRequest, barrier: Callable[[], Any]) -> DirectorySave:
    """Split the request's state for a directory-layout save and build its writer (``barrier`` waits for
    every rank; used only with more than one). Every rank calls it at the same point: it broadcasts the
    save's token.

    Example:
        ```python
        request = SaveRequest(strategy, "ckpt/step_10", state, None, mode)
        plan = plan_directory_save(request, strategy.barrier)
        ```
    """
    strategy, path = request.host, request.path
    storage = entry_storage_of(strategy)
    claimed = request.claimed_by(storage)
    plain = {key: obj for key, obj in request.state.items() if key not in claimed}
    shared, per_rank = request.split(plain)
    extra_meta = {storage.meta_key: storage.record(claimed)} if claimed and storage is not None else None
    distributed = strategy.world_size > 1
    writer = CheckpointWriter(
        path,
        rank=strategy.global_rank,
        world_size=strategy.world_size,
        barrier=barrier if distributed else None,
        token=strategy.broadcast(uuid.uuid4().hex) if distributed else None,
        extra_meta=extra_meta,
        io=checkpoint_io_of(strategy),
    )
    return DirectorySave(storage, claimed, plain, shared, per_rank, writer)


def write_and_commit(
    plan: DirectorySave,
    shared: dict[str, Any],
    per_rank: dict[str, Any],
    finish_claimed: Callable[[], dict[str, Any]],
    agreement: Callable[[bool], bool],
    before: Callable[[], None] | None = None,
) -> None:
    """Write this rank's files of ``plan`` and commit when every rank did (`CheckpointWriter.commit_agreed`).

    ``before`` finishes the contents' copy (an asynchronous save's deferred tensors); ``finish_claimed``
    returns the shared entries the strategy's own storage added.
    """
    error: BaseException | None = None
    try:
        if before is not None:
            before()
        shared = {**shared, **finish_claimed()}
        plan.writer.write_shared(shared)
        plan.writer.write_rank(per_rank)
    except BaseException as caught:
        error = caught
    plan.writer.commit_agreed(error, agreement)


class DirectoryLayout:
    """The `fabricx.checkpoint.layouts.Layout` of checkpoint directories (it also reads any other path)."""

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: write the state as a checkpoint directory at the path; the handle of an asynchronous save.

        Example:

        ```python
        state = {"model": model, "step": 3}
        mode = save_mode("async")
        handle = LAYOUT.save(SaveRequest(strategy, "ckpt", state, None, mode))
        ```
        """
        host, mode = request.host, request.mode
        plan = plan_directory_save(request, mode.barrier(host))
        agreement = mode.agreement(host)
        copy = mode.stage(plan.shared if host.is_global_zero else {}, plan.per_rank, plan.plain.values())
        plan.shared, plan.per_rank = {}, {}  # the copy is what is written; the plan holds no live state
        staging = plan.writer.begin()  # rank 0 creates the staging directory
        try:
            finish_claimed = mode.write_claimed(plan.storage, staging, plan.claimed, request.filter)
        except BaseException:
            plan.writer.abort()
            copy.release()
            raise
        plan.plain, plan.claimed = {}, {}  # written or staged: the job needs neither
        guard = copy.hold_steps()

        def job() -> None:
            try:
                write_and_commit(plan, copy.shared, copy.per_rank, finish_claimed, agreement, copy.finish)
            finally:
                copy.release()

        return mode.run(request.path, job, guard)

    def holds(self, path: str) -> bool:
        return True  # asked last: its reader names what is wrong with anything no other layout holds

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        return read_checkpoint(path, rank=rank, io=io, keep_pin=True)


LAYOUT = DirectoryLayout()
