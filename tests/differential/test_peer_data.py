"""Data loading through fabricx equals plain PyTorch (one process) and Lightning Fabric (one process and DDP).

The same script (``_peer_data_job.py``) runs through each framework in fresh processes: a shuffled
loader with the global seed only, one with a user ``torch.Generator``, and a shuffled loader on 2 DDP
ranks. The model has dropout, so a loader drawing one random number more or less than torch's changes
the weights. Compared bit for bit: every batch's sample indices, the final weights, and the states of
torch's, NumPy's and Python's global generators at the end. fabricx also saves a checkpoint in the
middle of epoch 0; a fresh process resuming from it must finish exactly like the uninterrupted run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fabricx.environments.local import find_free_port

JOB = Path(__file__).with_name("_peer_data_job.py")
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]


def _launch(role: str, ckpt: Path, out: Path) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(find_free_port())}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FABRICX_GLOBAL_SEED", "PL_GLOBAL_SEED"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(JOB), role, str(ckpt), str(out)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{role} exited with {done.returncode}:\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def run_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("peer_data")
    # One launch at a time (on 2 busy cores, side-by-side launches starve each other's process-group start-up).
    for role in ("single", "lightning-ddp", "fabricx-ddp"):
        _launch(role, root / "ckpt", root / "out")
    return root


def _merged(out: Path) -> dict[str, dict]:
    merged: dict[str, dict] = {}
    for file in sorted(out.glob("*.pt")):
        merged.update(torch.load(file, weights_only=False))
    return merged


@pytest.fixture(scope="module")
def results(run_root: Path) -> dict[str, dict]:
    return _merged(run_root / "out")


@pytest.fixture(scope="module")
def resumed(run_root: Path) -> dict[str, dict]:
    """The runs above plus fresh processes resuming from the checkpoints the fabricx runs wrote mid-epoch."""
    for role in ("fabricx-resume", "fabricx-ddp-resume"):
        _launch(role, run_root / "ckpt", run_root / "out")
    return _merged(run_root / "out")


def _assert_same_run(expected: dict, got: dict, what: str) -> None:
    skip = got["skipped"]
    assert got["batches"] == expected["batches"][skip:], f"{what}: batches differ"
    assert expected["weights"].keys() == got["weights"].keys()
    for name, value in expected["weights"].items():
        assert torch.equal(value, got["weights"][name]), f"{what}: weight {name} differs"
    assert torch.equal(expected["rng"]["torch"], got["rng"]["torch"]), f"{what}: torch's generator differs"
    assert (expected["rng"]["numpy"] == got["rng"]["numpy"]).all(), f"{what}: NumPy's generator differs"
    assert expected["rng"]["python"] == got["rng"]["python"], f"{what}: Python's generator differs"


@pytest.mark.parametrize("mode", ["global", "generator"])
def test_one_process_shuffled_equals_plain_pytorch_and_lightning(results, mode):
    plain = results[f"plain-{mode}"]
    assert len(plain["batches"]) == 16 and sorted(i for batch in plain["batches"][:8] for i in batch) == list(range(24))
    _assert_same_run(plain, results[f"lightning-{mode}"], f"Lightning Fabric ({mode}) vs plain PyTorch")
    _assert_same_run(plain, results[f"fabricx-{mode}"], f"fabricx ({mode}) vs plain PyTorch")


# The resumes are slow-suite only: the fast suite's resume matrix sample resumes one-process and DDP Fabric
# runs from mid-epoch checkpoints in fresh processes (tests/resume/matrix), bit for bit, on every run.
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["global", "generator"])
def test_one_process_resume_in_a_fresh_process_equals_uninterrupted(resumed, mode):
    run = resumed[f"fabricx-resume-{mode}"]
    assert run["skipped"] == 3  # it continued in the middle of epoch 0
    _assert_same_run(resumed[f"plain-{mode}"], run, f"fabricx resumed ({mode}) vs plain PyTorch")


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_two_ranks_each_rank_gets_what_lightning_gives_it(results, rank):
    lightning = results[f"lightning-ddp-rank{rank}"]
    other = results[f"lightning-ddp-rank{1 - rank}"]
    # Lightning's DistributedSampler: disjoint halves of one permutation, a new one each epoch.
    assert sorted(i for batch in lightning["batches"][:4] + other["batches"][:4] for i in batch) == list(range(24))
    assert lightning["batches"][:4] != lightning["batches"][4:]
    _assert_same_run(lightning, results[f"fabricx-ddp-rank{rank}"], f"fabricx DDP rank {rank} vs Lightning")


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_two_ranks_resume_exactly(resumed, rank):
    run = resumed[f"fabricx-ddp-resume-rank{rank}"]
    assert run["skipped"] == 3
    _assert_same_run(resumed[f"lightning-ddp-rank{rank}"], run, f"fabricx DDP rank {rank} resumed vs Lightning")
