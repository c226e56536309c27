"""A ``layout="dcp"`` save is atomic: a crash at any point leaves the previous checkpoint or the new one, whole.

The shards and ``meta.pt`` are written into a staging folder beside the target and swapped into place
(`fabricx.checkpoint.atomic.commit_directory`). The crash tests run in one fresh interpreter (this file run
as a script) that forks a writer per crash: one SIGKILLed after its shards were written and before the
commit, one between the swap's two renames, and a sweep killing it just before each of its file-system
steps (``os.rename``, ``os.replace``, ``os.unlink``, ``os.rmdir``, ``os.mkdir``, ``os.fsync``). After each
crash the parent loads the path: the model and ``step`` must be one version's, never a mix or nothing;
then a clean save must leave the target alone beside nothing and load the new version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _crash_steps import count_steps, kill_at_step, kill_before_commit, kill_mid_swap, killed

#: What Lightning's FSDP / ModelParallel strategies write for one process, and nothing else.
_LIGHTNING_FILES = [".metadata", "__0_0.distcp", "meta.pt"]


def _fabric() -> Any:
    from fabricx import Fabric

    return Fabric(accelerator="cpu", devices=1)


def _state(fabric: Any, version: int) -> dict[str, Any]:
    import torch
    from torch import nn

    model = nn.Linear(64, 32)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float(version))
    return {"model": fabric.setup(model), "step": version}


def _save(fabric: Any, path: Path, version: int) -> None:
    fabric.save(path, _state(fabric, version), layout="dcp")


def _loaded_version(fabric: Any, path: Path) -> int:
    """The version at ``path``; asserts that the model's every value and ``step`` are that one version's."""
    state = _state(fabric, -1)
    assert fabric.load(path, state) == {}
    version = state["step"]
    for name, value in state["model"].state_dict().items():
        assert bool((value == float(version)).all()), f"{name} is not version {version}'s: a mix of two saves"
    return version


def _killed(fabric: Any, path: Path, version: int, arm: Any) -> bool:
    """Fork a writer whose save ``arm()`` (called in the writer) makes it SIGKILL itself; True if it was killed."""
    return killed(lambda: _save(fabric, path, version), arm)


def _check_staged(names: list[str]) -> None:
    assert names == _LIGHTNING_FILES  # the shards were written, only the swap is left


def _recovers(fabric: Any, folder: Path, version: int) -> bool:
    """A clean save after a crash puts everything right: only the target is left, in Lightning's files."""
    _save(fabric, folder / "ckpt", version)
    return (
        sorted(p.name for p in folder.iterdir()) == ["ckpt"]
        and sorted(os.listdir(folder / "ckpt")) == _LIGHTNING_FILES
        and _loaded_version(fabric, folder / "ckpt") == version
    )


