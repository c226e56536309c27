"""Asynchronous saving: copy the state to host memory, then write and commit it in a background thread.

The training loop is blocked only while the state is copied (`stage_to_host()`; pinned memory
on CUDA, so the copy runs at full bus speed). A background thread then writes the copy, and the
checkpoint is committed only once every rank's files are durable: the ranks agree on a dedicated
gloo group (`background_group()`), never on the training one, so the training loop's own
collectives cannot interleave with the save's. One background save runs at a time per checkpointer:
its next save, a load, and the end of the process wait for it.

A crash (even SIGKILL) during the background write leaves only an uncommitted temporary copy,
which no reader takes, so the previous checkpoint stays the latest.

Example:
    ```python
    handle = start_background_save("ckpt/step_100", write_job)   # write_job writes and commits
    ...                                                           # training goes on
    handle.wait()                                                 # raises if the save failed
    ```
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

from fabricx.checkpoint.tensor_views import byte_span, view_key
from fabricx.utilities.exceptions import CheckpointError

__all__ = [
    "AsyncSave",
    "CommitCallbackError",
    "agree",
    "background_group",
    "release_staging_buffers",
    "stage_to_host",
    "stage_to_host_deferred",
    "start_background_save",
]

# Exact types kept as they are: immutable, and storable without pickling.
_IMMUTABLE = (str, int, float, bool, bytes, torch.dtype, torch.Size, torch.device, type(None))
# How long the ranks of a background save wait for each other before giving up on that save.
_AGREEMENT_TIMEOUT = timedelta(minutes=30)


class CommitCallbackError(CheckpointError):
    """The checkpoint was committed (it is the latest), but a function run after its commit failed.

    Raised by `wait` (and the next save or load) for a failing commit callback; the
    saved checkpoint itself is complete and loads.

    Example:

    ```python
    try:
        handle.wait()
    except CommitCallbackError as error:
        print("saved, but:", error)
    ```
    """


class AsyncSave:
    """A checkpoint being written in the background; returned by ``fabric.save(..., async_save=True)``.

    Example:
        ```python
        handle = fabric.save("ckpt", state, async_save=True)
        handle.done()    # False while it is still being written
        handle.wait()    # blocks until committed; raises CheckpointError if it failed
        ```
    """

    def __init__(self, path: Any) -> None:
        self.path = path
        self._finished = threading.Event()
        self._error: BaseException | None = None  # the save itself failed: nothing was committed
        self._after_commit: list[tuple[Callable[[], Any], BaseException]] = []  # committed; a callback failed
        self.reported = False
        self._thread: threading.Thread | None = None
        self._callbacks: list[Callable[[], Any]] | None = []
        self._done_callbacks: list[Callable[[], Any]] | None = []
        self._callbacks_lock = threading.Lock()
        self._guard: Any = None
        self.started = time.perf_counter()
        self.seconds: float | None = None

    def _run(self, job: Callable[[], Any]) -> None:
        try:
            try:
                job()
            except BaseException as error:
                self._error = error
            with self._callbacks_lock:
                callbacks, self._callbacks = self._callbacks, None
            if self._error is None:
                for callback in callbacks or ():
                    self._call_after(callback)
            with self._callbacks_lock:
                finished, self._done_callbacks = self._done_callbacks, None
            for callback in finished or ():
                self._call_after(callback)
        finally:
            self.seconds = time.perf_counter() - self.started
            self._finished.set()

    def _call_after(self, callback: Callable[[], Any]) -> None:
        # One failing callback neither hides the commit nor stops the others (retention still runs).
        try:
            callback()
        except BaseException as error:
            self._after_commit.append((callback, error))

    def add_commit_callback(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` once the checkpoint is committed (in the background thread, before
        `done()` turns true; at once if it is already committed). A failed save never runs it.

        A callback that raises does not make the save a failed one: `wait()` then raises
        `CommitCallbackError`, which says that the checkpoint was committed.

        Example:
            ```python
            handle.add_commit_callback(manager.apply_retention)
            ```
        """
        with self._callbacks_lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        self._finished.wait()
        if self._error is not None:
            self.wait()  # raises: the save failed, so there is no commit to run it after
        callback()

    def add_done_callback(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` once the save has finished, committed or failed (in the background thread,
        after the commit callbacks; at once if it has finished already).

        Example:

        ```python
        handle.add_done_callback(lambda: manager.release(path))
        ```
        """
        with self._callbacks_lock:
            if self._done_callbacks is not None:
                self._done_callbacks.append(callback)
                return
        self._finished.wait()
        callback()

    def done(self) -> bool:
        """Whether the background write has finished (committed or failed)."""
        return self._finished.is_set()

    def wait_staged(self, timeout: float | None = None) -> bool:
        """Block until the state of the save call is copied to host memory (parameters and optimizer
        state are copied in the background; the next ``optimizer.step()`` waits for this by itself).
        Returns whether the copy finished within ``timeout``; afterwards the state may change freely.

        Example:
            ```python
            handle = fabric.save("ckpt", state, async_save=True)
            handle.wait_staged()
            model.weight.data.zero_()  # in-place change outside optimizer.step(): safe now
            ```
        """
        guard = self._guard
        return True if guard is None else guard.wait(timeout)

    @property
    def step_wait_s(self) -> float:
        """Seconds ``optimizer.step()`` calls were held until the background copy of the state finished."""
        guard = self._guard
        return 0.0 if guard is None else guard.waited_s

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the checkpoint is committed and return its path.

        Raises `CheckpointError` if the background write failed (the previous checkpoint is then
        still the latest), `CommitCallbackError` if it was committed but a commit callback
        failed, and ``TimeoutError`` if ``timeout`` seconds pass first.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(f"The background save of {self.path} did not finish within {timeout} s.")
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            self.reported = True
            error = self._error
            if isinstance(error, CheckpointError):
                raise CheckpointError(f"The background save of {self.path} failed: {error}") from error
            raise CheckpointError(
                f"The background save of {self.path} failed: {type(error).__name__}: {error}. It was not "
                "committed; the checkpoint saved before it is still the latest."
            ) from error
        if self._after_commit:
            self.reported = True
            failures = "; ".join(
                f"{getattr(callback, '__qualname__', repr(callback))} raised {type(error).__name__}: {error}"
                for callback, error in self._after_commit
            )
            raise CommitCallbackError(
                f"The background save of {self.path} was committed and is the latest checkpoint, but work run "
                f"after its commit failed: {failures}."
            ) from self._after_commit[0][1]
        return self.path

    def __repr__(self) -> str:
        if not self.done():
            state = "running"
        elif self._error is not None:
            state = "failed"
        else:
            state = "committed, a commit callback failed" if self._after_commit else "committed"
        return f"AsyncSave(path={self.path!r}, {state})"


def start_background_save(path: Any, job: Callable[[], Any], guard: Any = None) -> AsyncSave:
    """Run ``job`` (write and commit ``path``) in a background thread; the caller (a
    `fabricx.checkpoint.checkpointer.Checkpointer`) holds the handle and waits for it before its next save.

    ``guard`` (a `fabricx.checkpoint.step_guard.StagingGuard`) is what the handle's ``wait_staged`` and
    ``step_wait_s`` report on: the deferred copy the next optimizer step waits for.

    Example:
        ```python
        handle = start_background_save("ckpt", lambda: write_checkpoint("ckpt", staged, None))
        ```
    """
    handle = AsyncSave(path)
    handle._guard = guard
    # Not a daemon: the interpreter lets it finish before exiting, so a save is never cut short by a
    # normal exit; the checkpointer's shutdown hook waits for it and reports a failure nobody waited for.
    thread = threading.Thread(target=handle._run, args=(job,), name="fabricx-async-save", daemon=False)
    handle._thread = thread
    thread.start()
    return handle


# ----------------------------------------------------------------------------------------- host staging


class BufferPool:
    """Host buffers of the last background save, reused by the next one of the same sizes.

    A state's tensor sizes rarely change between saves, so the second and later copies write into
    memory that is already mapped (and pinned on CUDA, where allocating pinned memory is slow) instead
    of faulting in fresh pages. Only buffers a save no longer uses are handed out again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[int, bool], list[torch.Tensor]] = {}

    def take(self, nbytes: int, pinned: bool) -> torch.Tensor:
        with self._lock:
            found = self._free.get((nbytes, pinned))
            if found:
                return found.pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)

    def give_back(self, buffers: list[tuple[torch.Tensor, bool]]) -> None:
        """Keep exactly these buffers for the next save (what an earlier save left is freed)."""
        free: dict[tuple[int, bool], list[torch.Tensor]] = {}
        for buffer, pinned in buffers:
            free.setdefault((buffer.numel(), pinned), []).append(buffer)
        with self._lock:
            self._free = free

    def clear(self) -> None:
        with self._lock:
            self._free = {}

    def held_bytes(self) -> int:
        """Bytes kept for the next save (what a memory measurement should not count as leaked)."""
        with self._lock:
            return sum(buffer.numel() for buffers in self._free.values() for buffer in buffers)


#: The host buffers background saves copy into (a save hands back what it used once it is written).
staging_buffers = BufferPool()


def release_staging_buffers() -> None:
    """Free the host memory kept from the last background save for reuse by the next one.

    Example:
        ```python
        release_staging_buffers()  # e.g. before a memory-hungry evaluation
        ```
    """
    staging_buffers.clear()


def stage_to_host(obj: Any, *, pin_memory: bool | None = None, reuse: list | None = None) -> Any:
    """A copy of ``obj`` whose tensors live in fresh host memory, so training can change the originals.

    Containers (dict, ``OrderedDict``, list, tuple) are rebuilt; a state dict's ``_metadata`` is kept;
    NumPy arrays are copied; tensors that share memory share it in the copy too (tied weights stay
    tied). Tensors on an accelerator are copied into pinned memory (``pin_memory=None``: pinned when
    CUDA is available). Values that cannot be saved without pickling raise `CheckpointError`
    here, before anything runs in the background.

    With ``reuse`` (a list), the copies are made in buffers kept from the previous background save
    where sizes match, and the buffers used are appended to ``reuse``; hand them back with
    ``staging_buffers.give_back`` once the copy is no longer needed.

    Example:
        ```python
        staged = stage_to_host({"model": model.state_dict(), "step": 3})
        ```
    """
    staged, _ = stage_to_host_deferred(obj, frozenset(), pin_memory=pin_memory, reuse=reuse)  # nothing deferred
    return staged


def stage_to_host_deferred(
    obj: Any,
    deferred: frozenset[tuple[str, int]],
    *,
    pin_memory: bool | None = None,
    reuse: list | None = None,
) -> tuple[Any, Callable[[], None]]:
    """`stage_to_host()`, except that tensors whose memory is in ``deferred`` (``(device, storage
    address)`` pairs, see `fabricx.checkpoint.step_guard.guarded_storages()`) get their host buffer now
    and their copy only when the returned function runs (in the background thread). That function raises
    `CheckpointError` if such a tensor was changed in place (its version counter moved) in between.

    Example:
        ```python
        staged, finish = stage_to_host_deferred(state, guarded_storages([optimizer]))
        finish()  # before ``staged`` is written, and before the optimizer steps again
        ```
    """
    stager = _Stager(pin_memory, reuse, deferred)
    structure = stager.walk(obj, "")
    stager.copy()
    return stager.fill(structure), stager.finish_deferred


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Stager:
    def __init__(
        self, pin_memory: bool | None, reuse: list | None = None, deferred: frozenset[tuple[str, int]] = frozenset()
    ) -> None:
        self.pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.reuse = reuse
        self.deferred_storages = deferred
        self.tensors: list[torch.Tensor] = []
        self.paths: list[str] = []
        self.copies: list[torch.Tensor | None] = []
        # (host target, source, [(tensor, its version counter at the save call, its path in the state)])
        self.pending: list[tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, int, str]]]] = []
        self.streams: dict[torch.device, Any] = {}  # CUDA device -> the caller's stream at the save call
        self._active: set[int] = set()

    def walk(self, value: Any, path: str) -> Any:
        if type(value) in _IMMUTABLE:
            return value
        if isinstance(value, torch.Tensor):
            return self._tensor(value, path)
        if isinstance(value, bytearray):
            return bytes(value)
        np = sys.modules.get("numpy")
        if np is not None and isinstance(value, np.ndarray | np.generic):
            return value.copy()
        if isinstance(value, str | int | float | bytes):  # subclasses (e.g. IntEnum) as their base value
            return _as_base_value(value)
        if isinstance(value, dict | list | tuple):
            if id(value) in self._active:
                raise CheckpointError(f"Cannot save state{path}: it contains itself (a reference cycle).")
            self._active.add(id(value))
            try:
                return self._container(value, path)
            finally:
                self._active.discard(id(value))
        raise CheckpointError(
            f"Cannot save state{path}: values of type {type(value).__module__}.{type(value).__qualname__} "
            "cannot be stored without pickling. Convert it to a dict/list/tuple of str, int, float, bool, None, "
            "torch.Tensor or numpy array (for an object with state, save `obj.state_dict()`)."
        )

    def _container(self, value: dict | list | tuple, path: str) -> Any:
        if isinstance(value, dict):
            copy: dict = OrderedDict() if isinstance(value, OrderedDict) else {}
            for key, item in value.items():
                copy[key] = self.walk(item, f"{path}[{key!r}]")
            metadata = getattr(value, "_metadata", None)
            if isinstance(metadata, dict):
                copy._metadata = self.walk(metadata, f"{path}._metadata")  # type: ignore[attr-defined]
            return copy
        items = [self.walk(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)

    def _tensor(self, tensor: torch.Tensor, path: str) -> _Slot:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise CheckpointError(
                f"Cannot stage state{path} for a background save: tensor subclass {type(tensor).__qualname__} "
                "is not supported here. Convert it to a plain tensor (a DTensor: save it through a sharded "
                "strategy, or `.full_tensor()`)."
            )
        if tensor.device.type == "meta":
            raise CheckpointError(
                f"Cannot save state{path}: it is a tensor on the meta device and has no data. Materialize it first."
            )
        self.tensors.append(tensor.detach())
        self.paths.append(path)
        return _Slot(len(self.tensors) - 1)

    def copy(self) -> None:
        """Copy every tensor once per memory region; views of one region stay views of one copy."""
        self.copies = [None] * len(self.tensors)
        groups: dict[Any, list[int]] = {}
        for index, tensor in enumerate(self.tensors):
            storage = tensor.untyped_storage()
            if tensor.is_conj() or tensor.is_neg() or storage.nbytes() == 0 or tensor.layout != torch.strided:
                groups[("own", index)] = [index]
            else:
                groups.setdefault((str(tensor.device), storage.data_ptr()), []).append(index)
        devices = set()
        for key, indices in groups.items():
            defer = key in self.deferred_storages
            device = self.tensors[indices[0]].device
            if defer and device.type == "cuda" and device not in self.streams:
                # The background copy runs on the stream the caller's work was queued on, after that work.
                self.streams[device] = torch.cuda.current_stream(device)
            views: dict[tuple, list[int]] = {}
            for index in indices:
                views.setdefault(view_key(self.tensors[index]), []).append(index)
            if len(views) == 1:
                copy = self._host_copy(self.tensors[indices[0]], self.paths[indices[0]] if defer else None)
                for index in indices:
                    self.copies[index] = copy
            else:
                self._copy_span(indices, defer)
            if not defer:
                devices.add(self.tensors[indices[0]].device)
        _synchronize(devices)

    def finish_deferred(self) -> None:
        """Copy the deferred tensors (in the background); refuse any that changed since the save call."""
        pending, self.pending = self.pending, []
        devices = set()
        for target, source, _ in pending:
            stream = self.streams.get(source.device)
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                target.copy_(source, non_blocking=source.device.type != "cpu")
            devices.add(source.device)
        _synchronize(devices)
        changed = [path for _, _, checks in pending for tensor, version, path in checks if tensor._version != version]
        if changed:
            shown = ", ".join(f"state{path}" for path in changed[:3]) + (" ..." if len(changed) > 3 else "")
            raise CheckpointError(
                f"{shown} changed in place after the asynchronous save was called and before it was copied, "
                "outside optimizer.step() (which waits for the copy). The save was not committed. Call "
                "handle.wait_staged() before such changes, or switch the deferred copy off with "
                "fabricx.checkpoint.step_guard.defer_optimizer_tensors(False)."
            )

    def _host_tensor(self, shape: Any, dtype: torch.dtype, on_accelerator: bool) -> torch.Tensor:
        pinned = self.pin and on_accelerator
        numel = 1
        for size in shape:
            numel *= int(size)
        nbytes = numel * dtype.itemsize
        if self.reuse is None or nbytes == 0 or dtype.is_complex or dtype == torch.bool:
            return torch.empty(shape, dtype=dtype, pin_memory=pinned)
        buffer = staging_buffers.take(nbytes, pinned)
        self.reuse.append((buffer, pinned))
        return buffer.view(dtype).view(shape)

    def _host_copy(self, tensor: torch.Tensor, deferred_path: str | None = None) -> torch.Tensor:
        if tensor.layout != torch.strided:
            return tensor.to("cpu", copy=True)
        source = tensor.resolve_conj().resolve_neg()
        target = self._host_tensor(source.shape, source.dtype, source.device.type != "cpu")
        if deferred_path is not None:
            self.pending.append((target, source, [(tensor, tensor._version, deferred_path)]))
        else:
            target.copy_(source, non_blocking=source.device.type != "cpu")
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(target, requires_grad=tensor.requires_grad)
        return target

    def _copy_span(self, indices: list[int], defer: bool = False) -> None:
        # Different views of one memory region: copy the bytes they cover once and rebuild each view.
        tensors = [self.tensors[i] for i in indices]
        covered = byte_span(tensors)
        on_accelerator = covered.data.device.type != "cpu"
        span = self._host_tensor((covered.data.numel(),), torch.uint8, on_accelerator)
        if defer:
            # The raw byte view has a version counter of its own: check every view's.
            checks = [
                (tensor, tensor._version, self.paths[index]) for index, tensor in zip(indices, tensors, strict=True)
            ]
            self.pending.append((span, covered.data, checks))
        else:
            span.copy_(covered.data, non_blocking=on_accelerator)
        for index, tensor, offset in zip(indices, tensors, covered.offsets, strict=True):
            view = torch.empty(0, dtype=tensor.dtype)
            view.set_(span.untyped_storage(), offset, tensor.shape, tensor.stride())
            self.copies[index] = view

    def fill(self, structure: Any) -> Any:
        if isinstance(structure, _Slot):
            return self.copies[structure.index]
        if isinstance(structure, dict):
            for key, item in structure.items():
                if isinstance(item, _Slot | dict | list | tuple):
                    structure[key] = self.fill(item)
            metadata = getattr(structure, "_metadata", None)
            if isinstance(metadata, dict):
                structure._metadata = self.fill(metadata)  # type: ignore[attr-defined]
            return structure
        if isinstance(structure, list):
            return [self.fill(item) for item in structure]
        if isinstance(structure, tuple):
            return tuple(self.fill(item) for item in structure)
        return structure


def _synchronize(devices: set[torch.device]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------ rank agreement

_groups: dict[int, Any] = {}


def background_group() -> Any:
    """A gloo process group for background saves (created once, collectively), or ``None`` alone.

    Every rank must call it at the same point (the first asynchronous save). The background threads
    agree on it, so the training loop's collectives on the default group never interleave with theirs.

    Example:
        ```python
        group = background_group()   # all ranks, in the foreground
        ```
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    key = id(dist.group.WORLD)
    if key not in _groups:
        _groups[key] = dist.new_group(backend="gloo", timeout=_AGREEMENT_TIMEOUT)
    return _groups[key]


def agree(ok: bool, group: Any) -> bool:
    """Whether ``ok`` holds on every rank of ``group`` (``ok`` itself with no group); a collective.

    Example:
        ```python
        if agree(files_written, group): commit()
        ```
    """
    if group is None:
        return ok
    import torch.distributed as dist

    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def _as_base_value(value: str | int | float | bytes) -> str | int | float | bytes:
    """A subclass instance (e.g. an IntEnum member) as its base type's value."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return bytes(value)
