"""Checkpoints on any fsspec storage (``s3://``, ``gs://``, ``memory://``, ...), committed atomically.

Object stores cannot rename, so a checkpoint at ``<url>`` is laid out as:

```text
<url>/v-<token>/meta.json, shared.json, rank_0.safetensors, ...   the files of one save
<url>/COMMIT                                                       {"version": "v-<token>"}, written last
```

Each rank writes its files into a local staging directory (the format code only writes local files)
and uploads them under the save's own version prefix; once every rank has uploaded, rank 0 writes the
commit marker, a single small object that the store replaces atomically. Readers read the marker
first and only ever look at the version it names, so an unfinished upload is invisible, and a save
that replaces a checkpoint leaves the previous one readable until the marker moves. Only then are
the other versions deleted. Deleting a checkpoint removes its marker first, so a half-deleted one is
never taken for committed. Each commit then removes dead versions a few neighbours hold
(`fabricx.checkpoint.remote_leftovers`).

Example:
    ```python
    from fabricx import Fabric
    from fabricx.checkpoint.storage import FsspecCheckpointIO

    fabric = Fabric(plugins=[FsspecCheckpointIO(storage_options={"endpoint_url": "http://127.0.0.1:9000"})])
    fabric.save("s3://bucket/run1/step_100", state)
    fabric.load("s3://bucket/run1/step_100", state)
    ```
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from fabricx._compat.fsspec_paths import strip_protocol
from fabricx.checkpoint.io import CheckpointIO, LocalCheckpointIO
from fabricx.checkpoint.remote_leftovers import COMMIT_MARKER, VERSION_NAME, modified, next_names, remove_stale_versions
from fabricx.utilities.exceptions import CheckpointError
from fabricx.utilities.rank_zero import warn_at_user_line

try:  # advisory locks tell a live process's local copies from those a killed one left
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["COMMIT_MARKER", "FsspecCheckpointIO", "io_for", "is_url", "join_path", "remove_dead_local_copies"]

_MARKER_FORMAT = "fabricx-commit"
_VERSION_PREFIX = "v-"
# Each commit examines this many other names of its parent prefix for dead versions.
_NEIGHBOURS_PER_COMMIT = 4
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# At most this many downloaded copies are kept per I/O object (a reader uses one at a time).
_KEPT_DOWNLOADS = 2


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names fsspec storage (``s3://...``, ``memory://...``) rather than a local path.

    ``file://`` URLs count as local.

    Example:
        ```python
        is_url("s3://bucket/ckpt"), is_url("runs/ckpt")  # True, False
        ```
    """
    if not isinstance(path, str):
        return False
    match = _URL.match(path)
    return match is not None and match.group(1).lower() not in ("file", "local")


def join_path(base: str | os.PathLike[str], name: str) -> str | Path:
    """``base / name`` for a local path (a `pathlib.Path`) or a URL (a string; ``//`` kept).

    Example:
        ```python
        join_path("s3://bucket/run", "checkpoints")  # "s3://bucket/run/checkpoints"
        ```
    """
    if is_url(base):
        return f"{os.fspath(base).rstrip('/')}/{name}"
    return Path(base) / name


