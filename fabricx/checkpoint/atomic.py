"""Crash-safe writing of files and directories.

A reader must always find either the previous complete checkpoint or the new complete one, never a
half-written mix. Directories are written under a temporary sibling name and renamed into place;
replacing an existing directory goes through a short-lived ``<name>.old-<token>`` sibling, which
`resolve_directory()` falls back to if a crash happened in the middle of the swap. A directory is
deleted by first renaming it to ``<name>.del-<token>`` (a name no reader considers), so a crash in
the middle of a deletion never leaves a half-deleted copy under a readable name. Which copy is
complete is decided by a caller-given check (the checkpoint format's manifest), never by mtime.
A single file is written under ``<name>.tmp-<token>``, locked while it is written, and renamed into
place; a staging directory is locked by the process that prepared it until its commit or abort.

What a writer leaves beside a checkpoint is recognised by one rule, `leftover_of()`, and every commit
removes what killed writers left in its folder by it (`remove_dead_leftovers()`); readers and "latest"
never take such a name for a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

try:  # advisory locks tell a running save's temporary file from one a killed save left
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DirectoryPin",
    "abort_directory",
    "atomic_directory",
    "atomic_write_file",
    "commit_directory",
    "discard_all",
    "fsync_tree",
    "is_claimed",
    "leftover_of",
    "list_files",
    "locked_temporary",
    "prepare_directory",
    "recover_directory",
    "remove_dead_leftovers",
    "remove_directory",
    "resolve_directory",
    "wait_for_background_removals",
]

_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"
_DEL_MARK = ".del-"
#: Suffix marks of the left-overs a save or a deletion can leave next to a checkpoint.
LEFTOVER_MARKS = (_TMP_MARK, _OLD_MARK, _DEL_MARK)


def _new_token() -> str:
    return secrets.token_hex(4)


def _check_token(token: str) -> str:
    if not token or not all(ch.isalnum() or ch in "-_" for ch in token):
        raise ValueError(f"token must be a non-empty string of letters, digits, '-' or '_'; got {token!r}.")
    return token


def _fsync_dir(path: Path) -> None:
    # Directory fsync makes a rename durable; some file systems (and Windows) cannot open a directory.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_tree(path: str | os.PathLike[str]) -> None:
    """Flush every file and directory under ``path`` to stable storage.

    Example:
        ```python
        fsync_tree("run/checkpoints/checkpoint_3.tmp-ab12")
        ```
    """
    root = Path(path)
    if root.is_file():
        _fsync_file(root)
        return
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            file_path = Path(dirpath, name)
            if not file_path.is_symlink():
                _fsync_file(file_path)
        _fsync_dir(Path(dirpath))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _discard(path: Path) -> None:
    """Delete ``path``: renamed to ``<name>.del-<token>`` first (atomic), then removed."""
    discard_all([path])


def _readable(name: str) -> bool:
    # A reader takes a checkpoint under its own name or a swap's ``.old-`` copy; never a .tmp- or .del-.
    return _TMP_MARK not in name and _DEL_MARK not in name


def discard_all(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Delete many checkpoint copies and left-overs in one pass, so that no reader sees a half-deleted one.

    Copies a reader could take (a checkpoint's own name, a swap's ``.old-`` copy) are first renamed to
    ``.del-`` names, with one directory flush per folder for all of them; unfinished ``.tmp-`` saves and
    ``.del-`` left-overs, which no reader takes, need no rename. Beyond a few dozen (what thousands of
    killed jobs leave), every one is renamed to a fresh ``.del-`` name (a cheap metadata update) and the
    deletions themselves, slow on many file systems, run in a background thread, off the caller's path;
    a crash meanwhile leaves only ``.del-`` names, which the next clean-up removes.

    Example:

    ```python
    discard_all(["ckpt.tmp-ab12", "ckpt.old-cd34"])
    ```
    """
    present = [Path(item) for item in paths]
    later = len(present) > _BACKGROUND_AT
    if not later:
        present = [path for path in present if path.exists() or path.is_symlink()]
    doomed: list[Path] = []
    renamed_in: set[Path] = set()
    for path in present:
        # In the background a name must be one nobody creates again (a save reuses a .tmp- name).
        if later or (path.is_dir() and not path.is_symlink() and _readable(path.name)):
            trash = path.with_name(f"{_base_name(path.name)}{_DEL_MARK}{_new_token()}")
            try:
                os.rename(path, trash)
            except FileNotFoundError:
                continue  # someone else removed it meanwhile
            except OSError:
                if later:
                    continue  # not ours to remove in the background under a reusable name
            else:
                renamed_in.add(path.parent)
                path = trash
        doomed.append(path)
    for parent in renamed_in:
        _fsync_dir(parent)
    if later:
        _remover.submit(doomed)
        return
    for path in doomed:
        _remove(path)


