"""Checkpoint storage on fsspec URLs: a real S3-compatible server on loopback (moto + s3fs) and memory://."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

from fabricx.checkpoint.storage import COMMIT_MARKER, FsspecCheckpointIO, is_url, join_path
from fabricx.utilities.exceptions import CheckpointError


def _complete(directory: Path) -> bool:
    return (directory / "meta.json").is_file()


@pytest.fixture(params=["s3", "memory"])
def store(request: pytest.FixtureRequest) -> tuple[FsspecCheckpointIO, str]:
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        return FsspecCheckpointIO(storage_options=server.storage_options), server.url("storage")
    return FsspecCheckpointIO(), f"memory://fabricx-tests/{uuid.uuid4().hex}"


def _save(io: FsspecCheckpointIO, url: str, payload: str, commit: bool = True) -> Path:
    """The steps the checkpoint writer runs for one rank; ``commit=False`` stops before the marker."""
    token = uuid.uuid4().hex[:12]
    io.stage(url, token)
    staging = io.staging_dir(url, token)
    (staging / "rank_0.json").write_text(payload)
    (staging / "sub").mkdir(exist_ok=True)
    (staging / "sub" / "shard_0.bin").write_bytes(payload.encode() * 100)
    io.finish_rank(staging, url, 0)
    manifest = io.manifest(staging)
    (staging / "meta.json").write_text(json.dumps({"files": manifest}))
    if commit:
        io.commit(staging, url)
    return staging


def test_url_detection_and_joining() -> None:
    assert is_url("s3://bucket/x") and is_url("memory://x") and is_url("gs://b/c")
    assert not is_url("runs/ckpt") and not is_url("/abs/path") and not is_url("file:///tmp/x")
    assert not is_url(Path("s3:/bucket"))
    assert join_path("s3://bucket/run/", "checkpoints") == "s3://bucket/run/checkpoints"
    assert join_path("runs", "checkpoints") == Path("runs/checkpoints")


def test_commit_round_trip_and_manifest(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    assert io.resolve(url, _complete) is None and not io.is_committed(url)
    _save(io, url, "first")
    assert io.is_committed(url)
    local = io.resolve(url, _complete)
    assert local is not None and (local / "rank_0.json").read_text() == "first"
    assert (local / "sub" / "shard_0.bin").read_bytes() == b"first" * 100
    files = json.loads((local / "meta.json").read_text())["files"]
    assert files == {"rank_0.json": 5, "sub/shard_0.bin": 500}


def test_uncommitted_upload_is_invisible_and_previous_stays(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "old")
    fs, root = fsspec.core.url_to_fs(url, **io.storage_options)
    # A save that uploaded every file, meta.json included, but died before the marker moved.
    staging = _save(io, url, "new", commit=False)
    io._upload_new(staging)
    versions = [p for p in fs.ls(root, detail=False) if Path(p).name.startswith("v-")]
    assert len(versions) == 2
    local = io.resolve(url, _complete)
    assert local is not None and (local / "rank_0.json").read_text() == "old"
    # recover() keeps an upload of this process that is still in flight ...
    io.recover(url, _complete)
    fs.invalidate_cache()
    assert len([p for p in fs.ls(root, detail=False) if Path(p).name.startswith("v-")]) == 2
    # ... and drops what a crashed process left (a fresh object knows of no upload in flight).
    FsspecCheckpointIO(io.storage_options).recover(url, _complete)
    fs.invalidate_cache()
    assert len([p for p in fs.ls(root, detail=False) if Path(p).name.startswith("v-")]) == 1
    local = io.resolve(url, _complete)
    assert local is not None and (local / "rank_0.json").read_text() == "old"


def test_replacing_commits_atomically_and_drops_the_old_version(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "one")
    _save(io, url, "two")
    local = io.resolve(url, _complete)
    assert local is not None and (local / "rank_0.json").read_text() == "two"
    fs, root = fsspec.core.url_to_fs(url, **io.storage_options)
    fs.invalidate_cache()
    names = sorted(Path(p).name for p in fs.ls(root, detail=False))
    assert names[0] == COMMIT_MARKER and len(names) == 2 and names[1].startswith("v-")


def test_every_rank_uploads_its_own_files(s3_server) -> None:  # type: ignore[no-untyped-def]
    io = FsspecCheckpointIO(storage_options=s3_server.storage_options)
    url = s3_server.url("ranks")
    token = uuid.uuid4().hex[:12]
    io.stage(url, token)
    mine = io.staging_dir(url, token)
    other_io = FsspecCheckpointIO(storage_options=s3_server.storage_options)
    theirs = other_io.staging_dir(url, token)
    assert mine != theirs
    (mine / "rank_0.json").write_text("0")
    (theirs / "rank_1.json").write_text("1")
    other_io.finish_rank(theirs, url, 1)
    assert not theirs.exists()  # a non-zero rank's staging copy is gone once uploaded
    io.finish_rank(mine, url, 0)
    assert io.manifest(mine) == {"rank_0.json": 1, "rank_1.json": 1}
    (mine / "meta.json").write_text("{}")
    io.commit(mine, url)
    local = io.resolve(url, _complete)
    assert local is not None and sorted(p.name for p in local.iterdir()) == ["meta.json", "rank_0.json", "rank_1.json"]


def test_abort_leaves_the_previous_checkpoint(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "kept")
    staging = _save(io, url, "dropped", commit=False)
    io.abort(staging, url)
    assert not staging.exists()
    local = io.resolve(url, _complete)
    assert local is not None and (local / "rank_0.json").read_text() == "kept"


def test_remove_deletes_the_marker_first_then_everything(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "x")
    parent = url.rsplit("/", 1)[0]
    assert url.rsplit("/", 1)[1] in io.list_names(parent)
    io.remove(url)
    assert not io.is_committed(url) and io.resolve(url, _complete) is None
    assert url.rsplit("/", 1)[1] not in io.list_names(parent)
    assert io.list_names(f"{url}/nothing-here") == []


def test_damaged_or_escaping_marker_is_refused(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "x")
    fs, root = fsspec.core.url_to_fs(url, **io.storage_options)
    for payload in (b"not json", json.dumps({"format": "fabricx-commit", "version": "../../etc"}).encode()):
        fs.pipe_file(f"{root}/{COMMIT_MARKER}", payload)
        with pytest.raises(CheckpointError, match="commit marker .* is damaged"):
            io.resolve(url, _complete)
        assert not io.is_committed(url)


def test_incomplete_committed_copy_is_not_returned(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    _save(io, url, "x")
    assert io.resolve(url, lambda d: (d / "missing.json").is_file()) is None


def test_single_object_checkpoint(store: tuple[FsspecCheckpointIO, str]) -> None:
    io, url = store
    target = f"{url}/model.ckpt"
    io.write_file(target, lambda handle: handle.write(b"\x80payload"))
    local = io.resolve(target, _complete)
    assert local is not None and local.read_bytes() == b"\x80payload"


def test_missing_backend_names_the_package() -> None:
    with pytest.raises(CheckpointError, match="no usable fsspec implementation"):
        FsspecCheckpointIO().resolve("nosuchproto://bucket/x", _complete)


# ------------------------------------------------------------------------ through Fabric and the manager


def _fabric_state(store_io: FsspecCheckpointIO | None) -> tuple[Any, dict[str, Any]]:
    import torch
    from torch import nn

    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", plugins=[store_io] if store_io is not None else None)
    model = nn.Linear(16, 16)
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.ones(2, 16)).sum().backward()
    optimizer.step()
    return fabric, {"model": model, "optimizer": optimizer, "step": 5}


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_fabric_save_and_load_on_s3(s3_server: Any, async_save: bool) -> None:
    import torch

    store_io = FsspecCheckpointIO(storage_options=s3_server.storage_options)
    fabric, state = _fabric_state(store_io)
    url = s3_server.url("fabric")
    expected = {k: v.clone() for k, v in state["model"].state_dict().items()}
    handle = fabric.save(url, state, async_save=async_save)
    if handle is not None:
        handle.wait_staged()  # weights changed by hand (outside optimizer.step()) only after the copy
    with torch.no_grad():
        state["model"].weight.fill_(3.0)
    if handle is not None:
        handle.wait()
    state["step"] = 0
    fabric.load(url, state)
    assert state["step"] == 5
    assert all(torch.equal(state["model"].state_dict()[k], v) for k, v in expected.items())
    assert store_io.is_committed(url)
    # Overwriting keeps exactly one version, the new one.
    state["step"] = 6
    fabric.save(url, state)
    fs, root = fsspec.core.url_to_fs(url, **store_io.storage_options)
    fs.invalidate_cache()
    assert len([p for p in fs.ls(root, detail=False) if Path(p).name.startswith("v-")]) == 1
    assert fabric.load(url)["step"] == 6


def test_memory_url_without_a_plugin() -> None:
    fabric, state = _fabric_state(None)
    url = f"memory://fabricx-tests/{uuid.uuid4().hex}/ckpt"
    fabric.save(url, state)
    assert fabric.load(url)["step"] == 5
    with pytest.raises(CheckpointError, match="No committed checkpoint found at memory://"):
        fabric.load(url + "-missing")


def test_manager_on_s3_keeps_k_and_never_deletes_a_newer_uncommitted_one(s3_server: Any) -> None:
    from fabricx.checkpoint.manager import CheckpointManager

    store_io = FsspecCheckpointIO(storage_options=s3_server.storage_options)
    fabric, state = _fabric_state(store_io)
    project = s3_server.url("manager")
    manager = CheckpointManager(project, total_limit=2, io=store_io)
    assert manager.directory == f"{project}/checkpoints" and manager.latest() is None
    # A save that crashed before its commit marker, older than what follows: stale, removed by retention.
    _save(store_io, manager.path_for(0), "crashed", commit=False)
    for step in (1, 2, 3):
        state["step"] = step
        path = fabric.save_checkpoint(manager, state, async_save=step == 3)
    fabric.load_latest(manager, state)  # waits for the asynchronous one
    assert state["step"] == 3 and path == manager.path_for(3)
    assert [p.rsplit("/", 1)[1] for p in manager.list_complete()] == ["checkpoint_2", "checkpoint_3"]
    # An upload still under way (no marker yet) newer than the newest committed one is never deleted.
    _save(store_io, manager.path_for(4), "in flight", commit=False)
    manager.apply_retention()
    names = store_io.list_names(manager.directory)
    assert names == ["checkpoint_2", "checkpoint_3", "checkpoint_4"], names
    assert manager.latest() == manager.path_for(3) and manager.next_path() == manager.path_for(5)
