"""`Checkpointer`: the one door through which a run's checkpoints are saved and loaded (one per Fabric).

`save()` hands the state to the layout its key names (`fabricx.checkpoint.layouts`) with a save mode (sync and
async saves are the same steps: `fabricx.checkpoint.save_modes`); `load()` reads with the layout that holds the
path and restores into the live objects (`fabricx.checkpoint.fabric_state`). `save_next()` reserves a project's
next name, saves, applies retention, releases; `latest()` is the one "newest complete checkpoint" lookup. The
checkpointer owns the asynchronous save in flight. Its host is a `fabricx.checkpoint.host.CheckpointHost` (every
strategy is one): this module imports no strategy, not the façade, and no layout backend.

Example:
    ```python
    fabric.checkpointer.save("out/model.pth", {"model": model}, mode="async")
    path = fabric.checkpointer.save_next("runs/exp1", state)
    ```
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from fabricx.checkpoint.manager import CheckpointManager, PathClaim, claim_path
from fabricx.checkpoint.storage import is_url
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.layouts import Layout
    from fabricx.checkpoint.loaded import LoadedCheckpoint
    from fabricx.checkpoint.save_modes import SaveModeName

__all__ = ["FAILED_SAVE_EXIT_CODE", "Checkpointer"]

_T = TypeVar("_T")
#: How many times a single process loads again when another save replaced the checkpoint meanwhile.
_LOAD_ATTEMPTS = 5
#: Exit status of a process whose last background save failed and was never waited for (what an
#: uncaught exception, e.g. a failed synchronous save, exits with).
FAILED_SAVE_EXIT_CODE = 1


class Checkpointer:
    """Saves and loads checkpoints for one host (a strategy); every rank must call each method.

    Example:
        ```python
        fabric.checkpointer.save("ckpt/step_10", state)
        fabric.checkpointer.load("ckpt/step_10", state)
        ```
    """

    def __init__(self, host: CheckpointHost, own_entries: Callable[[dict[str, Any]], dict[str, Any]] | None = None):
        self.host = host
        # What the owner adds to every saved or loaded state (Fabric: RNG states, the precision, the window).
        self._own_entries: Callable[[dict[str, Any]], dict[str, Any]] = own_entries or dict
        self._pending: AsyncSave | None = None
        self._lock = threading.Lock()
        self._exit_hook: bool | None = None  # None: not installed; else whether it can set the exit status
        self._kept: dict[str, LoadedCheckpoint | None] = {}  # paths read once (see `read_once`)
        self._read_layouts: dict[str, Layout] = {}  # paths whose reader is named (see `read_once`)

    # -- the pending save ----------------------------------------------------------------------------
    @property
    def pending(self) -> AsyncSave | None:
        """The background save that has not been waited for, if any."""
        return self._pending

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error if it failed (once), as
        ``fabric.checkpointer.wait()``."""
        with self._lock:
            handle, self._pending = self._pending, None
        if handle is not None and not handle.reported:
            handle.wait()

    def close(self) -> None:
        """Wait for the last save and let go of the host buffers kept for the next asynchronous one (as
        ``fabric.checkpointer.close()``)."""
        from fabricx.checkpoint.background import release_staging_buffers

        self.wait()
        release_staging_buffers()

    def _hold(self, handle: AsyncSave | None) -> AsyncSave | None:
        if handle is None:
            return None
        with self._lock:
            self._pending = handle
            if self._exit_hook is None:
                from fabricx._compat.thread_shutdown import at_thread_shutdown

                self._exit_hook = at_thread_shutdown(self._wait_at_exit)
        return handle

    def _wait_at_exit(self) -> None:
        """At shutdown, once the main thread has finished: wait for the last save; if it failed, say so and
        exit with `FAILED_SAVE_EXIT_CODE`, so a scheduler never takes the run for a success."""
        try:
            self.wait()
        except CheckpointError as error:
            print(f"fabricx: {error}", file=sys.stderr)
            if self._exit_hook:
                from fabricx._compat.thread_shutdown import exit_after_shutdown

                exit_after_shutdown(FAILED_SAVE_EXIT_CODE)

    # -- save and load -------------------------------------------------------------------------------
    def save(
        self,
        path: str | os.PathLike,
        state: dict[str, Any] | Callable[[], dict[str, Any]],
        filter: Mapping[str, Callable] | None = None,
        *,
        layout: str | Layout | None = None,
        mode: SaveModeName = "sync",
        exclusive: bool = False,
    ) -> AsyncSave | None:
        """Write ``state`` to ``path`` in the layout its name asks for (or ``layout``: a key or a layout object).

        A path naming a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) becomes one ``torch.save`` file; any
        other path a fabricx checkpoint directory. ``mode="async"`` returns once the state is copied to host
        memory, with the handle of the write going on in the background; ``"sync"`` returns once committed.
        ``exclusive=True`` claims the name (``<path>.reserved``) until the save has committed or failed, so
        two jobs never write one file; ``state`` may then be a function that makes it, called once the name is
        held (the Trainer's ``on_save_checkpoint`` hooks run inside the claim).

        Example:
            ```python
            fabric.checkpointer.save("ckpt/step_10", {"model": model, "step": 10})
            fabric.checkpointer.save("out/model.pth", {"model": model}, mode="async")
            ```
        """
        path = os.fspath(path)

        def write(at: str) -> AsyncSave | None:
            return self._save(at, state, filter, layout, mode)

        if not exclusive:
            self.wait()  # one save at a time: the next one's agreement shares the background group
            return write(path)
        return self._save_held(lambda: claim_path(path), lambda _: path, _release, write)[1]

    def _save(
        self,
        path: str,
        state: dict[str, Any] | Callable[[], dict[str, Any]],
        filter: Mapping[str, Callable] | None,
        layout: str | Layout | None,
        mode: Any,
    ) -> AsyncSave | None:
        from fabricx.checkpoint.layouts import SaveRequest, get_layout, layout_for
        from fabricx.checkpoint.save_modes import save_mode

        backend = layout if layout is not None and not isinstance(layout, str) else get_layout(layout_for(path, layout))
        made = state() if callable(state) else state
        request = SaveRequest(self.host, path, self._own_entries(made), filter, save_mode(mode))
        return self._hold(backend.save(request))

    def save_next(
        self,
        project: CheckpointManager | str | os.PathLike[str],
        state: dict[str, Any],
        filter: Mapping[str, Callable] | None = None,
        *,
        mode: SaveModeName = "sync",
        index: int | None = None,
    ) -> Path:
        """Save ``state`` as the project's next checkpoint (or ``checkpoint_<index>``), then let rank 0 apply
        the retention limit; return its path.

        ``project`` is a `fabricx.checkpoint.CheckpointManager` or a project directory. Rank 0 reserves the
        name until the save has committed or failed, so other jobs saving into the same directory never share
        it; older checkpoints are removed only once the new one is committed (for ``mode="async"``, when its
        background write commits).

        Example:
            ```python
            manager = CheckpointManager("runs/exp1", total_limit=2)
            path = fabric.checkpointer.save_next(manager, state)
            ```
        """
        manager = self.manager(project)
        path, _ = self._save_held(
            lambda: manager.reserve(index),
            lambda reserved: self._from_rank_zero(reserved),
            manager.release,
            lambda at: self._save(at, state, filter, None, mode),
            retention=manager.apply_retention,
        )
        return path

    def _save_held(
        self,
        reserve: Callable[[], _T],
        path_of: Callable[[_T | None], Any],
        release: Callable[[_T], Any],
        save: Callable[[str], AsyncSave | None],
        retention: Callable[[], Any] | None = None,
    ) -> tuple[Any, AsyncSave | None]:
        """Reserve on rank 0 → ``save(path)`` → retention (rank 0, after the commit) → release: the one place
        for it."""
        self.wait()  # the last save's retention first, and its name counted
        held = self._on_rank_zero(reserve)
        handle = None
        try:
            path = path_of(held)
            if path is None:  # rank 0 always sends a path; this is for type checkers
                raise RuntimeError("The checkpoint save got no path from rank 0; every rank must call it.")
            handle = save(os.fspath(path))
            if handle is not None and held is not None:
                mine, held = held, None
                if retention is not None:
                    handle.add_commit_callback(retention)
                handle.add_done_callback(lambda: release(mine))
        finally:
            if held is not None:
                release(held)
        if handle is None and retention is not None and self.host.is_global_zero:
            _apply_retention(retention, path)
        return path, handle

    def load(
        self,
        path: str | os.PathLike,
        state: dict[str, Any] | Any = None,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Restore a checkpoint into ``state`` (or return all of it when ``state`` is None); return the rest.

        ``state`` may also be one module or optimizer: the file then holds its plain state dict (as
        ``torch.save(model.state_dict())`` writes) and nothing is returned. Entries the host stores its own way
        are restored by its `fabricx.checkpoint.contents.EntryStorage`; per-rank entries follow
        `fabricx.checkpoint.fabric_state.rank_entries()`. ``weights_only=False`` unpickles a foreign single
        file (with a warning); only do that for files you trust.

        Example:
            ```python
            remainder = fabric.checkpointer.load("ckpt/step_10", {"model": model})
            fabric.checkpointer.load("pretrained.pt", model)
            ```
        """
        if weights_only is False:
            from fabricx.checkpoint.unsafe_pickle import allow_unsafe_pickle

            with allow_unsafe_pickle(path):
                return self.load(path, state, strict)
        self.wait()
        path = os.fspath(path)
        _refuse_leftover(path)
        if state is not None and not isinstance(state, dict):
            self._load_one(path, state, strict)
            return {}
        if state is None:
            return self._load(path, None, strict)
        internal = self._own_entries(state)
        remainder = self._load(path, internal, strict)
        for key in state:  # plain values are replaced by the loaded ones
            if key in internal and internal[key] is not state[key]:
                state[key] = internal[key]
        return remainder

    def _load(self, path: str, state: dict[str, Any] | None, strict: bool) -> dict[str, Any]:
        from fabricx.checkpoint.contents import checkpoint_io_of
        from fabricx.checkpoint.fabric_state import apply_checkpoint
        from fabricx.checkpoint.layouts import saved_layout

        layout = self._read_layouts.get(path) or saved_layout(path)
        kept = path in self._kept
        for attempt in range(_LOAD_ATTEMPTS):
            loaded = self._kept.get(path)
            if loaded is None:
                loaded = layout.read(path, self.host.global_rank, checkpoint_io_of(self.host))
                if kept:
                    self._kept[path] = loaded
            try:
                match_state = getattr(layout, "match_state", None)  # optional: see Layout
                if state is not None and match_state is not None:
                    match_state(loaded, self.host, state)
                result = apply_checkpoint(self.host, loaded, path, state, strict, kept=kept)
            except BaseException:
                if not kept:  # a kept read stays for the next load of it (read_once drops it)
                    _unpin(loaded)
                raise
            if not kept or result is None:
                _unpin(loaded)
                if kept:
                    self._kept[path] = None  # replaced meanwhile: read it again
            if result is not None:
                return result
            # A strategy's own files are read by name after the rest: another job replaced the checkpoint
            # meanwhile, so they may be another save's. Alone, load it again; with several ranks each would
            # decide on its own (and a collective load would hang), so say so.
            if self.host.world_size > 1 or attempt == _LOAD_ATTEMPTS - 1:
                raise CheckpointError(
                    f"The checkpoint {path} was replaced by another save while being loaded, so its files may "
                    "come from two saves; nothing of it counts. Load it again once no job is rewriting it."
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _load_one(self, path: str, target: Any, strict: bool) -> None:
        """A plain state dict file into one module or optimizer (``fabric.load_raw``)."""
        from torch import nn

        from fabricx.checkpoint.format import read_checkpoint
        from fabricx.checkpoint.safe_read import check_optimizer_state

        contents = read_checkpoint(path, rank=self.host.global_rank).shared
        if isinstance(target, nn.Module):
            self.host.load_module_state_dict(target, contents, strict=strict)
        else:
            check_optimizer_state(target, contents, f"checkpoint {path}")
            self.host.load_optimizer_state(target, contents)

    @contextlib.contextmanager
    def read_once(self, path: str | os.PathLike, layout: Layout | None = None) -> Iterator[None]:
        """Inside the block, every load of ``path`` on this rank takes the same read of it (the Trainer's resume
        restores in two phases, as Lightning's does from the one checkpoint it loaded). ``layout`` reads it
        instead of the layout that holds the path (a plugin's file: `fabricx.checkpoint.layouts.plugin_file`).

        Example:
            ```python
            with fabric.checkpointer.read_once("last.ckpt"):
                contents = fabric.load("last.ckpt")           # reads the file
                fabric.load("last.ckpt", {"model": model})    # takes that read
            ```
        """
        key = os.fspath(path)
        self._kept[key] = None
        if layout is not None:
            self._read_layouts[key] = layout
        try:
            yield
        finally:
            self._read_layouts.pop(key, None)
            loaded = self._kept.pop(key, None)
            if loaded is not None:
                _unpin(loaded)

    # -- projects ------------------------------------------------------------------------------------
    def manager(self, project: CheckpointManager | str | os.PathLike[str]) -> CheckpointManager:
        """``project`` as a `CheckpointManager` (a directory gets one that keeps every checkpoint, stored
        through the host's checkpoint I/O).

        Example:
            ```python
            fabric.checkpointer.manager("runs/exp1").directory  # runs/exp1/checkpoints
            ```
        """
        if isinstance(project, CheckpointManager):
            return project
        if isinstance(project, str | os.PathLike):
            return CheckpointManager(project, io=getattr(self.host, "checkpoint_io", None))
        raise TypeError(f"Expected a CheckpointManager or a project directory path, got {type(project).__name__}.")

    def latest(self, project: CheckpointManager | str | os.PathLike[str]) -> Path | None:
        """The project's newest complete checkpoint as rank 0 sees it, the same on every rank (``None`` if none).

        Ranks that each scanned the directory could disagree (rank 0 may be committing the next checkpoint
        while another looks), so rank 0 decides and the others get its answer. Unfinished saves are never
        picked.

        Example:
            ```python
            path = fabric.checkpointer.latest("runs/exp1")
            ```
        """
        self.wait()  # an asynchronous save of this process may still be committing the newest
        manager = self.manager(project)
        return self._from_rank_zero(manager.latest() if self.host.is_global_zero else None)

    # -- rank 0 decides ------------------------------------------------------------------------------
    def _from_rank_zero(self, value: Any) -> Any:
        """Rank 0's path on every rank (a URL stays a string)."""
        text = os.fspath(value) if value is not None else None
        if self.host.world_size > 1:
            text = self.host.broadcast(text, src=0)
        if text is None:
            return None
        return text if is_url(text) else Path(text)

    def _on_rank_zero(self, reserve: Callable[[], _T]) -> _T | None:
        """Run ``reserve`` on rank 0 and return its claim there (``None`` elsewhere); if it raised
        `CheckpointError`, every rank raises it, so no rank goes on into a collective save."""
        claim, refused = None, None
        if self.host.is_global_zero:
            try:
                claim = reserve()
            except CheckpointError as error:
                refused = error
        if self.host.world_size > 1:
            reason = self.host.broadcast(str(refused) if refused is not None else None, src=0)
            if reason is not None and refused is None:
                refused = CheckpointError(reason)
        if refused is not None:
            raise refused
        return claim


def _refuse_leftover(path: str) -> None:
    """A name a writer leaves beside a checkpoint (`fabricx.checkpoint.atomic.leftover_of`) is never loaded: it
    may be half written, or belong to a save still running."""
    from fabricx.checkpoint.atomic import leftover_of

    found = leftover_of(PurePosixPath(path.rstrip("/")).name)
    if found is not None:
        base, kind = found
        what = {"tmp": "an unfinished save", "old": "a replaced copy", "del": "a copy being deleted"}.get(kind)
        raise CheckpointError(
            f"Refusing to load {path}: it is {what or 'a reservation'} of the checkpoint {base!r} (a left-over a "
            f"writer leaves beside it), not a checkpoint. Load {base!r} itself; the next save removes left-overs."
        )


def _unpin(loaded: LoadedCheckpoint) -> None:
    if loaded.pin is not None:
        loaded.pin.close()
        loaded.pin = None


def _release(claim: PathClaim | None) -> None:
    if claim is not None:
        claim.release()


def _apply_retention(retention: Callable[[], Any], path: Any) -> None:
    # The save has committed: a failure now is retention's own, reported as such.
    try:
        retention()
    except Exception as error:
        raise CheckpointError(
            f"The checkpoint {path} was saved and committed (it is the latest), but removing older checkpoints "
            f"failed: {type(error).__name__}: {error}"
        ) from error