#: More left-overs than this in one clean-up are deleted by a background thread.
_BACKGROUND_AT = 64


class _BackgroundRemover:
    """One daemon thread deleting ``.del-`` left-overs handed to it, so no save waits for thousands."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Path] = []
        self._pending: set[Path] = set()  # queued or being deleted: a clean-up meanwhile skips them
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None

    def submit(self, paths: list[Path]) -> None:
        with self._lock:
            self._queue.extend(paths)
            self._pending.update(paths)
            self._idle.clear()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="fabricx-leftover-removal", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._idle.set()
                    self._thread = None
                    return
                path = self._queue.pop()
            _remove(path)
            with self._lock:
                self._pending.discard(path)

    def pending(self, path: Path) -> bool:
        with self._lock:
            return path in self._pending

    def wait(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)


_remover = _BackgroundRemover()


def wait_for_background_removals(timeout: float | None = None) -> bool:
    """Block until the left-overs handed to the background remover are deleted; ``False`` on timeout.

    Example:

    ```python
    wait_for_background_removals(60)
    ```
    """
    return _remover.wait(timeout)


def _base_name(name: str) -> str:
    for mark in LEFTOVER_MARKS:
        at = name.find(mark)
        if at > 0:
            return name[:at]
    return name


def list_files(path: str | os.PathLike[str]) -> dict[str, int]:
    """``{relative path: size}`` of every regular file under ``path`` (POSIX separators), sorted.

    Example:
        ```python
        list_files("ckpt.tmp-ab12")  # {"meta.json": 412, "shared.json": 96, ...}
        ```
    """
    root = Path(path)
    files: dict[str, int] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            file_path = Path(dirpath, name)
            if file_path.is_symlink() or not file_path.is_file():
                continue
            files[file_path.relative_to(root).as_posix()] = file_path.stat().st_size
    return dict(sorted(files.items()))


def prepare_directory(path: str | os.PathLike[str], token: str | None = None) -> Path:
    """Create and return the empty temporary sibling ``<name>.tmp-<token>`` that will become ``path``.

    Pass the same ``token`` on every rank so all of them compute the same temporary name; only one
    process should call this. A left-over directory with the same temporary name is discarded.

    Example:
        ```python
        tmp = prepare_directory("ckpt", token="step100")   # rank 0
        # barrier, every rank writes into tmp, barrier
        commit_directory(tmp, "ckpt")                      # rank 0
        ```
    """
    target = Path(path)
    tmp = temporary_name(target, token)
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(8):
        if tmp.exists() or tmp.is_symlink():
            _release(tmp)
            _remove(tmp)
        tmp.mkdir()
        if _hold(tmp):
            return tmp
    raise OSError(f"Could not create the staging folder {tmp}: it kept being removed.")


# Staging directories this process prepared and has not committed or aborted: path -> its locked descriptor.
# The lock tells any other process's clean-up that the save is alive (a killed process's locks are gone).
_held_lock = threading.Lock()
_held: dict[Path, int] = {}


def _hold(tmp: Path) -> bool:
    """Lock the new staging directory ``tmp`` for as long as its save runs; ``False`` when a clean-up removed it
    between its creation and the lock (then the caller creates it again)."""
    if fcntl is None:
        return True
    try:
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a clean-up holds it only while it renames it away
    try:
        same = os.stat(tmp).st_ino == os.fstat(fd).st_ino
    except OSError:
        same = False
    if not same:
        os.close(fd)
        return False
    with _held_lock:
        _held[Path(os.path.abspath(tmp))] = fd
    return True


def _release(tmp: Path) -> None:
    with _held_lock:
        fd = _held.pop(Path(os.path.abspath(tmp)), None)
    if fd is not None:
        os.close(fd)


def temporary_name(path: str | os.PathLike[str], token: str | None = None) -> Path:
    """The temporary sibling name `prepare_directory()` uses for ``path`` and ``token``.

    Example:
        ```python
        temporary_name("out/ckpt", "7")  # Path("out/ckpt.tmp-7")
        ```
    """
    target = Path(path)
    token = _new_token() if token is None else _check_token(token)
    return target.with_name(f"{target.name}{_TMP_MARK}{token}")


def commit_directory(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Make the fully written ``tmp`` directory visible as ``path``, replacing what was there.

    Files are flushed first. An existing ``path`` is first renamed to ``<name>.old-<random>``, then
    ``tmp`` is renamed into place, then the old copy is deleted (renamed to ``.del-`` first), so at any
    instant one complete version can be found (see `resolve_directory()`).

    Example:
        ```python
        commit_directory("ckpt.tmp-step100", "ckpt")
        ```
    """
    tmp_path, target = Path(tmp), Path(path)
    if not tmp_path.is_dir():
        raise FileNotFoundError(f"Cannot commit {tmp_path}: it is not a directory (was it prepared?).")
    fsync_tree(tmp_path)
    parent = target.parent
    if target.exists() or target.is_symlink():
        old = target.with_name(f"{target.name}{_OLD_MARK}{_new_token()}")
        os.rename(target, old)
        _fsync_dir(parent)
        try:
            os.rename(tmp_path, target)
        except BaseException:
            # Put the previous version back; if even that fails, readers still find it as .old-*.
            with contextlib.suppress(OSError):
                os.rename(old, target)
            raise
        _fsync_dir(parent)
        _discard(old)
    else:
        os.rename(tmp_path, target)
        _fsync_dir(parent)
    _release(tmp_path)
    remove_dead_leftovers(parent)


