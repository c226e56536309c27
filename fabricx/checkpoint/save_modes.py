"""Synchronous and asynchronous saves as one pipeline: a save mode says only what differs between them.

A layout writes a checkpoint in the same steps in both modes: plan, copy what must not change, write
what a strategy stores itself, then run one write-and-commit job. The mode decides where that job
runs (`SaveMode.run()`: here and waited for, or in a background thread), whether the contents need a
host copy first (only when training goes on meanwhile), and which process group the ranks agree on
(the training group, or a dedicated gloo one so a background thread never interleaves with training).

Example:

```python
mode = save_mode("async")
copy = mode.stage(shared, per_rank, live=state.values())
handle = mode.run(path, lambda: write(copy.shared, copy.per_rank), copy.hold_steps())  # None when "sync"
```
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from fabricx.checkpoint.background import (
    AsyncSave,
    agree,
    background_group,
    stage_to_host,
    stage_to_host_deferred,
    staging_buffers,
    start_background_save,
)
from fabricx.checkpoint.step_guard import StagingGuard, guarded_storages
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.contents import EntryStorage
    from fabricx.checkpoint.host import CheckpointHost, RankHost

__all__ = ["Asynchronous", "HostCopy", "SaveMode", "SaveModeName", "Synchronous", "save_mode"]

#: How ``fabric.save`` writes: ``"sync"`` returns once committed, ``"async"`` writes in the background.
SaveModeName = Literal["sync", "async"]


def _nothing() -> None:
    return None


@dataclass
class HostCopy:
    """The contents a save writes: the live ones (sync), or a host copy whose optimizer tensors may be
    copied last (async: `finish()` copies them, and `hold_steps()` makes ``optimizer.step()`` wait for that)."""

    shared: dict[str, Any]
    per_rank: dict[str, Any]
    finish_copies: Callable[[], None] = _nothing
    deferred: bool = False
    buffers: list | None = None
    guard: StagingGuard | None = None

    def hold_steps(self) -> StagingGuard | None:
        """From now on ``optimizer.step()`` waits until `finish()` has run (when some copies are deferred)."""
        if self.deferred:
            self.guard = StagingGuard()
        return self.guard

    def finish(self) -> None:
        """Make the deferred copies (in the writing thread, before the write)."""
        try:
            self.finish_copies()
        finally:
            if self.guard is not None:
                self.guard.release()  # optimizer steps may change the originals again

    def release(self) -> None:
        """After the write (or a failure): let optimizer steps go on, keep the buffers for the next save."""
        if self.guard is not None:
            self.guard.release()
        if self.buffers is not None:
            staging_buffers.give_back(self.buffers)  # the next save (which waits for this one) copies into them


class SaveMode(ABC):
    """What a synchronous and an asynchronous save do differently; every other step is the layout's own."""

    #: Whether a strategy's storage that can write the entries it claims in the background does so.
    claimed_in_background = False

    @abstractmethod
    def barrier(self, host: CheckpointHost) -> Callable[[], Any]:
        """A wait for every rank, on the group this mode's writes use (every rank, same point)."""

    @abstractmethod
    def agreement(self, host: CheckpointHost) -> Callable[[bool], bool]:
        """``agreement(ok)``: whether ``ok`` holds on every rank (a collective on this mode's group)."""

    @abstractmethod
    def copy(self, obj: Any) -> Any:
        """``obj`` as the write will read it: itself, or a host copy training cannot change."""

    @abstractmethod
    def stage(self, shared: dict[str, Any], per_rank: dict[str, Any], live: Iterable[Any]) -> HostCopy:
        """The contents to write; ``live`` are the user's objects (their optimizers' tensors may be copied last)."""

    def write_claimed(
        self,
        storage: EntryStorage | None,
        staging: Path,
        entries: dict[str, Any],
        filter: Mapping[str, Callable] | None,
    ) -> Callable[[], dict[str, Any]]:
        """Have ``storage`` write the ``entries`` it claims; the returned call gives the shared entries it adds.

        A storage that stages now and writes in the background (DCP ``async_save``) does so in an asynchronous
        mode; any other (engine files) writes here, before the rest.
        """
        save_async = getattr(storage, "save_async", None)
        if entries and self.claimed_in_background and callable(save_async):
            return cast("Callable[[], dict[str, Any]]", save_async(staging, entries, filter, self.writer_group()))
        written = storage.save(staging, entries, filter) if entries and storage is not None else {}
        return lambda: written

    def writer_group(self) -> Any:
        """The process group the ranks agree on while writing in the background (``None``: the default one)."""
        return None

    @abstractmethod
    def share_outcome(self, host: RankHost, error: BaseException | None) -> None:
        """After a write only rank 0 made: raise its ``error`` where this mode reports it."""

    @abstractmethod
    def run(self, path: Any, job: Callable[[], None], guard: StagingGuard | None = None) -> AsyncSave | None:
        """Run the write-and-commit ``job``: here, waited for (``None``), or in the background (its handle)."""

    def run_rank_zero_write(self, host: RankHost, path: Any, write: Callable[[], None] | None) -> AsyncSave | None:
        """`run` a job in which only rank 0 writes (``write`` is ``None`` on the other ranks), then every rank
        learns its outcome (`share_outcome`)."""

        def job() -> None:
            error: BaseException | None = None
            if write is not None:
                try:
                    write()
                except Exception as failure:
                    error = failure
            self.share_outcome(host, error)

        return self.run(path, job)


