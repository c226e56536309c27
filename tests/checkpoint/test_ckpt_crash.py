"""A process writing checkpoints is killed with SIGKILL at random moments; what is on disk must load.

One helper process imports torch once and forks a writer per trial (forking is cheap; starting Python
with torch twenty times is not). The test kills each writer at a random moment and then checks that
the newest complete checkpoint loads fully and equals a state that was written.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager

STATE_SOURCE = textwrap.dedent(
    """
    import numpy as np
    import torch

    def make_state(step):
        shared = {
            "step": step,
            "model": {"w": torch.full((60_000,), float(step)), "b": torch.arange(1000.0) * step},
            "optimizer": {
                "state": {0: {"exp_avg": torch.full((30_000,), step / 3), "step": torch.tensor(float(step))}},
                "param_groups": [{"lr": 0.1 * step, "betas": (0.9, 0.99), "params": [0]}],
            },
        }
        per_rank = {"rng": torch.full((5000,), step % 256, dtype=torch.uint8), "np": np.arange(500) + step}
        return shared, per_rank
    """
)

WRITER_SOURCE = STATE_SOURCE + textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from fabricx.checkpoint import CheckpointManager, write_checkpoint

    def write_forever(project):
        torch.set_num_threads(1)
        manager = CheckpointManager(project, total_limit=2)
        step = 0
        while True:
            shared, per_rank = make_state(step)
            write_checkpoint(manager.next_path(), shared, per_rank)
            manager.apply_retention()
            write_checkpoint(Path(project) / "fixed", shared, per_rank)  # overwritten in place: a swap
            step += 1

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(line.strip())
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, flush=True)
    """
)

namespace: dict = {}
exec(STATE_SOURCE, namespace)
make_state = namespace["make_state"]


def _assert_equal_state(loaded, expected, where):
    if isinstance(expected, dict):
        assert isinstance(loaded, dict) and list(loaded) == list(expected), where
        for key in expected:
            _assert_equal_state(loaded[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(loaded) is type(expected) and len(loaded) == len(expected), where
        for i, (a, b) in enumerate(zip(loaded, expected, strict=True)):
            _assert_equal_state(a, b, f"{where}[{i}]")
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(loaded, expected), where
    elif type(expected).__module__ == "numpy":
        assert (loaded == expected).all(), where
    else:
        assert loaded == expected, where


def _check_loads(path):
    loaded = read_checkpoint(path, rank=0)
    step = loaded.shared["step"]
    shared, per_rank = make_state(step)
    _assert_equal_state(loaded.shared, shared, "shared")
    _assert_equal_state(loaded.per_rank, per_rank, "per_rank")
    return step


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the writer is forked from a helper process")
def test_sigkill_at_random_moments_leaves_a_loadable_checkpoint(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    helper = subprocess.Popen(
        [sys.executable, "-c", WRITER_SOURCE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    rng = random.Random(1234)
    with_checkpoint = 0
    try:
        for trial in range(24):
            project = tmp_path / f"trial{trial}"
            helper.stdin.write(f"{project}\n")
            helper.stdin.flush()
            pid = int(helper.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.4))
            os.kill(pid, signal.SIGKILL)
            status = int(helper.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "writer died on its own"

            manager = CheckpointManager(project, total_limit=2)
            latest = manager.latest()
            if latest is None:
                continue
            with_checkpoint += 1
            step = _check_loads(latest)
            assert len(manager.list_complete()) <= 3  # the kill may land between commit and retention
            if step >= 1:  # the in-place checkpoint was committed at least once before this step
                assert _check_loads(project / "fixed") >= step - 1
            indexes = [int(p.name.split("_")[1].split(".")[0]) for p in manager.directory.iterdir()]
            assert int(manager.next_path().name.split("_")[1]) == max(indexes) + 1
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)
    assert with_checkpoint >= 12, f"only {with_checkpoint} of 24 writers lived long enough to commit"
