"""SIGKILL a checkpoint save at every file-system step, once and twice in a row; it must always load.

The sweep runs in one fresh interpreter (this file run as a script) that forks a writer per crash
point. In the writer, ``os.rename``, ``os.replace``, ``os.unlink``, ``os.rmdir``, ``os.mkdir`` and
``os.fsync`` count their calls and the process kills itself (SIGKILL, no clean-up runs) just before
the k-th one. A dry run counts the steps of one save first, so every step is a crash point. After each
crash the parent checks that the checkpoint path loads and holds one of the versions written, whole;
after two crashes in a row (the second save hitting every step of its own), the same; then a clean
save must clean every left-over and load the new version.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_HOOKED = ("rename", "replace", "unlink", "rmdir", "mkdir", "fsync")


def _state(version: int) -> tuple[dict, dict]:
    import torch

    shared = {"version": version, "w": torch.full((300,), float(version)), "b": torch.arange(7) + version}
    per_rank = {"rng": torch.full((5,), version, dtype=torch.uint8)}
    return shared, per_rank


def _save(path: Path, version: int) -> None:
    from fabricx.checkpoint.format import write_checkpoint

    shared, per_rank = _state(version)
    write_checkpoint(path, shared, per_rank)


def _count_steps(path: Path, version: int) -> int:
    calls = [0]
    originals = {name: getattr(os, name) for name in _HOOKED}

    def counting(name: str):
        def hooked(*args, **kwargs):
            calls[0] += 1
            return originals[name](*args, **kwargs)

        return hooked

    for name in _HOOKED:
        setattr(os, name, counting(name))
    try:
        _save(path, version)
    finally:
        for name, original in originals.items():
            setattr(os, name, original)
    return calls[0]


def _crash_at(path: Path, version: int, step: int) -> bool:
    """Fork a writer that is SIGKILLed just before its ``step``-th hooked call; True if it was killed."""
    pid = os.fork()
    if pid == 0:  # the writer
        calls = [0]

        def killing(original):
            def hooked(*args, **kwargs):
                calls[0] += 1
                if calls[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                return original(*args, **kwargs)

            return hooked

        for name in _HOOKED:
            setattr(os, name, killing(getattr(os, name)))
        try:
            _save(path, version)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _loaded_version(path: Path) -> int:
    import torch

    from fabricx.checkpoint.format import read_checkpoint

    loaded = read_checkpoint(path)
    version = loaded.shared["version"]
    shared, per_rank = _state(version)
    assert torch.equal(loaded.shared["w"], shared["w"]) and torch.equal(loaded.shared["b"], shared["b"])
    assert loaded.per_rank is not None and torch.equal(loaded.per_rank["rng"], per_rank["rng"])
    return version


def _signature(directory: Path) -> tuple:
    """What is on disk, with the random tokens of left-over names taken out."""
    from fabricx.checkpoint.atomic import list_files
    from fabricx.checkpoint.format import is_complete

    def strip(name: str) -> str:
        return name.split("-")[0] if "." in name else name

    return tuple(
        sorted((strip(child.name), is_complete(child), tuple(list_files(child))) for child in directory.iterdir())
    )


def _sweep(root: Path) -> dict:
    import torch

    from fabricx.checkpoint.manager import CheckpointManager

    torch.set_num_threads(1)
    probe = root / "probe" / "ckpt"
    _save(probe, 0)
    steps = _count_steps(probe, 1)  # replacing an existing checkpoint: the longest path
    report: dict = {"steps": steps, "single": {}, "double": {}, "killed": 0, "cleaned": True}
    base = root / "base"
    _save(base / "ckpt", 0)
    seen: set = set()
    for first in range(1, steps + 1):
        work = root / f"single_{first}"
        shutil.copytree(base, work)
        report["killed"] += _crash_at(work / "ckpt", 1, first)
        report["single"][first] = _loaded_version(work / "ckpt")
        # A second crashed save at every step of its own, on a copy of what the first crash left (once
        # per distinct state a first crash can leave: the same files under other random names are one).
        signature = _signature(work)
        if signature in seen:
            shutil.rmtree(work)
            continue
        seen.add(signature)
        report["states"] = len(seen)
        for second in range(1, steps + 1):
            again = root / f"double_{first}_{second}"
            shutil.copytree(work, again)
            report["killed"] += _crash_at(again / "ckpt", 2, second)
            report["double"][f"{first},{second}"] = _loaded_version(again / "ckpt")
            _save(again / "ckpt", 3)  # a clean save afterwards recovers and leaves nothing behind
            report["cleaned"] &= sorted(p.name for p in again.iterdir()) == ["ckpt"] and _loaded_version(
                again / "ckpt"
            ) == 3
            shutil.rmtree(again)
        shutil.rmtree(work)
    # The same through a manager: list_complete() lists only what loads, whatever the crash left.
    manager = CheckpointManager(root / "project")
    _save(manager.next_path(), 0)
    listed_ok, previous = True, 0
    for step in range(1, steps + 1):
        _crash_at(manager.path_for(0), step + 10, step)
        listed = manager.list_complete()
        # A kill after the commit leaves the new version; the next sweep step then starts from that one.
        loaded = _loaded_version(listed[0]) if listed == [manager.path_for(0)] else None
        listed_ok &= loaded in (previous, step + 10)
        previous = loaded if loaded is not None else previous
    report["manager_listed_ok"] = listed_ok
    return report


@pytest.mark.timeout(300)
def test_sigkill_at_every_step_of_one_and_two_consecutive_saves(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    steps = report["steps"]
    assert steps >= 8, report  # renames, fsyncs, the swap and the deletion of the old copy
    states = report["states"]
    assert 4 <= states < steps, report  # before/after the swap, mid-deletion, ...: each swept again
    assert report["killed"] >= steps + states * (steps - 3), "writers were not killed where they should have been"
    assert set(report["single"].values()) == {0, 1}  # early crashes keep the old, late ones show the new
    assert set(report["double"].values()) <= {0, 1, 2} and 2 in report["double"].values()
    assert report["cleaned"], "a clean save after two crashes left files behind or did not load"
    assert report["manager_listed_ok"]


def test_two_crashes_from_the_issue_load_the_complete_copy(tmp_path: Path) -> None:
    """Kill 1 while the swapped-out copy is being deleted, kill 2 between the two renames (issue 19)."""
    from fabricx.checkpoint import atomic
    from fabricx.checkpoint.format import is_complete, read_checkpoint, write_checkpoint

    path = tmp_path / "ckpt"
    write_checkpoint(path, {"version": 0}, None)
    write_checkpoint(path, {"version": 1}, None)
    # What crash 1 leaves: a half-deleted older copy (its meta.json survived, a data file did not).
    half = tmp_path / "ckpt.old-aaaa"
    shutil.copytree(path, half)
    (half / "shared.json").unlink()
    os.utime(half, (2e9, 2e9))  # newest by mtime, which must not matter
    # What crash 2 leaves: the committed copy swapped out, the new one not yet renamed in.
    os.rename(path, tmp_path / "ckpt.old-bbbb")
    (tmp_path / "ckpt.tmp-cccc").mkdir()
    assert read_checkpoint(path).shared["version"] == 1
    assert not is_complete(half) and is_complete(tmp_path / "ckpt.old-bbbb")
    assert atomic.recover_directory(path, is_complete) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(json.dumps(_sweep(Path(sys.argv[1]))))
