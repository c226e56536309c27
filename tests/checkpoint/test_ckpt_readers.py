"""A reader racing a writer: one process replaces a checkpoint over and over while this one loads it in a
loop. Every load must be one committed save (its step, its tensors and its RNG state agree) or a clear
CheckpointError; never files of two saves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fabricx.checkpoint.format import read_checkpoint
from fabricx.utilities.exceptions import CheckpointError

WRITER = textwrap.dedent(
    """
    import sys, torch
    from fabricx import Fabric
    path, saves, ready, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    fabric = Fabric(accelerator="cpu")
    for step in range(1, saves + 1):
        torch.manual_seed(step)  # the RNG state saved on rank 0 tells the step too
        fabric.save(path, {"step": step, "w": torch.full((4096,), float(step)), "b": torch.full((64,), -float(step))})
        if step == 1:
            open(ready, "w").close()
    open(done, "w").close()
    """
)


def _expected_rng(steps: int) -> dict[int, torch.Tensor]:
    states = {}
    for step in range(1, steps + 1):
        torch.manual_seed(step)
        states[step] = torch.get_rng_state()
    return states


def _classify(loaded: Any, rng: dict[int, torch.Tensor]) -> str:
    step = loaded.shared["step"]
    tensors_agree = bool((loaded.shared["w"] == step).all()) and bool((loaded.shared["b"] == -step).all())
    state = (loaded.per_rank or {}).get("__fabricx_rng__", {}).get("torch")
    rng_agrees = state is not None and step in rng and torch.equal(state, rng[step])
    return "ok" if tensors_agree and rng_agrees else "mixed"


def _soak(tmp_path: Path, saves: int) -> dict[str, Any]:
    path, ready, done = tmp_path / "ckpt", tmp_path / "ready", tmp_path / "done"
    rng = _expected_rng(saves)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(saves), str(ready), str(done)],
                              stderr=subprocess.PIPE, text=True, env=env)
    counts: dict[str, Any] = {"ok": 0, "mixed": 0, "error": 0, "errors": set(), "steps": set()}
    deadline = time.time() + 600
    while not ready.exists() and writer.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    while not done.exists() and writer.poll() is None and time.time() < deadline:
        try:
            loaded = read_checkpoint(path)
        except CheckpointError as error:
            counts["error"] += 1
            counts["errors"].add(str(error)[:160])
            continue
        kind = _classify(loaded, rng)
        counts[kind] += 1
        counts["steps"].add(loaded.shared["step"])
    _, stderr = writer.communicate(timeout=120)
    assert writer.returncode == 0, stderr[-2000:]
    return counts


def test_a_reader_racing_a_writer_never_loads_two_saves_at_once(tmp_path: Path) -> None:
    counts = _soak(tmp_path, saves=40)
    assert counts["mixed"] == 0, counts
    assert counts["ok"] > 0 and len(counts["steps"]) > 1, counts  # it really read while saves went on


@pytest.mark.slow
def test_reader_writer_soak_of_200_replacements(tmp_path: Path) -> None:
    counts = _soak(tmp_path, saves=200)
    print({key: (len(value) if isinstance(value, set) else value) for key, value in counts.items()})
    assert counts["mixed"] == 0, counts
    assert counts["ok"] > 0 and len(counts["steps"]) > 10, counts
