"""The on-disk layout of a fabricx checkpoint.

A checkpoint is a directory:

```text
meta.json                          format and fabricx versions, world size,
                                   keys, extras, and the manifest: every other
                                   file's relative path and size
shared.json / shared.safetensors   state every rank shares (written by rank 0)
rank_<r>.json / rank_<r>.safetensors   state of rank r (RNG, data position, ...)
<anything a strategy adds>         e.g. a torch.distributed.checkpoint folder
```

It is written under a temporary name and renamed into place once complete (``meta.json`` last),
through a `fabricx.checkpoint.io.CheckpointIO`. A directory is complete when its
``meta.json`` reads and every file of its manifest is there with its size (`is_complete()`).
A regular file at the checkpoint path is read as a single-file ``torch.save`` checkpoint
(Lightning Fabric style), with ``weights_only=True`` so it cannot run code.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from fabricx.checkpoint.atomic import DirectoryPin
from fabricx.checkpoint.io import CheckpointIO, default_io
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.safe_read import read_regular
from fabricx.checkpoint.serialization import dump, json_path, load
from fabricx.checkpoint.storage import io_for, is_url
from fabricx.checkpoint.torch_files import (
    check_header,
    check_weights_only,
    load_single_file,
    looks_like_torch_file,
    write_file,
)
from fabricx.checkpoint.write_errors import write_failure
from fabricx.utilities.exceptions import CheckpointError, CheckpointNotFoundError
from fabricx.version import __version__

__all__ = [
    "FORMAT_VERSION",
    "META_FILE",
    "CheckpointWriter",
    "is_checkpoint",
    "is_complete",
    "read_checkpoint",
    "read_meta",
    "write_checkpoint",
    "write_single_file",
]

FORMAT_VERSION = 1
META_FILE = "meta.json"
_MANIFEST_KEY = "files"
SHARED_STEM = "shared"
_FORMAT_NAME = "fabricx-checkpoint"
# Token every rank agrees on without talking; one save to a given path runs at a time.
_DEFAULT_DISTRIBUTED_TOKEN = "save"


def rank_stem(rank: int) -> str:
    """The file stem holding rank ``rank``'s own state."""
    return f"rank_{rank}"


def _key_names(state: dict | None) -> list[str] | None:
    if state is None:
        return None
    return [key if isinstance(key, str) else repr(key) for key in state]