def _strip_local(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    for scheme in ("file://", "local://"):
        if text.startswith(scheme):
            return Path(text[len(scheme) :])
    return Path(text)


class FsspecCheckpointIO(CheckpointIO):
    """Checkpoint I/O for fsspec URLs: upload under a version prefix, then a commit marker written last.

    ``storage_options`` go to the file system (for S3: ``endpoint_url``, ``key``, ``secret``, ...;
    credentials can also come from the usual environment variables). ``staging_dir`` is the local
    folder where each rank writes its files before uploading them (default: the system temp folder).
    Local paths given to this object are handed to ``local`` (the default local checkpoint I/O).

    ``stale_after`` (seconds, default one hour) is how old, by the store's clock, the newest object of an
    uncommitted version must be before a later save of the run takes it for a killed save's left-over and
    deletes it; it must exceed the longest a running save may go between two finished uploads.

    Example:
        ```python
        endpoint = {"endpoint_url": "http://127.0.0.1:9000"}
        io = FsspecCheckpointIO(storage_options=endpoint)
        fabric = Fabric(plugins=[io])
        fabric.save("s3://bucket/ckpt", {"model": model})
        ```
    """

    def __init__(
        self,
        storage_options: dict[str, Any] | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
        local: Any = None,
        stale_after: float = 3600.0,
    ) -> None:
        if storage_options is not None and not isinstance(storage_options, dict):
            raise TypeError(f"storage_options must be a dict or None; got {type(storage_options).__name__}.")
        if isinstance(stale_after, bool) or not isinstance(stale_after, (int, float)) or not stale_after >= 0:
            raise ValueError(
                f"stale_after must be a number of seconds >= 0; got {stale_after!r}. Give how old a killed "
                "save's upload must be before later saves delete it (default 3600)."
            )
        self.stale_after = float(stale_after)
        self.storage_options = dict(storage_options or {})
        self._staging_root = Path(staging_dir) if staging_dir is not None else None
        self._local = local
        self._lock = threading.Lock()
        # staging directory -> (url, version, files already uploaded)
        self._staged: dict[Path, tuple[str, str, set[str]]] = {}
        self._downloads: list[Path] = []
        self._owned = _OwnedCopies()
        # protocol -> (process id, file system): one client per protocol, made again after a fork
        self._filesystems: dict[str, tuple[int, Any]] = {}
        # parent URL -> where the next commit goes on examining names for dead versions (`next_names`)
        self._examined: dict[str, str] = {}
        atexit.register(self._drop_downloads)

    # -- file system access ------------------------------------------------------------------------------
    def _fs(self, url: str) -> tuple[Any, str]:
        try:
            from fsspec.core import url_to_fs
        except ImportError:  # pragma: no cover - fsspec comes with torch's dependencies
            raise CheckpointError(f"Saving to {url} needs fsspec: pip install fsspec (and s3fs for s3://).") from None
        protocol = url.split("://", 1)[0].lower()
        cached = self._filesystems.get(protocol)
        if cached is not None and cached[0] == os.getpid():
            return cached[1], strip_protocol(cached[1], url).rstrip("/")
        try:
            fs, root = url_to_fs(url, **self.storage_options)
        except (ImportError, ValueError) as error:
            raise CheckpointError(
                f"Cannot open {url}: no usable fsspec implementation for {protocol!r} ({error}). Install the "
                "package for it (s3fs for s3://, gcsfs for gs://, adlfs for az://)."
            ) from None
        self._filesystems[protocol] = (os.getpid(), fs)
        return fs, root.rstrip("/")

    def _fresh_fs(self, url: str) -> tuple[Any, str]:
        # Other processes change the store; never answer from a cached listing.
        fs, root = self._fs(url)
        with contextlib.suppress(Exception):
            fs.invalidate_cache()
        return fs, root

    def _local_io(self) -> CheckpointIO:
        if self._local is None:
            self._local = LocalCheckpointIO()
        return self._local

    # -- writing -----------------------------------------------------------------------------------------
    def stage(self, path: str | os.PathLike[str], token: str) -> Path:
        """Rank 0: this process's empty local staging directory for the save of ``path``."""
        if not is_url(path):
            return self._local_io().stage(_strip_local(path), token)
        return self.staging_dir(path, token)

    def staging_dir(self, path: str | os.PathLike[str], token: str) -> Path:
        """Every rank: its own local staging directory (created on first use)."""
        if not is_url(path):
            return self._local_io().staging_dir(_strip_local(path), token)
        url = os.fspath(path).rstrip("/")
        version = _version_name(token)
        with self._lock:
            for staging, (staged_url, staged_version, _) in self._staged.items():
                if staged_url == url and staged_version == version:
                    return staging
            root = self._local_root()
            staging = self._owned.create(root, f"{_STAGING_PREFIX}{version}-")
            self._staged[staging] = (url, version, set())
            return staging

    def _entry(self, staging: Path) -> tuple[str, str, set[str]]:
        with self._lock:
            entry = self._staged.get(Path(staging))
        if entry is None:
            raise RuntimeError(f"{staging} is not a staging directory of this checkpoint I/O (stage() it first).")
        return entry

    def _upload_new(self, staging: Path) -> None:
        url, version, uploaded = self._entry(staging)
        fs, root = self._fs(url)
        for relative in sorted(_local_files(staging)):
            if relative in uploaded:
                continue
            target = f"{root}/{version}/{relative}"
            try:
                fs.put_file(os.fspath(Path(staging, relative)), target)
            except Exception as error:
                raise CheckpointError(
                    f"Could not upload {relative} of the checkpoint {url} to {target}: {type(error).__name__}: "
                    f"{error}. The save was abandoned; the checkpoint committed before (if any) is unchanged."
                ) from error
            uploaded.add(relative)

    def finish_rank(self, staging: Path, path: str | os.PathLike[str], rank: int) -> None:
        """Every rank: upload the files it wrote (object stores make an upload durable once it returns)."""
        if not is_url(path):
            self._local_io().finish_rank(staging, _strip_local(path), rank)
            return
        self._upload_new(Path(staging))
        if rank != 0:
            self._forget(Path(staging))

    def manifest(self, staging: Path) -> dict[str, int]:
        """Rank 0, after every rank uploaded: ``{relative path: size}`` of the version's files."""
        entry = self._staged.get(Path(staging))
        if entry is None:
            return self._local_io().manifest(staging)
        url, version, _ = entry
        self._upload_new(Path(staging))
        fs, root = self._fresh_fs(url)
        prefix = f"{root}/{version}"
        return _remote_files(fs, prefix)

    def commit(self, staging: Path, path: str | os.PathLike[str]) -> None:
        """Rank 0, last: upload what is left (``meta.json``), write the commit marker, drop older versions."""
        if not is_url(path):
            self._local_io().commit(staging, _strip_local(path))
            return
        url, version, _ = self._entry(Path(staging))
        self._upload_new(Path(staging))
        fs, root = self._fs(url)
        marker = {"format": _MARKER_FORMAT, "version": version}
        try:
            fs.pipe_file(f"{root}/{COMMIT_MARKER}", json.dumps(marker).encode("utf-8"))
        except Exception as error:
            raise CheckpointError(
                f"Could not write the commit marker of the checkpoint {url}: {type(error).__name__}: {error}. "
                "The new files were uploaded but are not visible; the previous checkpoint is unchanged."
            ) from error
        self._forget(Path(staging))
        self._drop_versions(url, keep=version)
        self._remove_dead_neighbours(url)

    def abort(self, staging: Path, path: str | os.PathLike[str]) -> None:
        """Throw away an unfinished save: its uploaded version and the local staging directory."""
        if not is_url(path):
            self._local_io().abort(staging, _strip_local(path))
            return
        entry = self._staged.get(Path(staging))
        self._forget(Path(staging))
        if entry is None:
            return
        url, version, _ = entry
        fs, root = self._fs(url)
        with contextlib.suppress(Exception):
            fs.rm(f"{root}/{version}", recursive=True)

    def write_file(self, path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
        """Write one object (a single-file checkpoint); stores make a single upload appear whole."""
        if not is_url(path):
            self._local_io().write_file(_strip_local(path), write)
            return
        fs, root = self._fs(os.fspath(path))
        with tempfile.TemporaryFile() as handle:
            write(handle)
            handle.flush()
            handle.seek(0)
            try:
                with fs.open(root, "wb") as remote:
                    shutil.copyfileobj(handle, remote, 16 << 20)
            except Exception as error:
                raise CheckpointError(f"Could not write {path}: {type(error).__name__}: {error}") from error

    def _forget(self, staging: Path) -> None:
        with self._lock:
            self._staged.pop(staging, None)
        self._owned.remove(staging)

    def _local_root(self) -> Path:
        """The local folder for staging copies and downloads; what killed processes left there goes first."""
        root = self._staging_root or Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        remove_dead_local_copies(root, once=True)
        return root

    def _in_flight(self) -> set[str]:
        """The versions this object is still uploading (tokens are unique, so whichever checkpoint's)."""
        with self._lock:
            return {version for _, version, _ in self._staged.values()}

    def _drop_versions(self, url: str, keep: str | None) -> None:
        fs, root = self._fresh_fs(url)
        busy = self._in_flight()
        for name in _child_names(fs, root):
            if VERSION_NAME.match(name) and name != keep and name not in busy:
                with contextlib.suppress(Exception):
                    fs.rm(f"{root}/{name}", recursive=True)

    def _remove_dead_neighbours(self, url: str) -> None:
        """After committing ``url``: dead versions of the next few names beside it (killed first saves of names
        never saved again, killed re-saves), older than ``stale_after`` before the marker just written."""
        parent_url, _, name = url.rpartition("/")
        if "://" not in parent_url:
            return  # the bucket itself: nothing beside it in the store

        def marker_of(sibling: str) -> str | None:
            with contextlib.suppress(CheckpointError):
                return self.committed_version(f"{parent_url}/{sibling}")
            return None  # damaged: not touched

        try:
            fs, parent = self._fresh_fs(parent_url)
            now = modified(fs.info(f"{parent}/{name}/{COMMIT_MARKER}"))
            if now is None:
                return  # the store gives no times: no age, nothing is dead
            with self._lock:  # a new object starts at a random point up to its own name, so restarts reach all
                after = self._examined.get(parent_url, f"{name}/"[: secrets.randbelow(len(name) + 2)])
            names, after = next_names(fs, parent, after=after, limit=_NEIGHBOURS_PER_COMMIT, skip=name)
            with self._lock:
                self._examined[parent_url] = after
            busy = self._in_flight()
            for sibling in names:
                remove_stale_versions(fs, f"{parent}/{sibling}", cutoff=now - self.stale_after, busy=busy,
                                      read_marker=lambda sibling=sibling: marker_of(sibling))
        except Exception as error:  # housekeeping never fails the save it follows
            warn_at_user_line(
                f"Could not remove left-overs of killed saves beside {url} ({type(error).__name__}: {error}); "
                "the checkpoint saved is unaffected, and later saves try again."
            )

    # -- reading and housekeeping ------------------------------------------------------------------------
    def committed_version(self, path: str | os.PathLike[str]) -> str | None:
        """The version the commit marker of ``path`` names, or ``None`` when nothing is committed there.

        Example:
            ```python
            io.committed_version("s3://bucket/ckpt")  # "v-3f2a..."
            ```
        """
        url = os.fspath(path).rstrip("/")
        fs, root = self._fresh_fs(url)
        try:
            raw = fs.cat_file(f"{root}/{COMMIT_MARKER}")
        except FileNotFoundError:
            return None
        except Exception as error:
            raise CheckpointError(f"Cannot read the commit marker of {url}: {type(error).__name__}: {error}") from error
        try:
            marker = json.loads(raw.decode("utf-8"))
            version = marker["version"] if marker.get("format") == _MARKER_FORMAT else None
        except (ValueError, UnicodeDecodeError, AttributeError, KeyError, TypeError):
            version = None
        if not isinstance(version, str) or not VERSION_NAME.match(version):
            raise CheckpointError(
                f"The commit marker {url}/{COMMIT_MARKER} is damaged (it must name a version 'v-<token>' of the "
                "checkpoint). Delete the checkpoint or restore the marker."
            )
        return version

    def is_committed(self, path: str | os.PathLike[str]) -> bool:
        """Whether a committed checkpoint is at ``path`` (local paths: the directory exists)."""
        if not is_url(path):
            local = _strip_local(path)
            return local.exists()
        try:
            return self.committed_version(path) is not None
        except CheckpointError:
            return False

    def has_complete(self, path: str | os.PathLike[str], is_complete: Callable[[Path], bool]) -> bool:
        """Whether a checkpoint is committed at ``path``: its marker exists (no download needed).

        The marker is written only after every file of its version, and readers still check the copy
        they download.
        """
        if not is_url(path):
            return self._local_io().has_complete(_strip_local(path), is_complete)
        return self.is_committed(path)

    def list_names(self, directory: str | os.PathLike[str]) -> list[str]:
        """The names directly inside ``directory`` (``[]`` when it does not exist).

        Example:
            ```python
            io.list_names("s3://bucket/run/checkpoints")  # ["checkpoint_0", "checkpoint_1"]
            ```
        """
        if not is_url(directory):
            try:
                return sorted(child.name for child in _strip_local(directory).iterdir())
            except (FileNotFoundError, NotADirectoryError):
                return []
        fs, root = self._fresh_fs(os.fspath(directory))
        return sorted(_child_names(fs, root))

    def resolve(self, path: str | os.PathLike[str], is_complete: Callable[[Path], bool]) -> Path | None:
        """A local copy of the committed checkpoint at ``path`` (downloaded), or ``None`` when none is committed.

        A plain object at ``path`` (a single-file checkpoint) is downloaded as one file. Downloads are
        deleted when newer ones replace them and when the process exits.
        """
        if not is_url(path):
            return self._local_io().resolve(_strip_local(path), is_complete)
        url = os.fspath(path).rstrip("/")
        version = self.committed_version(url)
        fs, root = self._fs(url)
        if version is None:
            with contextlib.suppress(Exception):
                if fs.isfile(root):
                    return self._download_file(fs, root)
            return None
        local = self._download_tree(fs, f"{root}/{version}", url)
        if not is_complete(local):
            return None
        return local

    def _new_download_dir(self) -> Path:
        local = self._owned.create(self._local_root(), _DOWNLOAD_PREFIX)
        with self._lock:
            self._downloads.append(local)
            stale = self._downloads[:-_KEPT_DOWNLOADS]
            del self._downloads[:-_KEPT_DOWNLOADS]
        for old in stale:
            self._owned.remove(old)
        return local

    def _download_file(self, fs: Any, root: str) -> Path:
        local = self._new_download_dir() / PurePosixPath(root).name
        fs.get_file(root, os.fspath(local))
        return local

    def _download_tree(self, fs: Any, prefix: str, url: str) -> Path:
        local = self._new_download_dir()
        for relative in _remote_files(fs, prefix):
            parts = PurePosixPath(relative).parts
            if not parts or any(part in ("", ".", "..") for part in parts) or relative.startswith("/"):
                raise CheckpointError(f"The checkpoint {url} holds an object with an unsafe name {relative!r}.")
            target = local.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                fs.get_file(f"{prefix}/{relative}", os.fspath(target))
            except Exception as error:
                raise CheckpointError(
                    f"Could not download {relative} of the checkpoint {url}: {type(error).__name__}: {error}"
                ) from error
        return local

    def recover(self, path: str | os.PathLike[str], is_complete: Callable[[Path], bool]) -> None:
        """Rank 0: delete versions a crashed save left next to the committed one (never one still uploading)."""
        if not is_url(path):
            self._local_io().recover(_strip_local(path), is_complete)
            return
        url = os.fspath(path).rstrip("/")
        version = self.committed_version(url)
        if version is not None:
            self._drop_versions(url, keep=version)

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Delete the checkpoint at ``path``: the commit marker first, then its files."""
        if not is_url(path):
            self._local_io().remove(_strip_local(path))
            return
        url = os.fspath(path).rstrip("/")
        fs, root = self._fresh_fs(url)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{root}/{COMMIT_MARKER}")
        with contextlib.suppress(FileNotFoundError):
            fs.rm(root, recursive=True)

    def _drop_downloads(self) -> None:
        with self._lock:
            downloads, self._downloads = self._downloads, []
        for local in downloads:
            self._owned.remove(local)

    def __repr__(self) -> str:
        options = ", ".join(sorted(self.storage_options))
        return f"FsspecCheckpointIO(storage_options={{{options}}})" if options else "FsspecCheckpointIO()"


def _version_name(token: str) -> str:
    name = f"{_VERSION_PREFIX}{token}"
    if not VERSION_NAME.match(name):
        raise ValueError(f"token must be 1-64 letters, digits, '-' or '_'; got {token!r}.")
    return name


def _local_files(root: Path) -> list[str]:
    files = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            file_path = Path(dirpath, name)
            if file_path.is_file() and not file_path.is_symlink():
                files.append(file_path.relative_to(root).as_posix())
    return files


def _remote_files(fs: Any, prefix: str) -> dict[str, int]:
    try:
        found = fs.find(prefix, detail=True)
    except FileNotFoundError:
        return {}
    files: dict[str, int] = {}
    start = len(prefix.strip("/")) + 1
    for name, info in found.items():
        if info.get("type", "file") != "file":
            continue
        relative = name.strip("/")[start:]
        if relative:
            files[relative] = int(info.get("size") or 0)
    return dict(sorted(files.items()))


def _child_names(fs: Any, root: str) -> list[str]:
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    own = root.strip("/")
    names = []
    for entry in entries:
        text = str(entry).strip("/")
        if text and text != own:
            names.append(PurePosixPath(text).name)
    return names


# ------------------------------------------------------------------------------- local copies' owners

_STAGING_PREFIX = "fabricx-staging-"
_DOWNLOAD_PREFIX = "fabricx-download-"
# A copy that was just created and is still empty may not be locked by its (live) creator yet.
_FRESH_SECONDS = 60.0
_cleaned: set[tuple[int, str]] = set()


class _OwnedCopies:
    """Local staging copies and downloads of this process, each locked (``flock`` on the directory) for
    as long as it exists, so that another process can tell them from those of a killed process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[Path, int] = {}

    def create(self, root: Path, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a neighbour's check holds it for a moment at most
                with self._lock:
                    self._fds[path] = fd
        return path

    def remove(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
        with self._lock:
            fd = self._fds.pop(Path(path), None)
        if fd is not None:
            os.close(fd)


def remove_dead_local_copies(root: str | os.PathLike[str], *, once: bool = False) -> list[Path]:
    """Delete the local staging copies (``fabricx-staging-v-*``) and download folders
    (``fabricx-download-*``) in ``root`` whose process is gone (killed while saving or loading).

    A live process holds a lock on each of its copies, so a running neighbour's are never touched.
    With ``once``, a process cleans a given folder only the first time. Returns what was removed.

    Example:

    ```python
    remove_dead_local_copies(tempfile.gettempdir())
    ```
    """
    folder = Path(root)
    key = (os.getpid(), os.fspath(folder.resolve()))
    if fcntl is None or (once and key in _cleaned):
        return []
    _cleaned.add(key)
    removed = []
    try:
        names = [name for name in os.listdir(folder) if name.startswith((_STAGING_PREFIX, _DOWNLOAD_PREFIX))]
    except OSError:
        return []
    for name in names:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # gone, a link, or not a directory: not one of ours
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process is alive
            info = os.fstat(fd)
            if not os.listdir(fd) and time.time() - info.st_mtime < _FRESH_SECONDS:
                continue  # just created: its creator may not hold the lock yet
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


_DEFAULT_REMOTE: FsspecCheckpointIO | None = None


def io_for(path: str | os.PathLike[str], io: CheckpointIO) -> CheckpointIO:
    """The checkpoint I/O to use for ``path``: ``io``, unless ``path`` is a URL and ``io`` stores local files.

    A URL given while the strategy uses local I/O goes through a shared `FsspecCheckpointIO`
    whose store options come from the environment (e.g. ``AWS_ENDPOINT_URL``); pass
    ``Fabric(plugins=[FsspecCheckpointIO(storage_options=...)])`` to give them explicitly.

    Example:
        ```python
        io_for("s3://bucket/ckpt", LocalCheckpointIO())  # a FsspecCheckpointIO
        ```
    """
    global _DEFAULT_REMOTE
    if not is_url(path) or not isinstance(io, LocalCheckpointIO):
        return io  # a plugin of the user's own stores what it is given
    if type(io) is not LocalCheckpointIO:
        raise CheckpointError(
            f"{path} is a URL, but the checkpoint I/O plugin {type(io).__name__} stores local paths only. "
            "Use FsspecCheckpointIO (fabricx.checkpoint.storage) for URLs, or give a local path."
        )
    if _DEFAULT_REMOTE is None:
        _DEFAULT_REMOTE = FsspecCheckpointIO()
    return _DEFAULT_REMOTE