def _crashes(root: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    fabric = _fabric()
    report: dict[str, Any] = {}
    for name, arm in (("before_commit", kill_before_commit(_check_staged)), ("mid_swap", kill_mid_swap)):
        folder = root / name
        _save(fabric, folder / "ckpt", 1)
        report[f"{name}_killed"] = _killed(fabric, folder / "ckpt", 2, arm)
        report[f"{name}_left"] = sorted(p.name.split("-")[0] for p in folder.iterdir())
        report[f"{name}_loaded"] = _loaded_version(fabric, folder / "ckpt")
        report[f"{name}_recovered"] = _recovers(fabric, folder, 3)
    base = root / "base"
    _save(fabric, base / "ckpt", 0)
    _save(fabric, root / "probe" / "ckpt", 0)
    steps = count_steps(lambda: _save(fabric, root / "probe" / "ckpt", 1))  # replacing one: the longest path
    report.update(steps=steps, killed=0, loaded=[], recovered=True)
    for step in range(1, steps + 1):
        work = root / f"sweep_{step}"
        shutil.copytree(base, work)
        report["killed"] += _killed(fabric, work / "ckpt", 1, kill_at_step(step))
        report["loaded"].append(_loaded_version(fabric, work / "ckpt"))
        report["recovered"] &= _recovers(fabric, work, 2)
        shutil.rmtree(work)
    return report


@pytest.mark.timeout(300)
def test_a_killed_dcp_save_leaves_the_previous_checkpoint_or_the_new_one(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    # Killed with every shard and meta.pt written but not committed: the old checkpoint, and the staging
    # folder beside it, which no reader takes and the next save removes.
    assert report["before_commit_killed"]
    assert report["before_commit_left"] == ["ckpt", "ckpt.tmp"]
    assert report["before_commit_loaded"] == 1
    assert report["before_commit_recovered"]
    # Killed between the swap's renames: only the moved-aside old copy is there, and it loads.
    assert report["mid_swap_killed"]
    assert report["mid_swap_left"] == ["ckpt.old", "ckpt.tmp"]
    assert report["mid_swap_loaded"] == 1
    assert report["mid_swap_recovered"]
    # Killed before any step of its own: always one whole version, the old one until the swap.
    steps = report["steps"]
    assert steps >= 8, report  # DCP's own writes, the staging folder, fsyncs, the swap, the removal
    assert report["killed"] == steps, "writers were not killed where they should have been"
    assert set(report["loaded"]) == {0, 1}, report
    assert report["loaded"] == sorted(report["loaded"]), report  # old until the swap, new from then on
    assert report["recovered"], "a clean save after a crash left files behind or did not load"


def test_a_failed_commit_keeps_the_previous_checkpoint_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabricx.checkpoint import atomic
    from fabricx.utilities.exceptions import CheckpointError

    fabric = _fabric()
    path = tmp_path / "ckpt"
    _save(fabric, path, 1)
    assert sorted(os.listdir(path)) == _LIGHTNING_FILES

    def no_space(tmp: Any, target: Any) -> None:
        assert sorted(os.listdir(tmp)) == _LIGHTNING_FILES
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "commit_directory", no_space)
    with pytest.raises(CheckpointError, match="No space left on device.*is unchanged"):
        _save(fabric, path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # the staging folder is gone
    assert _loaded_version(fabric, path) == 1


def test_an_async_dcp_save_commits_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from fabricx.checkpoint import atomic

    fabric = _fabric()
    path = tmp_path / "ckpt"
    _save(fabric, path, 1)
    release, committing = threading.Event(), []
    original = atomic.commit_directory

    def held(tmp: Any, target: Any) -> None:  # the commit waits until the old checkpoint was checked
        committing.append(threading.current_thread() is not threading.main_thread())
        release.wait(60)
        original(tmp, target)

    monkeypatch.setattr(atomic, "commit_directory", held)
    handle = fabric.save(path, _state(fabric, 2), async_save=True, layout="dcp")
    assert handle is not None
    assert sorted(os.listdir(path)) == _LIGHTNING_FILES
    staging = [p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt.tmp-")]
    assert len(staging) == 1 and ".metadata" in os.listdir(tmp_path / staging[0])  # shards written already
    release.set()
    handle.wait()
    assert committing == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert _loaded_version(fabric, path) == 2


def test_a_dcp_save_refuses_to_replace_a_folder_of_other_files(tmp_path: Path) -> None:
    from fabricx.utilities.exceptions import CheckpointError

    fabric = _fabric()
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"a folder of other files \(notes.txt\)"):
        _save(fabric, folder, 1)
    assert sorted(os.listdir(folder)) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_a_folder_a_crashed_in_place_save_left_is_replaced(tmp_path: Path) -> None:
    """Shards without ``.metadata``: what a Lightning (or an older fabricx) save that died midway leaves."""
    fabric = _fabric()
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "__0_0.distcp").write_bytes(b"half")
    (path / "__1_0.distcp").write_bytes(b"from a larger run")
    _save(fabric, path, 4)
    assert sorted(os.listdir(path)) == _LIGHTNING_FILES
    assert _loaded_version(fabric, path) == 4


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(json.dumps(_crashes(Path(sys.argv[1]))))
