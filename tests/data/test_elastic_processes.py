"""Elastic resumption in real processes (gloo, started by ``fabricx run``): a DDP run, an FSDP2 run and
an Accelerate-adapter run on 2 ranks save in the middle of epoch 0 and go on uninterrupted; fresh runs
on 1, 3 and 4 ranks resume from those checkpoints with the global batch kept
(``setup_dataloaders(global_batch_size=12)``; for Accelerate, at 1 and 3 ranks, a per-process
``batch_size`` of 12 // ranks and ``load_state()``). Over the rest of the epoch every remaining sample is
seen exactly once across the new ranks, each step holds the samples the uninterrupted run's step held,
the next epoch is the uninterrupted one, and the final weights match it to float tolerance. All three
run one after the other in the same launches. Two loader workers per rank: DDP everywhere but the
resume at 4, FSDP2 only at the resume at 3, Accelerate everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _elastic_job import loader_workers

from fabricx.environments.local import find_free_port

JOB = Path(__file__).with_name("_elastic_job.py")
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(420)]
NEW_WORLDS = (1, 3, 4)
ACCELERATE_WORLDS = (1, 3)  # as _elastic_job.py


def _launch(phase: str, world: int, root: Path) -> None:
    env = dict(os.environ)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FABRICX_GLOBAL_SEED", "PL_GLOBAL_SEED"):
        env.pop(name, None)
    launcher = [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", str(world),
                "--main-port", str(find_free_port())]
    done = subprocess.run(
        [*launcher, str(JOB), phase, str(world), str(root / "ckpt"), str(root / "out")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, f"{phase} at {world} exited with {done.returncode}:\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("elastic")
    _launch("save", 2, root)
    for world in NEW_WORLDS:  # one launch at a time: side by side they starve each other's start-up
        _launch("resume", world, root)
    return root / "out"


def _records(out: Path, strategy: str, phase: str, world: int) -> list[dict]:
    return [torch.load(out / f"{strategy}-{phase}-{world}-rank{r}.pt", weights_only=False) for r in range(world)]


def _global_steps(records: list[dict]) -> list[tuple[int, int, list[int]]]:
    """(epoch, step, sorted samples of the step over all ranks); ranks take their steps in lockstep."""
    steps = []
    for parts in zip(*(record["steps"] for record in records), strict=True):
        assert len({(epoch, done) for epoch, done, _ in parts}) == 1  # every rank at the same step
        epoch, done, _ = parts[0]
        steps.append((epoch, done, sorted(i for _, _, ids in parts for i in ids)))
    return steps


_CASES = [(strategy, world) for strategy in ("ddp", "fsdp") for world in NEW_WORLDS]
_CASES += [("accelerate", world) for world in ACCELERATE_WORLDS]


@pytest.mark.parametrize(("strategy", "world"), _CASES)
def test_resume_at_another_number_of_ranks_deals_the_rest_and_matches_the_uninterrupted_run(runs, strategy, world):
    reference = _global_steps(_records(runs, strategy, "save", 2))
    assert [(epoch, done) for epoch, done, _ in reference] == [(0, 1), (0, 2), (0, 3), (0, 4)] + [
        (1, k) for k in range(1, 5)
    ]
    assert all(len(samples) == 12 for _, _, samples in reference)
    records = _records(runs, strategy, "resume", world)
    resumed = _global_steps(records)
    # The counters continue: the resumed run takes steps 2..4 of epoch 0, then the whole of epoch 1.
    assert resumed == reference[1:]
    rest = [i for epoch, _, samples in resumed if epoch == 0 for i in samples]
    assert sorted(rest) == sorted(set(range(48)) - set(reference[0][2]))  # each remaining sample once
    workers = 2 if strategy == "accelerate" else loader_workers(strategy, "resume", world)
    # 48 / 12 steps per epoch at every size; the worker count is the one asked for
    assert all(record["len"] == 4 and record["workers"] == workers for record in records)
    expected = _records(runs, strategy, "save", 2)[0]["weights"]
    for record in records:
        for name, value in expected.items():
            torch.testing.assert_close(record["weights"][name], value, rtol=1e-5, atol=1e-6)