def abort_directory(tmp: str | os.PathLike[str]) -> None:
    """Throw away an unfinished temporary directory; missing is fine.

    Example:
        ```python
        abort_directory("ckpt.tmp-step100")
        ```
    """
    _release(Path(tmp))
    _remove(Path(tmp))


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], token: str | None = None) -> Iterator[Path]:
    """Write a directory that appears at ``path`` only once complete.

    Yields a temporary sibling to fill. On a clean exit it is flushed and renamed to ``path`` (an
    existing ``path`` is swapped out safely); on an exception it is removed and ``path`` is untouched.

    Example:
        ```python
        with atomic_directory("out/weights") as tmp:
            (tmp / "a.txt").write_text("hello")
        ```
    """
    tmp = prepare_directory(path, token)
    try:
        yield tmp
    except BaseException:
        abort_directory(tmp)
        raise
    try:
        commit_directory(tmp, path)
    except BaseException:
        abort_directory(tmp)
        raise


def atomic_write_file(path: str | os.PathLike[str], write_fn: Callable[[BinaryIO], None]) -> None:
    """Write one file atomically: ``write_fn(handle)`` fills a temporary file that then replaces ``path``.

    Example:
        ```python
        atomic_write_file("meta.json", lambda f: f.write(b"{}"))
        ```
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp, handle = locked_temporary(target)
    try:
        with handle:
            write_fn(handle)
            handle.flush()
            os.fsync(handle.fileno())
            if fcntl is not None:  # renamed while open (POSIX), so locked until it has its final name
                os.replace(tmp, target)
        if fcntl is None:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(target.parent)
    remove_dead_leftovers(target.parent)


def locked_temporary(target: Path) -> tuple[Path, BinaryIO]:
    """A new ``<name>.tmp-f<12 hex>`` beside ``target``, open and locked until the caller closes it (where
    advisory locks exist), so that a clean-up tells it from what a killed save left; rename it into place
    before closing it.

    Example:

    ```python
    tmp, handle = locked_temporary(Path("out/shard.bin"))
    with handle:
        handle.write(data)
        os.replace(tmp, "out/shard.bin")
    ```
    """
    for _ in range(8):
        tmp = target.with_name(f"{target.name}{_TMP_MARK}f{secrets.token_hex(6)}")
        handle = open(tmp, "xb")  # noqa: SIM115 - closed by the caller
        if fcntl is None:
            return tmp, handle
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        if os.fstat(handle.fileno()).st_nlink > 0:
            return tmp, handle
        handle.close()  # a clean-up removed it between its creation and the lock: take another name
    raise OSError(f"Could not create a temporary file beside {target}: it kept being removed.")


# ------------------------------------------------------------------------------------- the left-over rule

#: Every name a writer leaves beside the checkpoint ``<name>`` it writes or deletes, and only these:
#: ``<name>.tmp-<token>`` (a save in progress: a staging folder, or a single file's ``.tmp-f<12 hex>``),
#: ``<name>.old-<token>`` (the previous copy during a swap), ``<name>.del-<token>`` (a deletion under way) and
#: ``<name>.reserved`` (a writer's claim on the name). Object stores have no such names: a remote save's
#: left-overs are versions its commit marker does not name and local staging copies (`storage.py`).
_LEFTOVER = re.compile(
    r"^(?P<base>.+?)(?:\.(?P<kind>tmp|old|del)-(?P<token>[A-Za-z0-9_-]{1,64})|\.(?P<claim>reserved))$"
)
#: The token of a single-file save's temporary file, and of a file a background deletion renamed: a regular
#: file with another token (a user's ``notes.tmp-backup``, a tool's unlocked staging file) is never removed.
_FILE_TOKEN = {"tmp": re.compile(r"f[0-9a-f]{12}"), "del": re.compile(r"[0-9a-f]{8}")}


def leftover_of(name: str) -> tuple[str, str] | None:
    """``(checkpoint name, kind)`` when ``name`` is what a writer leaves beside a checkpoint (kind ``"tmp"``,
    ``"old"``, ``"del"`` or ``"reserved"``), else ``None``. No reader, listing or "latest" takes such a name for a
    checkpoint; `remove_dead_leftovers()` removes it once its writer is gone.

    Example:

    ```python
    leftover_of("last.ckpt.tmp-f0123456789ab")  # ("last.ckpt", "tmp")
    leftover_of("checkpoint_3")                 # None
    ```
    """
    match = _LEFTOVER.match(name)
    if match is None:
        return None
    return match.group("base"), match.group("kind") or "reserved"


def remove_dead_leftovers(folder: str | os.PathLike[str], names: Iterable[str] | None = None) -> list[Path]:
    """Remove the left-overs (`leftover_of()`) in ``folder`` (or those among ``names``) that no live writer holds;
    returns what was removed. Called by every commit, so killed saves' left-overs never accumulate.

    One listing and one lock probe each: a ``.tmp-`` staging folder or temporary file locked by its writer, and
    anything of a name whose ``<name>.reserved`` claim a writer holds, is alive and kept; an ``.old-`` copy is
    kept while ``<name>`` itself is missing (it is then the readable copy); a link, a named pipe or a device,
    a non-empty ``.reserved``, an ``.old-`` file, and a regular file with another token than fabricx's are not
    a writer's and are never touched. Folders are renamed to ``.del-`` names at once; beyond a few dozen their
    deletion runs in a background thread (as `discard_all()`'s does). Without advisory locks (Windows) nothing is
    removed, since a live writer cannot be told from a dead one there.

    Example:

    ```python
    remove_dead_leftovers(Path("checkpoints"))  # [.../last.ckpt.tmp-f0123456789ab, ...] after killed saves
    ```
    """
    root = Path(folder)
    if fcntl is None:
        return []
    if names is None:
        try:
            names = os.listdir(root)
        except OSError:
            return []
    removed: list[Path] = []
    trash: list[Path] = []
    for name in names:
        parsed = leftover_of(name)
        if parsed is None or (parsed[1] == "del" and _remover.pending(root / name)):
            continue
        taken = _take_if_dead(root, name, *parsed)
        if taken is not None:
            removed.append(root / name)
            if taken != root / name or taken.exists():
                trash.append(taken)
    if len(trash) > _BACKGROUND_AT:
        _remover.submit(trash)
    else:
        for path in trash:
            _remove(path)
    return removed


def _take_if_dead(root: Path, name: str, base: str, kind: str) -> Path | None:
    """``root/name`` out of readers' way when it is a dead writer's left-over: a file is unlinked (the path is
    returned), a folder renamed to a fresh ``.del-`` name (returned, for the caller to delete); ``None`` when it
    is alive or not a writer's."""
    assert fcntl is not None
    path = root / name
    try:
        info = os.lstat(path)
    except OSError:
        return None
    is_dir, is_file = stat.S_ISDIR(info.st_mode), stat.S_ISREG(info.st_mode)
    if kind == "reserved":
        fits = is_file and info.st_size == 0
    elif kind == "old":
        fits = is_dir and os.path.lexists(root / base)
    else:
        token = name[len(base) + len(kind) + 2 :]
        fits = is_dir or (is_file and _FILE_TOKEN[kind].fullmatch(token) is not None)
    if not fits or (kind != "reserved" and is_claimed(root / f"{base}.reserved")):
        return None
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | (getattr(os, "O_DIRECTORY", 0) if is_dir else 0))
    except OSError:
        return None
    try:
        if os.fstat(fd).st_ino != info.st_ino:
            return None  # replaced since it was looked at
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live writer holds it: OSError, kept
        if is_file:
            os.unlink(path)  # while locked: a writer that locks it next sees it gone and takes another name
            return path
        if kind == "del":
            return path  # already out of readers' way
        trash = path.with_name(f"{base}{_DEL_MARK}{_new_token()}")
        os.rename(path, trash)
        return trash
    except OSError:
        return None
    finally:
        os.close(fd)