class CheckpointWriter:
    """Write a checkpoint in steps, so a strategy can add its own files before it is committed.

    Every rank creates a writer with the same ``path`` and ``token``; ``barrier`` synchronizes them
    (``None`` for a single process). Rank 0 prepares the temporary directory, all ranks write, rank 0
    writes ``meta.json`` and renames the directory into place.

    Example:
        ```python
        writer = CheckpointWriter("ckpt", rank=rank, world_size=world,
                                  barrier=dist.barrier, token="step100")
        tmp = writer.begin()
        writer.write_shared({"step": 100})
        writer.write_rank({"rng": torch.get_rng_state()})
        # strategy's own files, every rank
        dcp.save(sharded_state, checkpoint_id=tmp / "model")
        writer.commit()
        ```
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int = 0,
        world_size: int = 1,
        barrier: Callable[[], Any] | None = None,
        token: str | None = None,
        extra_meta: dict | None = None,
        io: CheckpointIO | None = None,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}.")
        if world_size > 1 and barrier is None:
            raise ValueError(
                f"Writing a checkpoint from {world_size} processes needs `barrier`, a callable that "
                "waits for all ranks (e.g. torch.distributed.barrier)."
            )
        if extra_meta is not None:
            try:
                json.dumps(extra_meta, allow_nan=False)
            except (TypeError, ValueError) as error:
                raise CheckpointError(
                    f"extra_meta must be JSON-serializable (str, numbers, bools, None, lists, dicts): {error}"
                ) from None
        self.path: Any = path if is_url(path) else Path(path)
        self.rank = rank
        self.world_size = world_size
        self._barrier = barrier
        if token is None:
            token = _DEFAULT_DISTRIBUTED_TOKEN if world_size > 1 else secrets.token_hex(4)
        self._token = token
        self.io = io_for(path, io or default_io())
        self.tmp = self.io.staging_dir(self.path, token)
        self._extra_meta = extra_meta
        self._shared_keys: list[str] | None = None
        self._rank_keys: list[str] | None = None
        self._state = "new"

    def _sync(self) -> None:
        if self._barrier is not None:
            self._barrier()

    @contextlib.contextmanager
    def _writing(self) -> Any:
        # Disk full, no permission, a file where a directory should be: say so and name the checkpoint.
        try:
            yield
        except (OSError, SafetensorError) as error:
            raise write_failure(self.path, error) from error

    def _expect(self, state: str, action: str) -> None:
        if self._state != state:
            raise RuntimeError(f"CheckpointWriter.{action}() called while the writer is {self._state!r}.")

    def begin(self) -> Path:
        """Create the temporary directory (rank 0), wait for all ranks, and return its path."""
        self._expect("new", "begin")
        if self.rank == 0:
            with self._writing():
                self.io.recover(self.path, is_complete)
                self.io.stage(self.path, self._token)
        self._sync()
        self.tmp = self.io.staging_dir(self.path, self._token)
        self._state = "open"
        return self.tmp

    def write_shared(self, state: dict) -> None:
        """Write the state all ranks share; only rank 0 writes, other ranks return at once."""
        self._expect("open", "write_shared")
        _require_dict(state, "shared")
        if self.rank == 0:
            with self._writing():
                dump(state, self.tmp, SHARED_STEM)
            self._shared_keys = _key_names(state)

    def write_rank(self, state: dict) -> None:
        """Write this rank's own state as ``rank_<rank>``."""
        self._expect("open", "write_rank")
        _require_dict(state, "per_rank")
        with self._writing():
            dump(state, self.tmp, rank_stem(self.rank))
        self._rank_keys = _key_names(state)

    def commit(self) -> Path:
        """Wait for all ranks, write ``meta.json`` and move the directory into place (rank 0), wait again."""
        self._expect("open", "commit")
        with self._writing():
            self.io.finish_rank(self.tmp, self.path, self.rank)
        self._sync()
        if self.rank == 0:
            try:
                self._write_meta_and_rename()
            except BaseException:
                self.io.abort(self.tmp, self.path)
                self._state = "aborted"
                raise
        self._sync()
        self._state = "committed"
        return self.path

    def commit_agreed(self, error: BaseException | None, agreement: Callable[[bool], bool]) -> Path:
        """Commit once every rank wrote its part, deciding together: ``agreement(ok)`` is a collective that
        tells whether ``ok`` holds on every rank. Each rank makes its files durable; if all did, rank 0
        writes ``meta.json`` and moves the directory into place, and all agree on that too. A failure
        on any rank (``error`` is this rank's, from writing its files) aborts on every rank and raises
        there, so no rank waits for a peer that gave up and no half-written checkpoint is committed.

        Example:
            ```python
            writer.commit_agreed(None, lambda ok: agree(ok, group))
            ```
        """
        self._expect("open", "commit_agreed")
        if error is None:
            try:
                with self._writing():
                    self.io.finish_rank(self.tmp, self.path, self.rank)
            except BaseException as caught:
                error = caught
        if not agreement(error is None):
            self.abort()
            if error is not None:
                raise error
            raise CheckpointError(
                f"Another rank failed to write its part of the checkpoint {self.path}; it was not committed."
            )
        published: BaseException | None = None
        if self.rank == 0:
            try:
                self._write_meta_and_rename()
            except BaseException as caught:
                self.abort()
                published = caught
        if not agreement(published is None):
            self._state = "aborted"
            if published is not None:
                raise published
            raise CheckpointError(f"Rank 0 could not commit the checkpoint {self.path}.")
        self._state = "committed"
        return self.path

    def _write_meta_and_rename(self) -> None:
        with self._writing():
            if self._shared_keys is None:
                dump({}, self.tmp, SHARED_STEM)
                self._shared_keys = []
            meta = {
                "format": _FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                "fabricx_version": __version__,
                "world_size": self.world_size,
                "created": time.time(),
                "created_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "shared_keys": self._shared_keys,
                "per_rank_keys": self._rank_keys,
                "extra_meta": self._extra_meta,
                _MANIFEST_KEY: {name: size for name, size in self.io.manifest(self.tmp).items() if name != META_FILE},
            }
            text = json.dumps(meta, indent=2, allow_nan=False)
            (self.tmp / META_FILE).write_text(text, encoding="utf-8")  # flushed by the commit
            self.io.commit(self.tmp, self.path)

    def abort(self) -> None:
        """Give up: rank 0 removes the temporary directory; the previous checkpoint stays as it was."""
        if self.rank == 0 and self._state != "committed":
            self.io.abort(self.tmp, self.path)
        self._state = "aborted"

    def __enter__(self) -> CheckpointWriter:
        self.begin()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _require_dict(state: Any, what: str) -> None:
    if not isinstance(state, dict):
        raise CheckpointError(f"The {what} checkpoint state must be a dict; got {type(state).__name__}.")


