"""Automatic checkpoint names in a project directory, "latest" lookup and keep-last-k retention.

This is the one retention implementation: `CheckpointManager` keeps the last k checkpoints,
and `remove_checkpoint()` (which ``ModelCheckpoint`` uses for its top-k) deletes one so that no
reader ever sees a half-deleted copy. Complete means loadable: ``meta.json`` and every file its
manifest lists (`fabricx.checkpoint.format.is_complete()`), never "a ``meta.json`` exists".
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fabricx.checkpoint.atomic import discard_all, is_claimed, leftover_of, remove_dead_leftovers
from fabricx.checkpoint.format import is_complete
from fabricx.checkpoint.io import CheckpointIO, LocalCheckpointIO, default_io
from fabricx.checkpoint.storage import io_for, is_url, join_path
from fabricx.checkpoint.write_errors import write_failure
from fabricx.utilities.exceptions import CheckpointError
from fabricx.utilities.rank_zero import warn_at_user_line

try:  # advisory locks tell a live writer's reservation from one a killed writer left
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["CheckpointManager", "PathClaim", "claim_path", "remove_checkpoint"]

_RESERVED = "reserved"


def remove_checkpoint(path: str | os.PathLike[str], io: CheckpointIO | None = None) -> None:
    """Delete the checkpoint at ``path`` (and what crashed saves left next to it), crash-safely.

    Example:
        ```python
        remove_checkpoint("runs/exp1/checkpoints/checkpoint_0")
        ```
    """
    (io or default_io()).remove(path)


class PathClaim:
    """One writer's claim on a checkpoint name (see `claim_path`); `release()` it after the commit."""

    def __init__(self, marker: Path, fd: int) -> None:
        self.marker = marker
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the name up: the marker goes first, then the lock (idempotent)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> PathClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_path(path: str | os.PathLike[str]) -> PathClaim | None:
    """Claim the right to write the checkpoint at ``path``: one writer per name across processes and jobs.

    The claim is ``<path>.reserved``, locked while this process lives, as `CheckpointManager.reserve`
    claims a numbered name; unlike that, a name that exists may be written again (``last.ckpt`` is
    replaced every epoch). A claim a killed writer left is taken over; one a running writer holds raises
    `CheckpointError` and nothing is written. An object-store URL returns ``None`` (no locks there).

    Example:
        ```python
        with claim_path("checkpoints/last.ckpt"):
            trainer.save_checkpoint("checkpoints/last.ckpt")
        ```
    """
    if is_url(path):
        return None
    marker = Path(f"{os.fspath(path)}.{_RESERVED}")
    for _ in range(8):  # the marker can be replaced between our open and our lock: then lock the new one
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(marker, os.O_CREAT | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as error:
            raise write_failure(Path(path), error) from error
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CheckpointError(f"{marker} is not a reservation file; remove it to save {path}.")
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckpointError(
                f"Checkpoint {path} is being written by another running job (it holds {marker}). Save under "
                "another name or directory, or wait for that job."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(marker).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return PathClaim(marker, fd)
        os.close(fd)
    raise CheckpointError(f"Could not claim {path}: its reservation {marker} keeps being replaced.")


@dataclass(frozen=True)
class _Entry:
    index: int
    path: Any  # a Path, or a string for a URL
    kind: str  # "committed", "tmp", "old", "del" or "reserved"


class CheckpointManager:
    """Names checkpoints ``<project_dir>/checkpoints/<prefix>_<n>`` and prunes old ones.

    ``n`` keeps counting across runs and manager objects: it is one past the highest index found on
    disk, unfinished saves and reservations included, so a name is never reused. `reserve()`
    claims a name atomically (an exclusive create), so concurrent writers to one directory never get
    the same one. Only rank 0 should call `apply_retention()`, after a new checkpoint is complete.

    Example:
        ```python
        manager = CheckpointManager("runs/exp1", total_limit=2)
        path = manager.reserve()
        write_checkpoint(path, {"model": model.state_dict()}, None)
        manager.release(path)
        manager.apply_retention()
        resume_from = manager.latest()
        ```
    """

    def __init__(
        self,
        project_dir: str | os.PathLike[str],
        total_limit: int | None = None,
        prefix: str = "checkpoint",
        io: CheckpointIO | None = None,
    ):
        if total_limit is not None and (
            isinstance(total_limit, bool) or not isinstance(total_limit, int) or total_limit < 1
        ):
            raise ValueError(f"total_limit must be None (keep all) or an int >= 1; got {total_limit!r}.")
        if not prefix or "/" in prefix or os.sep in prefix:
            raise ValueError(f"prefix must be a non-empty name without path separators; got {prefix!r}.")
        # A URL (s3://...) stays a string: its storage lists names and commits markers instead of renaming.
        self._remote = is_url(project_dir)
        self.project_dir: Any = project_dir if self._remote else Path(project_dir)
        self.total_limit = total_limit
        self.prefix = prefix
        self.io = io_for(project_dir, io or default_io())
        self._pattern = re.compile(rf"^{re.escape(prefix)}_(\d+)$")
        self._held: dict[int, int] = {}  # index -> locked file descriptor of our reservation

    @property
    def directory(self) -> Any:
        """The folder holding the checkpoints: ``<project_dir>/checkpoints`` (a string for a URL)."""
        return join_path(self.project_dir, "checkpoints")

    def path_for(self, index: int) -> Any:
        """The committed path of checkpoint number ``index``."""
        return join_path(self.directory, f"{self.prefix}_{index}")

    def _reservation(self, index: int) -> Path:
        return self.directory / f"{self.prefix}_{index}.{_RESERVED}"

    def _scan(self) -> list[_Entry]:
        if self._remote:  # one name per checkpoint; whether it is committed is its marker's business
            remote: Any = self.io  # remote storage (checkpoint/storage.py) lists the names under a prefix
            names = [(name, join_path(self.directory, name)) for name in remote.list_names(self.directory)]
        else:
            try:
                names = [(child.name, child) for child in self.directory.iterdir()]
            except (FileNotFoundError, NotADirectoryError):
                return []
        entries = []
        for name, child in names:
            base, kind = leftover_of(name) or (name, "committed")  # the one left-over rule
            match = self._pattern.match(base)
            if match is not None:
                entries.append(_Entry(int(match.group(1)), child, kind))
        return sorted(entries, key=lambda e: (e.index, PurePosixPath(os.fspath(e.path)).name))

    @property
    def iteration(self) -> int:
        """The index the next checkpoint will get (like Accelerate's ``ProjectConfiguration.iteration``)."""
        entries = self._scan()
        return max((e.index for e in entries), default=-1) + 1

    def next_path(self) -> Path:
        """Where the next checkpoint should be written: one past the highest index on disk (0 when none).

        Two processes calling it at once can get the same path; use `reserve()` when several
        writers share the directory.

        Example:
            ```python
            manager.next_path()  # runs/exp1/checkpoints/checkpoint_3
            ```
        """
        return self.path_for(self.iteration)

    def reserve(self, index: int | None = None) -> Path:
        """Atomically claim the next free name (or ``checkpoint_<index>``) and return its path;
        `release()` it after the save.

        The claim is a ``<name>.reserved`` file created exclusively (and locked while this process
        lives), so concurrent writers to one directory never share a name. A given ``index`` that is
        already saved or claimed raises `CheckpointError` (Accelerate's automatic naming refuses an
        existing folder too).

        Example:
            ```python
            path = manager.reserve()
            fabric.save(path, state)
            manager.release(path)
            ```

        Object stores have no exclusive create: for a URL this is `next_path()` (or the given index), so
        concurrent writers to one remote project must use different project directories.
        """
        if self._remote:
            return self.next_path() if index is None else self.path_for(index)
        while True:
            wanted = self.iteration if index is None else index
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # a file in the way, no permission, a full disk: say so
                raise write_failure(self.path_for(wanted), error) from error
            if index is not None and os.path.lexists(self.path_for(index)):
                raise self._taken(index)
            try:
                fd = os.open(self._reservation(wanted), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if index is not None:
                    raise self._taken(index) from None
                continue  # another writer claimed it between our scan and our create
            except OSError as error:
                raise write_failure(self.path_for(wanted), error) from error
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_nlink == 0:  # a clean-up took it for a dead writer's before our lock
                    os.close(fd)
                    continue
            self._held[wanted] = fd
            return self.path_for(wanted)

    def _taken(self, index: int) -> CheckpointError:
        return CheckpointError(
            f"Checkpoint {self.path_for(index)} ({index}) already exists or is being written by another job. "
            f"Set the iteration to start from (Accelerate: accelerator.project_configuration.iteration), or "
            f"save into another project directory."
        )

    def release(self, path: str | os.PathLike[str]) -> None:
        """Drop the reservation of ``path`` (after its save committed or failed).

        Example:
            ```python
            manager.release(path)
            ```
        """
        match = self._pattern.match(Path(path).name)
        if match is None or self._remote:
            return
        index = int(match.group(1))
        fd = self._held.pop(index, None)
        with contextlib.suppress(FileNotFoundError):
            self._reservation(index).unlink()
        if fd is not None:
            os.close(fd)

    def _live(self, index: int, reserved: set[int]) -> bool:
        """Whether a writer that is still running holds the reservation of ``index`` (``reserved``: the
        indices with a reservation on disk)."""
        if index in self._held:
            return True
        return index in reserved and is_claimed(self._reservation(index))

    def _drop_reservation(self, index: int) -> None:
        """Remove a dead writer's reservation file; anything else under that name is left, with a warning."""
        path = self._reservation(index)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as error:
            _skipped(path, error)
            return
        if not stat.S_ISREG(info.st_mode):
            _skipped(path, "it is not a reservation file (a directory or link someone put there)")
            return
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            _skipped(path, error)

    def _complete_indices(self, entries: list[_Entry]) -> list[int]:
        indices = sorted({e.index for e in entries if e.kind in ("committed", "old")})
        # A file under a checkpoint's name counts only when it is whole: a stray one never becomes "latest".
        files = {e.index for e in entries if e.kind == "committed" and not self._remote and e.path.is_file()}
        indices = [i for i in indices if i not in files or is_complete(self.path_for(i))]
        check = getattr(self.io, "has_complete", None)
        if not callable(check):  # a duck-typed I/O plugin without it: look for a complete copy
            return [i for i in indices if self.io.resolve(self.path_for(i), is_complete) is not None]
        return [i for i in indices if check(self.path_for(i), is_complete)]

    def list_complete(self) -> list[Path]:
        """Loadable checkpoints, oldest first: every file their ``meta.json`` lists is there.

        A checkpoint whose save crashed between its two renames is listed under its own name (loading
        that name finds the complete copy); a half-written or half-deleted one never is.

        Example:
            ```python
            manager.list_complete()  # [.../checkpoint_3, .../checkpoint_4]
            ```
        """
        return [self.path_for(i) for i in self._complete_indices(self._scan())]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or ``None`` if there is none.

        Example:
            ```python
            path = manager.latest()
            if path is not None: loaded = read_checkpoint(path)
            ```
        """
        complete = self.list_complete()
        return complete[-1] if complete else None

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Delete one checkpoint crash-safely (see `remove_checkpoint()`)."""
        remove_checkpoint(path, self.io)

    def apply_retention(self) -> list[Path]:
        """Delete complete checkpoints beyond ``total_limit`` (oldest first) and stale left-overs.

        A left-over (``.tmp-*``/``.old-*``/``.del-*``/``.reserved``, or a committed name that does not
        load) is stale when it belongs to an older checkpoint than the newest complete one and no
        running writer holds its reservation; a checkpoint whose committed name a crash left empty
        gets its complete copy back. What cannot be removed (no permission, a directory planted under
        a reservation's name) is skipped with a warning: retention never fails the save it follows.
        Returns what was removed.

        Example:
            ```python
            removed = manager.apply_retention()
            ```
        """
        entries = self._scan()
        complete = self._complete_indices(entries)
        if not complete:
            return []
        newest = complete[-1]
        doomed: list[Path] = []
        if self.total_limit is not None and len(complete) > self.total_limit:
            for index in complete[: len(complete) - self.total_limit]:
                try:
                    self.remove(self.path_for(index))
                except OSError as error:
                    _skipped(self.path_for(index), error)
                    continue
                doomed.append(self.path_for(index))
        kept = set(complete[len(complete) - self.total_limit :] if self.total_limit else complete)
        reserved = {e.index for e in entries if e.kind == _RESERVED}
        by_index: dict[int, list[_Entry]] = {}
        for entry in entries:
            by_index.setdefault(entry.index, []).append(entry)
        # Local left-overs of many indices go in one pass (one directory flush, not one per left-over).
        batch = not self._remote and _plain_local(self.io)
        batched: list[Path] = []
        # Left-overs, and committed names that do not load (a copy damaged or cut short), below the newest.
        stale = {e.index for e in entries if e.kind != "committed" or e.index not in complete}
        for index in sorted(stale):
            if index > newest or self._live(index, reserved):
                continue
            leftovers = [
                e.path
                for e in by_index.get(index, [])
                if e.kind != _RESERVED and (e.kind != "committed" or index not in kept)
            ]
            try:
                if index in kept:
                    self.io.recover(self.path_for(index), is_complete)
                elif batch:
                    batched += leftovers
                else:
                    remove_checkpoint(self.path_for(index), self.io)
            except OSError as error:
                _skipped(self.path_for(index), error)
                continue
            if self._remote:
                doomed += leftovers
                continue
            if index in reserved:
                self._drop_reservation(index)
                if not self._reservation(index).exists():
                    doomed.append(self._reservation(index))
            if not batch or index in kept:
                doomed += [p for p in leftovers if not p.exists()]
        if batched:
            # A stale index's incomplete .old- copy is no checkpoint either; the rest only once its writer is gone.
            named = {p for p in batched if (found := leftover_of(p.name)) is not None and found[1] != "old"}
            try:
                discard_all([p for p in batched if p not in named])
                gone = set(remove_dead_leftovers(self.directory, [p.name for p in named]))
            except OSError as error:
                _skipped(self.directory, error)
                gone = set()
            doomed += [p for p in batched if p not in named or p in gone]
        return doomed


def _plain_local(io: CheckpointIO) -> bool:
    """Whether ``io`` deletes local checkpoints exactly as `LocalCheckpointIO` does."""
    return isinstance(io, LocalCheckpointIO) and type(io).remove is LocalCheckpointIO.remove


def _skipped(path: Any, reason: Any) -> None:
    warn_at_user_line(
        f"Checkpoint retention could not remove {path} ({reason}) and left it in place; the checkpoints "
        "saved are unaffected. Remove it by hand if it is not needed.",
    )
