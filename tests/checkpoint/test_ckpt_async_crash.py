"""SIGKILL during asynchronous saves: the latest committed checkpoint must always load and be consistent.

A helper process imports torch once and forks one trainer per trial (see _async_crash_driver.py). All
trials share one project, so each trainer resumes from what the previous killed one left (its
uncommitted temporary copies included). The test kills each trainer right after an asynchronous save
returned, or a little later, so the kill lands while the background thread is writing. After every
kill, the newest checkpoint must load, hold one consistent step (every tensor equal to its ``step``
entry: the staged copy was written, not memory the trainer kept changing), and be no older than the
last save the trainer is known to have committed (the one before its last ``saving`` line).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager

DRIVER = Path(__file__).with_name("_async_crash_driver.py")


class _Helper:
    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        )

    def line(self) -> str:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        assert text, f"the helper process ended (exit code {self.process.poll()})"
        return text.strip()

    def trial(self, project: str, saves_before_kill: int, delay: float) -> tuple[list[int], int]:
        """Start a trainer on ``project``, kill it ``delay`` s after its n-th save returned; its saves and status."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{project}\n")
        self.process.stdin.flush()
        pid = int(self.line())
        started: list[int] = []
        while len(started) < saves_before_kill:
            text = self.line()
            assert text.startswith("saving "), text
            started.append(int(text.split()[1]))
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        while True:
            text = self.line()
            if text.startswith("status "):
                return started, int(text.split()[1])
            started.append(int(text.split()[1]))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _check_consistent(shared: dict[str, Any], where: str) -> int:
    """Every saved tensor equals the checkpoint's step (the trainer filled them so before saving)."""
    step = shared["step"]
    tensors = list(shared["model"].values())
    for entry in shared["optimizer"]["state"].values():
        tensors += [value for key, value in entry.items() if key != "step"]
    assert len(tensors) == 16 + 32, where
    for tensor in tensors:
        assert torch.all(tensor == float(step)), f"{where}: a tensor differs from step {step} (not the staged copy)"
    return step


def run_trials(project: str, trials: int, load_latest: Any, seed: int, env: dict[str, str]) -> dict[str, int]:
    """Run the kill trials on one project; return counts for the caller's assertions."""
    rng = random.Random(seed)
    helper = _Helper(env)
    confirmed = 0  # the newest step whose commit the trainer waited for before a later save
    uncommitted_kills = 0
    try:
        for trial in range(trials):
            saves = rng.randint(1, 3)
            delay = 0.0 if trial % 2 == 0 else rng.uniform(0.0, 0.05)
            started, status = helper.trial(project, saves, delay)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "trainer died on its own"
            if len(started) >= 2:
                confirmed = max(confirmed, started[-2])
            shared = load_latest(f"trial {trial}")
            if shared is None:
                assert confirmed == 0, f"trial {trial}: no checkpoint is loadable, step {confirmed} was committed"
                uncommitted_kills += 1
                continue
            step = _check_consistent(shared, f"trial {trial}")
            assert confirmed <= step <= started[-1] + 1, (trial, confirmed, step, started)
            uncommitted_kills += step < started[-1]
    finally:
        helper.close()
    return {"uncommitted_kills": uncommitted_kills, "last": confirmed}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the trainers are forked from a helper process")
def test_sigkill_during_background_writes_local(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "project", total_limit=2)

    def latest(where: str) -> dict[str, Any] | None:
        path = manager.latest()
        if path is None:
            return None
        complete = manager.list_complete()
        assert len(complete) <= 3, f"{where}: retention did not run ({[p.name for p in complete]})"
        return read_checkpoint(path).shared

    counts = run_trials(os.fspath(manager.project_dir), 20, latest, seed=19, env={})
    # The kills must really land during background writes, not only between saves.
    assert counts["uncommitted_kills"] >= 5, counts
    leftovers = [p.name for p in manager.directory.iterdir() if ".tmp-" in p.name]
    assert len(leftovers) <= 20, leftovers


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the trainers are forked from a helper process")
@pytest.mark.parametrize(
    "trials", [6, pytest.param(20, marks=pytest.mark.slow)], ids=["6-trials", "20-trials"]
)
def test_sigkill_during_background_writes_s3(s3_server: Any, trials: int) -> None:
    """The same trials against a real S3 server on loopback (6 in the fast suite, 20 with ``-m slow``)."""
    from fabricx.checkpoint.storage import FsspecCheckpointIO

    project = s3_server.url("async-crash")
    io = FsspecCheckpointIO(storage_options=s3_server.storage_options)
    manager = CheckpointManager(project, total_limit=2, io=io)

    def latest(where: str) -> dict[str, Any] | None:
        path = manager.latest()
        return None if path is None else read_checkpoint(path, io=io).shared

    options = {key: value for key, value in s3_server.storage_options.items() if key != "skip_instance_cache"}
    env = {**s3_server.env, "FABRICX_TEST_STORAGE_OPTIONS": json.dumps(options), "FABRICX_TEST_WIDTH": "128"}
    counts = run_trials(project, trials, latest, seed=20, env=env)
    assert counts["uncommitted_kills"] >= trials // 4, counts
