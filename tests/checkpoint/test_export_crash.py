"""Weight exports survive a crash or a full disk at any moment: afterwards the folder loads the previous
weights or the new ones, exactly, never nothing and never a mix.

Every file-system step of an export (each rename, link, unlink, fsync, and the middle of each file being
written) is a crash point. For each one a forked child runs the export and SIGKILLs itself there; the
parent then loads the folder with Accelerate's own loader (``load_checkpoint_in_model``, which prefers
``pytorch_model.bin`` over an index, as transformers does) or with ``load_weights`` for safetensors.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fabricx.checkpoint.atomic as atomic
from fabricx.checkpoint.export import load_weights, save_weights
from fabricx.compat.accelerate import io as accelerate_io
from fabricx.compat.accelerate.io import save_state_dict


def _weights(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {f"layer{i}.weight": torch.randn(16, 16, generator=generator) for i in range(3)}


_SHARD = 1100  # bytes: 16 x 16 float32 is 1024, so every tensor gets its own shard
_LAYOUTS = {"single": "10GB", "sharded": _SHARD}


def _bin_export(state: dict[str, torch.Tensor], folder: Path, layout: str) -> None:
    save_state_dict(state, folder, max_shard_size=_LAYOUTS[layout], safe_serialization=False)


def _safetensors_export(state: dict[str, torch.Tensor], folder: Path, layout: str) -> None:
    save_weights(state, folder, max_shard_size=_LAYOUTS[layout])


def _load_with_accelerate(folder: Path) -> dict[str, torch.Tensor]:
    from accelerate.utils import load_checkpoint_in_model

    model = nn.Module()
    for i in range(3):
        setattr(model, f"layer{i}", nn.Linear(16, 16, bias=False))
    load_checkpoint_in_model(model, str(folder))
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _load_bin_folder(folder: Path) -> dict[str, torch.Tensor]:
    """What Accelerate's ``load_checkpoint_in_model`` reads from a folder (its rule, without its cost):
    ``pytorch_model.bin`` if present, else the one ``*.index.json`` and the shards it lists."""
    import json

    single = folder / "pytorch_model.bin"
    if single.exists():
        return torch.load(single, weights_only=True)
    indexes = list(folder.glob("*.index.json"))
    assert len(indexes) == 1, f"Accelerate refuses a folder with {len(indexes)} index files"
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(json.loads(indexes[0].read_text())["weight_map"].values())):
        state.update(torch.load(folder / shard, weights_only=True))
    return state


def _which(loaded: dict[str, torch.Tensor], old: dict[str, torch.Tensor], new: dict[str, torch.Tensor]) -> str:
    for name, candidate in (("old", old), ("new", new)):
        if set(loaded) == set(candidate) and all(torch.equal(loaded[k], candidate[k]) for k in candidate):
            return name
    return "neither"


class _Crash:
    """Counts file-system steps of the export; at step ``at`` the process SIGKILLs itself."""

    def __init__(self, at: int | None) -> None:
        self.at, self.count = at, 0

    def step(self) -> None:
        if self.at is not None and self.count == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.count += 1

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.step()
            return function(*args, **kwargs)

        return wrapped

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("replace", "rename", "link", "unlink", "remove", "fsync"):
            monkeypatch.setattr(os, name, self.wrap(getattr(os, name)))
        real_save = torch.save

        def torch_save(obj: Any, handle: Any, *args: Any, **kwargs: Any) -> None:
            import io

            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            handle.write(data[: len(data) // 2])
            handle.flush()
            self.step()  # killed in the middle of writing a file
            handle.write(data[len(data) // 2 :])

        monkeypatch.setattr(accelerate_io.torch, "save", torch_save)


def _crash_sweep(
    tmp_path: Path, export: Callable[..., None], before: str, after: str, load: Callable[[Path], Any]
) -> dict[str, int]:
    # A SIGKILL loses nothing the process wrote (the kernel keeps it); only a power cut needs the fsyncs.
    # They stay crash points, but do not wait for the disk, which makes the sweep fast.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        return _sweep(tmp_path, export, before, after, load)


def _sweep(
    tmp_path: Path, export: Callable[..., None], before: str, after: str, load: Callable[[Path], Any]
) -> dict[str, int]:
    old, new = _weights(1), _weights(2)
    # How many steps does one export take?
    probe = tmp_path / "probe"
    export(old, probe, before)
    (probe / "config.json").write_text("{}")
    counter = _Crash(None)
    with pytest.MonkeyPatch.context() as patch:
        counter.install(patch)
        export(new, probe, after)
    assert counter.count > 3
    outcomes = {"old": 0, "new": 0}
    for at in range(counter.count):
        folder = tmp_path / f"crash-{at}"
        export(old, folder, before)
        (folder / "config.json").write_text("{}")  # a file of the user's, not ours
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                with pytest.MonkeyPatch.context() as patch:
                    _Crash(at).install(patch)
                    export(new, folder, after)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"step {at} was not reached"
        outcome = _which(load(folder), old, new)
        assert outcome != "neither", f"a SIGKILL at step {at} of {counter.count} left no loadable weights"
        assert (folder / "config.json").exists() or (atomic.resolve_directory(folder) / "config.json").exists()
        outcomes[outcome] += 1
    # Until the switch the old weights load, after it the new ones (a save whose last step is deleting the
    # old single file never shows "new" after a crash: the old file wins until it is gone).
    assert outcomes["old"] and sum(outcomes.values()) == counter.count, outcomes
    return outcomes


@pytest.mark.parametrize(
    ("before", "after"), [("single", "single"), ("single", "sharded"), ("sharded", "sharded"), ("sharded", "single")]
)
def test_bin_export_survives_sigkill_at_every_step(before: str, after: str, tmp_path: Path) -> None:
    outcomes = _crash_sweep(tmp_path, _bin_export, before, after, _load_bin_folder)
    # The rule _load_bin_folder follows is Accelerate's: its own loader agrees on a crashed folder.
    crashed = tmp_path / "crash-1"
    assert _which(_load_with_accelerate(crashed), _weights(1), _weights(2)) == _which(
        _load_bin_folder(crashed), _weights(1), _weights(2)
    )
    # After a clean save only the new files are left.
    folder = tmp_path / "clean"
    _bin_export(_weights(1), folder, before)
    _bin_export(_weights(2), folder, after)
    shards = {f"pytorch_model-0000{i}-of-00003.bin" for i in (1, 2, 3)}
    expected = {"pytorch_model.bin"} if after == "single" else {"pytorch_model.bin.index.json", *shards}
    assert {p.name for p in folder.iterdir()} == expected, outcomes


def test_safetensors_export_survives_sigkill_at_every_step(tmp_path: Path) -> None:
    _crash_sweep(tmp_path, _safetensors_export, "sharded", "sharded", lambda folder: load_weights(folder))


def _disk_full_after(limit: int) -> Callable[..., None]:
    """A torch.save that writes ``limit`` bytes and then fails as a full disk does."""
    real_save = torch.save

    def torch_save(obj: Any, handle: Any, *args: Any, **kwargs: Any) -> None:
        import io

        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        handle.write(buffer.getvalue()[:limit])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return torch_save


@pytest.mark.parametrize(("before", "after"), [("single", "single"), ("sharded", "sharded"), ("single", "sharded")])
def test_bin_export_on_a_full_disk_keeps_the_previous_weights(
    before: str, after: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _weights(1)
    folder = tmp_path / "export"
    _bin_export(old, folder, before)
    files = sorted(p.name for p in folder.iterdir())
    monkeypatch.setattr(accelerate_io.torch, "save", _disk_full_after(500))
    with pytest.raises(OSError, match="No space left"):
        _bin_export(_weights(2), folder, after)
    monkeypatch.undo()
    assert _which(_load_bin_folder(folder), old, _weights(2)) == "old"
    assert sorted(p.name for p in folder.iterdir()) == files, "the failed save left files behind"


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Any:
    """A real 64 KiB file system (tmpfs); skipped where this process may not mount one."""
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)]
    mounted = subprocess.run(command, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_bin_export_on_a_real_full_disk_keeps_the_previous_weights(tiny_disk: Path) -> None:
    old = _weights(1)
    folder = tiny_disk / "export"
    _bin_export(old, folder, "single")  # about 3 KiB
    big = {name: torch.randn(64, 64) for name in old}  # about 48 KiB: with the old file, more than the disk
    big["extra"] = torch.randn(64, 64)
    with pytest.raises((OSError, RuntimeError)):  # torch's zip writer reports a short write as RuntimeError
        _bin_export(big, folder, "single")
    assert _which(_load_with_accelerate(folder), old, big) == "old"
