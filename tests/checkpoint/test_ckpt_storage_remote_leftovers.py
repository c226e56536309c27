"""On a real S3 server (moto): what a save killed during the first save of a name leaves under its version
prefix is removed by later saves of the run into the same parent prefix, once older than ``stale_after``,
a few names per save (a bounded number of requests), never a save still uploading nor what fabricx did not
write."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from _s3_server import S3Server

from fabricx import Fabric
from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.remote_leftovers import next_names
from fabricx.checkpoint.storage import FsspecCheckpointIO

# A first save of its URL, held (then killed by the test) right after its first object is uploaded.
KILLED_SAVER = textwrap.dedent(
    """
    import sys, time
    import s3fs, torch
    from fabricx import Fabric
    from fabricx.checkpoint.storage import FsspecCheckpointIO

    url, ready = sys.argv[1:3]
    upload = s3fs.S3FileSystem._put_file

    async def held(self, lpath, rpath, **kwargs):
        await upload(self, lpath, rpath, **kwargs)
        with open(ready, "w") as handle:
            handle.write(rpath)
        time.sleep(3600)

    s3fs.S3FileSystem._put_file = held
    Fabric(accelerator="cpu", plugins=[FsspecCheckpointIO()]).save(url, {"w": torch.ones(64), "step": 1})
    """
)


def _fs(s3_server: S3Server):
    import fsspec

    return fsspec.filesystem("s3", **s3_server.storage_options)


def _keys(s3_server: S3Server, prefix: str) -> list[str]:
    fs = _fs(s3_server)
    fs.invalidate_cache()
    return sorted(path[len(prefix.removeprefix("s3://")) + 1 :] for path in fs.find(prefix))


def _save(io: FsspecCheckpointIO, url: str, step: int) -> None:
    Fabric(accelerator="cpu", plugins=[io]).save(url, {"w": torch.full((4,), float(step)), "step": step})


@contextmanager
def _requests() -> Iterator[list[str]]:
    """The request lines the S3 server logs while the block runs ("PUT /bucket/key HTTP/1.1", ...)."""
    seen: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("werkzeug")
    handler, level, propagate = _Collect(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def test_a_killed_first_save_is_removed_by_later_saves_once_stale(s3_server: S3Server, tmp_path: Path) -> None:
    run = s3_server.url("killed-first") + "/run"
    ready = tmp_path / "ready"
    env = {**os.environ, **s3_server.env, "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen([sys.executable, "-c", KILLED_SAVER, f"{run}/step_1", str(ready)],
                           stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 240
        while not (ready.exists() and ready.stat().st_size):
            assert job.poll() is None, job.stderr.read()[-2000:] if job.stderr else ""
            assert time.time() < deadline, "the save did not reach its first upload"
            time.sleep(0.05)
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(timeout=60)
    killed = _keys(s3_server, run)
    assert len(killed) == 1 and killed[0].startswith("step_1/v-"), killed  # uploaded, never committed

    # Fresh (younger than the default hour): a later save keeps it, it may be a neighbour's running save.
    _save(FsspecCheckpointIO(storage_options=s3_server.storage_options), f"{run}/step_2", 2)
    assert killed[0] in _keys(s3_server, run)

    io = FsspecCheckpointIO(storage_options=s3_server.storage_options, stale_after=0)
    _save(io, f"{run}/step_3", 3)
    left = _keys(s3_server, run)
    assert not [key for key in left if key.startswith("step_1/")], left
    assert {key.split("/")[0] for key in left} == {"step_2", "step_3"}
    assert read_checkpoint(f"{run}/step_2", io=io).shared["step"] == 2
    assert read_checkpoint(f"{run}/step_3", io=io).shared["step"] == 3


def test_a_save_still_uploading_in_this_process_is_never_removed(s3_server: S3Server) -> None:
    run = s3_server.url("in-flight") + "/run"
    # stale_after=0: anything not newer than the marker of the save that examines it counts as old.
    writer = FsspecCheckpointIO(storage_options=s3_server.storage_options, stale_after=0)
    staging = writer.stage(f"{run}/step_1", "uploading")
    (staging / "rank_0.bin").write_bytes(b"x" * 100)
    writer.finish_rank(staging, f"{run}/step_1", 0)  # uploaded; the commit comes later
    _save(writer, f"{run}/step_2", 2)  # a save of the same process meanwhile (an asynchronous one's case)
    assert "step_1/v-uploading/rank_0.bin" in _keys(s3_server, run)
    writer.commit(staging, f"{run}/step_1")
    assert writer.committed_version(f"{run}/step_1") == "v-uploading"

    # A re-save of step_1 killed after its upload (its I/O object gone): removed beside the committed version.
    fs = _fs(s3_server)
    fs.pipe_file(f"{run}/step_1/v-killedresave/rank_0.bin", b"y")
    _save(FsspecCheckpointIO(storage_options=s3_server.storage_options, stale_after=0), f"{run}/step_3", 3)
    assert [k for k in _keys(s3_server, run) if k.startswith("step_1/")] == [
        "step_1/COMMIT", "step_1/v-uploading/rank_0.bin"
    ]


def test_objects_fabricx_did_not_write_are_never_touched(s3_server: S3Server) -> None:
    run = s3_server.url("foreign") + "/run"
    foreign = {
        "notes.txt": b"a plain object beside the checkpoints",
        "data/train.csv": b"a folder of another tool",
        "mixed/v-abc/x": b"a version-like prefix beside ...",
        "mixed/readme": b"... something that is not one",
        "plain/v-abc": b"an object (not a prefix) named like a version",
        "badname/v-a.b/x": b"not a version name",
        "damaged/COMMIT": b"not a commit marker",
        "damaged/v-old/x": b"a version beside a damaged marker",
    }
    fs = _fs(s3_server)
    fs.pipe({f"{run}/{key}": value for key, value in foreign.items()})
    fs.pipe_file(f"{run}/dead/v-abc/rank_0.bin", b"killed")  # the control: a dead save's version
    io = FsspecCheckpointIO(storage_options=s3_server.storage_options, stale_after=0)
    for step in range(3):  # 9 names, 4 examined per save: every one is examined
        _save(io, f"{run}/step_{step}", step)
    left = _keys(s3_server, run)
    assert "dead/v-abc/rank_0.bin" not in left
    assert sorted(key for key in left if not key.startswith("step_")) == sorted(foreign)
    for key, value in foreign.items():
        assert fs.cat_file(f"{run}/{key}") == value


def test_each_save_examines_a_bounded_number_of_names_and_goes_on_where_the_last_stopped(
    s3_server: S3Server,
) -> None:
    run = s3_server.url("bounded") + "/run"
    fs = _fs(s3_server)
    fs.pipe({f"{run}/dead_{i:02}/v-killed{i}/rank_0.bin": b"x" for i in range(50)})
    fabric = Fabric(accelerator="cpu", plugins=[FsspecCheckpointIO(s3_server.storage_options, stale_after=0)])
    counts, removed, dead = [], [], {f"dead_{i:02}" for i in range(50)}
    for step in range(3):
        with _requests() as seen:
            fabric.save(f"{run}/step_{step}", {"w": torch.zeros(4), "step": step})
        marker = next(i for i, line in enumerate(seen) if f"PUT /{run[5:]}/step_{step}/COMMIT " in line)
        counts.append(len(seen) - marker - 1)  # what the commit does after its marker
        left = {key.split("/")[0] for key in _keys(s3_server, run) if key.startswith("dead_")}
        removed.append(sorted(dead - left))
        dead = left
    # 4 names per save, the next 4 each time (in name order, wrapping around): all 50 go within 13 saves.
    assert removed == [[f"dead_{i:02}" for i in range(first, first + 4)] for first in (0, 4, 8)], removed
    # After the marker: its time (1), the next names (<= 2 listings), per name a listing, a marker read and
    # a deletion (3 x 4), and the commit's own superseded versions (1 listing).
    assert max(counts) <= 1 + 2 + 3 * 4 + 1, counts
    print(f"requests after each commit's marker, 50 dead names beside it: {counts}")


def test_names_behind_many_plain_objects_are_reached_page_by_page(s3_server: S3Server) -> None:
    run = s3_server.url("pages")
    fs = _fs(s3_server)
    fs.pipe({f"{run}/a/v-x/f": b"1", f"{run}/z/v-x/f": b"1", **{f"{run}/m{i:02}": b"o" for i in range(12)}})
    after, seen = "", []
    with _requests() as requests:
        for _ in range(4):
            names, after = next_names(fs, run.removeprefix("s3://"), after=after, limit=4, skip="")
            seen.append(names)
    # Each page holds 5 entries; "z" lies behind 12 objects that are no checkpoint names.
    assert seen == [["a"], [], [], ["z", "a"]], seen
    assert len(requests) == 5, requests  # one listing per call, two where it wrapped around


def test_a_clean_up_that_fails_warns_and_the_save_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    run = f"memory://fabricx-tests/{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{run}/dead/v-abc/rank_0.bin", b"killed")

    def refused(self: MemoryFileSystem, path: object, recursive: bool = False, maxdepth: object = None) -> None:
        raise PermissionError(f"deleting {path} is not allowed")

    monkeypatch.setattr(MemoryFileSystem, "rm", refused)  # a store that lets this job write but not delete
    io = FsspecCheckpointIO(stale_after=0)
    with pytest.warns(UserWarning, match="Could not remove left-overs of killed saves beside .*PermissionError"):
        _save(io, f"{run}/step_1", 1)
    assert read_checkpoint(f"{run}/step_1", io=io).shared["step"] == 1
    assert fs.exists(f"{run}/dead/v-abc/rank_0.bin")


@pytest.mark.parametrize("stale_after", [-1, float("nan"), "1h", True])
def test_stale_after_must_be_seconds(stale_after: object) -> None:
    with pytest.raises(ValueError, match="stale_after must be a number of seconds >= 0"):
        FsspecCheckpointIO(stale_after=stale_after)  # type: ignore[arg-type]