def is_claimed(claim: Path) -> bool:
    """Whether a live writer holds the claim file ``claim`` (``<name>.reserved``): a regular file that this
    process cannot lock. Anything else there (a folder, a link) is no writer's claim.

    Example:
        ```python
        is_claimed(Path("checkpoints/checkpoint_3.reserved"))  # False once its writer is gone
        ```
    """
    if fcntl is None:
        return claim.exists()
    try:
        fd = os.open(claim, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _always(path: Path) -> bool:
    return True


def _siblings(target: Path, *marks: str) -> list[Path]:
    """The siblings of ``target`` named ``<name><mark><token>`` for any of ``marks`` (one listing)."""
    prefixes = tuple(f"{target.name}{mark}" for mark in marks)
    try:
        return [p for p in target.parent.iterdir() if p.name.startswith(prefixes)]
    except OSError:
        return []


def _complete_copies(target: Path, is_complete: Callable[[Path], bool]) -> list[Path]:
    """The complete ``.old-*`` copies of ``target``, newest first (by the check's own order, then mtime)."""
    found = [p for p in _siblings(target, _OLD_MARK) if _safe_check(is_complete, p)]
    return sorted(found, key=_mtime, reverse=True)


def _safe_check(is_complete: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(is_complete(path))
    except Exception:
        return False


def resolve_directory(path: str | os.PathLike[str], is_complete: Callable[[Path], bool] | None = None) -> Path | None:
    """Where the complete contents of ``path`` are: ``path`` itself, or a swap left-over if a crash hit.

    A crash between the two renames of `commit_directory()` leaves only ``<name>.old-<token>``;
    that previous version is complete and is returned. ``is_complete`` decides what counts as a
    complete copy (default: anything that exists); copies it rejects are never returned, whatever their
    mtime. ``None`` when there is no complete copy.

    Example:
        ```python
        found = resolve_directory("ckpt", lambda d: (d / "meta.json").is_file())
        ```
    """
    check = is_complete or _always
    target = Path(path)
    if target.exists() and (target.is_file() or _safe_check(check, target)):
        return target
    copies = _complete_copies(target, check)
    if copies:
        return copies[0]
    return None


def recover_directory(path: str | os.PathLike[str], is_complete: Callable[[Path], bool] | None = None) -> Path | None:
    """Undo what crashed saves left at ``path``: the newest complete copy goes back to ``path``, the rest goes.

    Only one process (rank 0) should call it, and not while another save to ``path`` runs. Removes
    unfinished ``.tmp-*`` saves, ``.old-*`` copies and half-done ``.del-*`` deletions of ``path``.
    Returns ``path`` if a complete checkpoint is there afterwards, else ``None``.

    Example:
        ```python
        recover_directory("ckpt", lambda d: (d / "meta.json").is_file())
        ```
    """
    check = is_complete or _always
    target = Path(path)
    present = target.exists() and (target.is_file() or _safe_check(check, target))
    if not present:
        copies = _complete_copies(target, check)
        if copies:
            if target.exists() or target.is_symlink():
                _discard(target)  # damaged: a complete copy takes its place
            os.rename(copies[0], target)
            _fsync_dir(target.parent)
            present = True
    if not present:  # no copy is complete: the .old- ones are no checkpoint
        discard_all(_siblings(target, _OLD_MARK))
    remove_dead_leftovers(target.parent, [p.name for p in _siblings(target, *LEFTOVER_MARKS)])
    return target if present else None


def remove_directory(path: str | os.PathLike[str]) -> None:
    """Delete the directory (or file) ``path`` and its left-overs; a crash midway leaves no readable half.

    Example:
        ```python
        remove_directory("runs/exp1/checkpoints/checkpoint_0")
        ```
    """
    target = Path(path)
    discard_all([target, *_siblings(target, _OLD_MARK)])  # every copy of it; a live writer's save is its own
    remove_dead_leftovers(target.parent, [p.name for p in _siblings(target, _TMP_MARK, _DEL_MARK)])


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


class DirectoryPin:
    """An open handle on the directory at ``path``, to tell afterwards whether ``path`` still names it.

    A commit never changes a committed directory in place: it renames a new one over the name. While
    the handle is open the directory's inode cannot be reused, so `unchanged` returning ``True``
    after reading files by name means every file came from this one directory, never from a save that
    replaced it meanwhile. Where directories cannot be opened (Windows) it always says ``True``.

    Example:

    ```python
    pin = DirectoryPin("ckpt")
    data = (Path("ckpt") / "shared.json").read_bytes()
    consistent = pin.unchanged()
    pin.close()
    ```
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self.vanished = False
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
        try:
            self._fd = os.open(self.path, flags)
        except (FileNotFoundError, NotADirectoryError):
            self.vanished = True  # renamed away between finding and opening it
            return
        except OSError:
            return  # cannot open directories here: nothing to compare
        info = os.fstat(self._fd)
        self._identity = (info.st_dev, info.st_ino)

    def unchanged(self) -> bool:
        """Whether ``path`` still names the directory that was opened."""
        if self.vanished:
            return False
        if self._identity is None:
            return True
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DirectoryPin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