class Synchronous(SaveMode):
    """The asynchronous save, waited for: the job runs in the caller, so no copy is needed and the ranks
    agree on the training group (or the background saves' one, where it exists)."""

    def barrier(self, host: CheckpointHost) -> Callable[[], Any]:
        return host.barrier

    def agreement(self, host: CheckpointHost) -> Callable[[bool], bool]:
        if host.world_size == 1:
            return lambda ok: ok
        group = background_group()
        if group is not None:
            return lambda ok: agree(ok, group)
        return lambda ok: all(bool(host.broadcast(ok, src=rank)) for rank in range(host.world_size))

    def copy(self, obj: Any) -> Any:
        return obj  # nothing changes the state while the caller waits

    def stage(self, shared: dict[str, Any], per_rank: dict[str, Any], live: Iterable[Any]) -> HostCopy:
        return HostCopy(shared, per_rank)

    def share_outcome(self, host: RankHost, error: BaseException | None) -> None:
        if host.world_size == 1:
            if error is not None:
                raise error
            return
        message = host.broadcast(None if error is None else f"{type(error).__name__}: {error}", src=0)
        if error is not None:
            raise error
        if message is not None:
            raise CheckpointError(f"Rank 0 could not write the checkpoint: {message}")

    def run(self, path: Any, job: Callable[[], None], guard: StagingGuard | None = None) -> None:
        job()


class Asynchronous(SaveMode):
    """The save whose job runs in a background thread: the contents are copied to host memory first and the
    ranks agree on a dedicated gloo group (`fabricx.checkpoint.background.background_group()`)."""

    claimed_in_background = True

    def __init__(self) -> None:
        self._group: Any = None
        self._has_group = False

    def writer_group(self) -> Any:
        if not self._has_group:  # created collectively, so at the first foreground call of every rank
            self._group, self._has_group = background_group(), True
        return self._group

    def barrier(self, host: CheckpointHost) -> Callable[[], Any]:
        group = self.writer_group()

        def barrier() -> None:
            if not agree(True, group):  # pragma: no cover - a rank reaching a barrier always agrees
                raise CheckpointError("another rank gave up on the background save")

        return barrier

    def agreement(self, host: CheckpointHost) -> Callable[[bool], bool]:
        group = self.writer_group()
        return lambda ok: agree(ok, group)

    def copy(self, obj: Any) -> Any:
        return stage_to_host(obj)

    def stage(self, shared: dict[str, Any], per_rank: dict[str, Any], live: Iterable[Any]) -> HostCopy:
        buffers: list = []
        deferred = guarded_storages(live)  # copied in the background; optimizer.step() waits for it
        shared_copy, finish_shared = stage_to_host_deferred(shared, deferred, reuse=buffers)
        rank_copy, finish_rank = stage_to_host_deferred(per_rank, deferred, reuse=buffers)

        def finish_copies() -> None:
            finish_shared()
            finish_rank()

        return HostCopy(shared_copy, rank_copy, finish_copies, bool(deferred), buffers)

    def share_outcome(self, host: RankHost, error: BaseException | None) -> None:
        if error is not None:
            raise error  # rank 0's handle reports it; the other ranks wrote nothing

    def run(self, path: Any, job: Callable[[], None], guard: StagingGuard | None = None) -> AsyncSave:
        try:
            return start_background_save(path, job, guard)
        except BaseException:
            if guard is not None:
                guard.release()
            raise


def save_mode(name: SaveModeName) -> SaveMode:
    """The `SaveMode` called ``name``.

    Example:

    ```python
    save_mode("sync").run("ckpt", job)  # runs job here
    ```
    """
    if name == "sync":
        return Synchronous()
    if name == "async":
        return Asynchronous()
    raise ValueError(f"mode={name!r}; choose 'sync' or 'async'.")