def write_checkpoint(
    path: str | os.PathLike[str],
    shared: dict | None,
    per_rank: dict | None,
    *,
    rank: int = 0,
    world_size: int = 1,
    barrier: Callable[[], Any] | None = None,
    token: str | None = None,
    extra_meta: dict | None = None,
    io: CheckpointIO | None = None,
) -> Path:
    """Write a complete checkpoint directory at ``path`` in one call (see `CheckpointWriter`).

    Example:
        ```python
        shared = {"model": model.state_dict(), "step": 10}
        write_checkpoint("run/ckpt", shared, {"rng": torch.get_rng_state()})
        ```
    """
    writer = CheckpointWriter(
        path, rank=rank, world_size=world_size, barrier=barrier, token=token, extra_meta=extra_meta, io=io
    )
    with writer:  # commits, or aborts on an error
        if shared is not None:
            writer.write_shared(shared)
        if per_rank is not None:
            writer.write_rank(per_rank)
    return writer.path


# ---------------------------------------------------------------------------------------------- reading


def read_meta(directory: str | os.PathLike[str]) -> dict:
    """Read and check ``meta.json`` of a checkpoint directory.

    Example:
        ```python
        read_meta("run/ckpt")["world_size"]
        ```
    """
    meta_file = Path(directory) / META_FILE
    data = read_regular(
        meta_file,
        "the checkpoint's metadata",
        missing=f"{Path(directory)} is not a fabricx checkpoint: it has no {META_FILE} (an interrupted save, or "
        "a directory written by another tool).",
    )
    try:
        meta = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise CheckpointError(f"Cannot read {meta_file} (truncated or damaged?): {error}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_file} is damaged: expected a JSON object, found {type(meta).__name__}.")
    check_header(meta_file, meta, "checkpoint", FORMAT_VERSION)
    return meta


