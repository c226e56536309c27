"""A job killed while saving to S3 (a real S3 server, moto) leaves its local staging copy and its
download folder behind; the next run removes them, and never those of a neighbour that is still running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _s3_server import S3Server
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.storage import FsspecCheckpointIO, remove_dead_local_copies

# Saves once, loads once (a download folder), then starts a second save whose rank file is held (by this
# script, not by fabricx) after the shared files are staged; reports its local folders and waits to be killed.
SAVER = textwrap.dedent(
    """
    import json, sys, time
    from torch import nn
    import fabricx.checkpoint.format as checkpoint_format
    from fabricx import Fabric
    from fabricx.checkpoint.storage import FsspecCheckpointIO

    url, staging, ready = sys.argv[1:4]
    io = FsspecCheckpointIO(staging_dir=staging)
    fabric = Fabric(accelerator="cpu", plugins=[io])
    model = fabric.setup_module(nn.Linear(512, 512))
    fabric.save(url, {"model": model, "step": 1})
    fabric.load(url)
    original = checkpoint_format.dump

    def held(state, directory, stem):
        if stem.startswith("rank_"):
            with open(ready, "w") as handle:
                json.dump([str(p) for p in [*io._staged, *io._downloads]], handle)
            time.sleep(3600)
        return original(state, directory, stem)

    checkpoint_format.dump = held
    fabric.save(url, {"model": model, "step": 2})
    """
)


def _size(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file())


def test_next_run_removes_a_killed_jobs_local_copies_but_not_a_live_neighbours(
    s3_server: S3Server, tmp_path: Path
) -> None:
    staging = tmp_path / "staging"
    env = {**os.environ, **s3_server.env, "OMP_NUM_THREADS": "1"}
    ready = {name: tmp_path / f"{name}.ready" for name in ("killed", "live")}
    jobs = {
        name: subprocess.Popen([sys.executable, "-c", SAVER, s3_server.url(name), str(staging), str(ready[name])],
                               stderr=subprocess.PIPE, text=True, env=env)
        for name in ("killed", "live")
    }
    try:
        deadline = time.time() + 240
        while not all(r.exists() and r.stat().st_size for r in ready.values()):
            for name, job in jobs.items():
                assert job.poll() is None, f"{name}: {job.stderr.read()[-2000:] if job.stderr else ''}"
            assert time.time() < deadline, "the savers did not reach their held write"
            time.sleep(0.05)
        time.sleep(0.2)  # the ready file is written whole before json.dump returns; let it land
        folders = {name: [Path(p) for p in json.loads(ready[name].read_text())] for name in ready}
        assert len(folders["killed"]) == 2 and all(p.is_dir() for p in folders["killed"]), folders
        assert {p.name.split("-")[1] for p in folders["killed"]} == {"staging", "download"}
        os.kill(jobs["killed"].pid, signal.SIGKILL)
        jobs["killed"].wait(timeout=60)
        leaked = _size(folders["killed"])
        assert leaked > 1_000_000  # the model was staged and downloaded

        # The next run: its first save to S3 cleans what dead runs left in the same local folder.
        io = FsspecCheckpointIO(storage_options=s3_server.storage_options, staging_dir=staging)
        fabric = Fabric(accelerator="cpu", plugins=[io])
        url = s3_server.url("next")
        fabric.save(url, {"model": fabric.setup_module(nn.Linear(4, 4)), "step": 3})
        assert read_checkpoint(url, io=io).shared["step"] == 3
        assert not any(p.exists() for p in folders["killed"]), [p for p in folders["killed"] if p.exists()]
        assert all(p.is_dir() for p in folders["live"]), "a running neighbour's copies were removed"
        print(f"killed job's local copies: {leaked} bytes before the next run, 0 after")
    finally:
        for job in jobs.values():
            if job.poll() is None:
                job.kill()
            job.wait(timeout=60)
    # Once the neighbour is gone too, its copies are dead ones as well.
    removed = remove_dead_local_copies(staging)
    assert sorted(removed) == sorted(folders["live"])
    left = [p for p in staging.iterdir() if p.name.startswith("fabricx-")]
    assert left == io._downloads, left  # only this (live) process's own download is left


@pytest.mark.parametrize("empty_age_s, removed", [(0.0, False), (3600.0, True)])
def test_an_empty_unlocked_copy_is_left_while_it_may_still_be_in_creation(
    tmp_path: Path, empty_age_s: float, removed: bool
) -> None:
    folder = tmp_path / "fabricx-staging-v-abc-xyz"
    folder.mkdir()
    if empty_age_s:
        os.utime(folder, (time.time() - empty_age_s, time.time() - empty_age_s))
    assert (folder in remove_dead_local_copies(tmp_path)) is removed
    assert folder.exists() is not removed
