"""A ``layout="deepspeed"`` save is atomic: a crash at any point leaves the previous checkpoint or the new one, whole.

The DeepSpeed engine writes its files into a staging folder beside the target, which is swapped into place
(`fabricx.checkpoint.atomic.commit_directory`). The crash tests run in one fresh interpreter (this file run as
a script, one process, ``DS_ACCELERATOR=cpu``, ZeRO stage 2) that forks a writer per crash (`_crash_steps`):
one SIGKILLed when the commit starts, one between the swap's two renames, and a sweep killing it just before
each of its file-system steps. After each crash the parent loads the path: the weights, the ZeRO fp32 master
partition and ``step`` must be one version's, never a mix or nothing; then a clean save must leave the target
alone in Lightning's files and load the new version. An async save commits in the background.
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

ROOT = Path(__file__).resolve().parents[2]
#: What Lightning's DeepSpeedStrategy writes for one process under ZeRO-2, and nothing else.
_LIGHTNING_FILES = ["checkpoint", "latest", "zero_to_fp32.py", "zero_to_torch.py"]


def _training() -> tuple[Any, Any, Any]:
    import torch
    from torch import nn

    from fabricx import Fabric
    from fabricx.strategies.deepspeed import DeepSpeedStrategy

    fabric = Fabric(accelerator="cpu", devices=1, strategy=DeepSpeedStrategy(stage=2, timeout=60))
    net = nn.Linear(64, 32)
    model, optimizer = fabric.setup(net, torch.optim.Adam(net.parameters(), lr=0.1))
    return fabric, model, optimizer


def _engine(model: Any) -> Any:
    from deepspeed import DeepSpeedEngine

    return next(module for module in model.modules() if isinstance(module, DeepSpeedEngine))


def _set_version(model: Any, version: int) -> None:
    import torch

    engine = _engine(model)
    with torch.no_grad():
        for parameter in engine.module.parameters():
            parameter.fill_(float(version))
    engine.optimizer.refresh_fp32_params()  # the fp32 master partition follows


def _save(run: tuple[Any, Any, Any], path: Path, version: int) -> None:
    fabric, model, optimizer = run
    _set_version(model, version)
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": version}, layout="deepspeed")


def _loaded_version(run: tuple[Any, Any, Any], path: Path) -> int:
    """The version at ``path``; asserts that the weights, the fp32 partition and ``step`` are that one version's."""
    fabric, model, optimizer = run
    _set_version(model, -1)
    state = {"model": model, "optimizer": optimizer, "step": -1}
    assert fabric.load(path, state) == {}
    version = state["step"]
    engine = _engine(model)
    for name, value in engine.module.state_dict().items():
        assert bool((value == float(version)).all()), f"{name} is not version {version}'s: a mix of two saves"
    for part in engine.optimizer.single_partition_of_fp32_groups:
        assert bool((part == float(version)).all()), f"the fp32 partition is not version {version}'s"
    return version


def _recovers(run: tuple[Any, Any, Any], folder: Path, version: int) -> bool:
    """A clean save after a crash puts everything right: only the target is left, in Lightning's files."""
    _save(run, folder / "ckpt", version)
    return (
        sorted(p.name for p in folder.iterdir()) == ["ckpt"]
        and sorted(os.listdir(folder / "ckpt")) == _LIGHTNING_FILES
        and _loaded_version(run, folder / "ckpt") == version
    )


def _alone(arm: Any) -> Any:
    """``arm`` for a forked writer that runs its collectives alone: it shares the parent's gloo context, whose
    collectives hang after a fork, and with one process a barrier or an all-reduce changes nothing."""

    def armed() -> None:
        import torch.distributed

        torch.distributed.barrier = lambda *args, **kwargs: None
        torch.distributed.all_reduce = lambda *args, **kwargs: None
        arm()

    return armed


def _check_staged(names: list[str]) -> None:
    assert names == _LIGHTNING_FILES  # the engine wrote everything, only the swap is left


def _crashes(root: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    run = _training()
    report: dict[str, Any] = {}
    for name, arm in (("before_commit", kill_before_commit(_check_staged)), ("mid_swap", kill_mid_swap)):
        folder = root / name
        _save(run, folder / "ckpt", 1)
        report[f"{name}_killed"] = killed(lambda folder=folder: _save(run, folder / "ckpt", 2), _alone(arm))
        report[f"{name}_left"] = sorted(p.name.split("-")[0] for p in folder.iterdir())
        report[f"{name}_loaded"] = _loaded_version(run, folder / "ckpt")
        report[f"{name}_recovered"] = _recovers(run, folder, 3)
    fabric, model, optimizer = run
    _set_version(model, 4)
    handle = fabric.save(
        root / "async" / "ckpt",
        {"model": model, "optimizer": optimizer, "step": 4},
        async_save=True,
        layout="deepspeed",
    )
    report["async_handle"] = handle is not None
    if handle is not None:
        handle.wait()
    report["async_left"] = sorted(p.name for p in (root / "async").iterdir())
    report["async_loaded"] = _loaded_version(run, root / "async" / "ckpt")
    base = root / "base"
    _save(run, base / "ckpt", 0)
    _save(run, root / "probe" / "ckpt", 0)
    steps = count_steps(lambda: _save(run, root / "probe" / "ckpt", 1))  # replacing one: the longest path
    report.update(steps=steps, killed=0, loaded=[], recovered=True)
    for step in range(1, steps + 1):
        work = root / f"sweep_{step}"
        shutil.copytree(base, work)
        report["killed"] += killed(lambda work=work: _save(run, work / "ckpt", 1), _alone(kill_at_step(step)))
        report["loaded"].append(_loaded_version(run, work / "ckpt"))
        report["recovered"] &= _recovers(run, work, 2)
        shutil.rmtree(work)
    return report


@pytest.mark.slow  # a real engine in a fresh process and a sweep of forked saves: about a minute
@pytest.mark.deepspeed
@pytest.mark.timeout(400)
def test_a_killed_deepspeed_save_leaves_the_previous_checkpoint_or_the_new_one(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    from fabricx.environments.local import find_free_port

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **{"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"},
        "MASTER_PORT": str(find_free_port()),
        "DS_ACCELERATOR": "cpu",
    }
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=380, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    # Killed with every engine file written but not committed: the old checkpoint, and the staging folder
    # beside it, which no reader takes and the next save removes.
    assert report["before_commit_killed"]
    assert report["before_commit_left"] == ["ckpt", "ckpt.tmp"]
    assert report["before_commit_loaded"] == 1
    assert report["before_commit_recovered"]
    # Killed between the swap's renames: only the moved-aside old copy is there, and it loads.
    assert report["mid_swap_killed"]
    assert report["mid_swap_left"] == ["ckpt.old", "ckpt.tmp"]
    assert report["mid_swap_loaded"] == 1
    assert report["mid_swap_recovered"]
    # In the background: the engine's files are written before save() returns, the commit after.
    assert report["async_handle"] and report["async_left"] == ["ckpt"] and report["async_loaded"] == 4
    # Killed before any step of its own: always one whole version, the old one until the swap.
    steps = report["steps"]
    assert steps >= 8, report  # the engine's folders, the staging folder, fsyncs, the swap, the removal
    assert report["killed"] == steps, "writers were not killed where they should have been"
    assert set(report["loaded"]) == {0, 1}, report
    assert report["loaded"] == sorted(report["loaded"]), report  # old until the swap, new from then on
    assert report["recovered"], "a clean save after a crash left files behind or did not load"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(_crashes(Path(sys.argv[1]))))