def is_complete(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a whole checkpoint: ``meta.json`` reads and every file it lists is there
    with its recorded size (checkpoints written before manifests existed need ``meta.json`` only).

    Example:
        ```python
        is_complete("run/ckpt")  # False for a copy a crash left half-deleted
        ```
    """
    root = Path(directory)
    if root.is_file():  # a single-file checkpoint: whole when torch can find its records
        return looks_like_torch_file(root)
    try:
        meta = read_meta(root)
    except CheckpointError:
        return False
    files = meta.get(_MANIFEST_KEY)
    if files is None:
        return True
    if not isinstance(files, dict):
        return False
    for name, size in files.items():
        if not isinstance(name, str) or not isinstance(size, int) or name.startswith("/") or ".." in name.split("/"):
            return False
        try:
            if (root / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def read_checkpoint(
    path: str | os.PathLike[str], rank: int = 0, io: CheckpointIO | None = None, *, keep_pin: bool = False
) -> LoadedCheckpoint:
    """Load a checkpoint directory (or a single-file checkpoint) onto the CPU without running code.

    ``per_rank`` is ``None`` when the checkpoint has no file for ``rank`` (e.g. it was written by
    fewer processes). Every problem raises `CheckpointError` naming the file.

    Example:
        ```python
        loaded = read_checkpoint("run/ckpt", rank=fabric.global_rank)
        model.load_state_dict(loaded.shared["model"])
        ```
    """
    if is_url(path):
        return _read_remote(os.fspath(path), rank, io_for(path, io or default_io()))
    target = Path(path)
    for _ in range(_READ_ATTEMPTS):
        if target.is_file():
            return load_single_file(target, rank)
        found = (io or default_io()).resolve(target, is_complete)
        if found is None and target.is_dir():
            # No complete copy anywhere: read this one, whose readers say exactly what is wrong with it.
            found = target
        if found is None:
            leftovers = (
                sorted(p.name for p in target.parent.glob(f"{target.name}.tmp-*")) if target.parent.is_dir() else []
            )
            hint = f" Only unfinished saves were found: {', '.join(leftovers)}." if leftovers else ""
            raise CheckpointNotFoundError(f"No checkpoint found at {target}.{hint}")
        if found.is_file():
            return load_single_file(found, rank)
        # Files are read by name while another job may replace the checkpoint: the read counts only if
        # the name still leads to the directory it started in (else it may mix two saves), else again.
        pin = DirectoryPin(found)
        try:
            loaded, failure = _read_directory(found, rank), None
        except CheckpointError as error:
            loaded, failure = None, error
        if pin.unchanged():
            if failure is not None:
                pin.close()
                raise failure
            assert loaded is not None
            if keep_pin:
                loaded.pin = pin
            else:
                pin.close()
            return loaded
        pin.close()
        time.sleep(0.005)
    raise CheckpointError(
        f"Could not read the checkpoint {target}: it was replaced by another save while being read, "
        f"{_READ_ATTEMPTS} times in a row. Load it again once the writer is done (or load a checkpoint no "
        "job is rewriting)."
    )


#: How many times a read starts again when another save replaced the checkpoint while it was read.
_READ_ATTEMPTS = 20


def _read_remote(url: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
    committed = getattr(io, "committed_version", None)
    for attempt in range(_READ_ATTEMPTS):
        version = committed(url) if callable(committed) else None
        try:
            found = io.resolve(url, is_complete)
            if found is None:
                raise CheckpointError(
                    f"No committed checkpoint found at {url} (nothing saved there, or the save did not finish)."
                )
            if found.is_file():
                return load_single_file(found, rank)
            return _read_directory(found, rank)
        except CheckpointError:
            # A save that committed meanwhile deletes the version being downloaded: read the new one.
            if attempt + 1 == _READ_ATTEMPTS or version is None or committed is None or committed(url) == version:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _read_directory(found: Path, rank: int) -> LoadedCheckpoint:
    meta = read_meta(found)
    shared = load(found, SHARED_STEM)
    if not isinstance(shared, dict):
        raise CheckpointError(f"{json_path(found, SHARED_STEM)} is damaged: it does not hold a dict.")
    per_rank = None
    if json_path(found, rank_stem(rank)).exists():
        per_rank = load(found, rank_stem(rank))
        if not isinstance(per_rank, dict):
            raise CheckpointError(f"{json_path(found, rank_stem(rank))} is damaged: it does not hold a dict.")
    return LoadedCheckpoint(shared=shared, per_rank=per_rank, meta=meta, path=found, fresh=True)


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like something `read_checkpoint()` can load (without loading it).

    Example:
        ```python
        if is_checkpoint(ckpt_path): state = read_checkpoint(ckpt_path)
        ```
    """
    target = Path(path)
    found = target if target.is_file() else default_io().resolve(target, is_complete)
    if found is None:
        return False
    return looks_like_torch_file(found) if found.is_file() else True


# ------------------------------------------------------------------------------------------- single file


def write_single_file(path: str | os.PathLike[str], state: dict, io: CheckpointIO | None = None) -> Path:
    """Atomically write ``state`` with ``torch.save`` so it loads with ``weights_only=True``.

    Example:
        ```python
        write_single_file("model.ckpt", {"model": model.state_dict(), "step": 3})
        ```
    """
    _require_dict(state, "single-file")
    check_weights_only(state, "state", path)
    return write_file(path, state, io or default_io())
