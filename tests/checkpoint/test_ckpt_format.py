"""The checkpoint directory layout, single-file checkpoints, and refusal of damaged or unsafe files."""

from __future__ import annotations

import json
import os
import pickle
import threading

import numpy as np
import pytest
import torch

from fabricx.checkpoint.format import (
    FORMAT_VERSION,
    CheckpointWriter,
    is_checkpoint,
    read_checkpoint,
    write_checkpoint,
    write_single_file,
)
from fabricx.utilities.exceptions import CheckpointError


def _write_sample(path, **kwargs):
    shared = {"model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "lr": 0.1}
    per_rank = {"rng": torch.get_rng_state(), "np": np.random.get_state()}
    write_checkpoint(path, shared, per_rank, **kwargs)
    return shared, per_rank


def test_round_trip_layout_and_meta(tmp_path):
    path = tmp_path / "ckpt"
    shared, per_rank = _write_sample(path, extra_meta={"strategy": "single_device"})
    assert sorted(os.listdir(path)) == [
        "meta.json",
        "rank_0.json",
        "rank_0.safetensors",
        "shared.json",
        "shared.safetensors",
    ]
    assert os.listdir(tmp_path) == ["ckpt"]

    loaded = read_checkpoint(path)
    assert torch.equal(loaded.shared["model"]["w"], shared["model"]["w"])
    assert loaded.shared["step"] == 7 and loaded.shared["lr"] == 0.1
    assert torch.equal(loaded.per_rank["rng"], per_rank["rng"])
    assert loaded.meta["format_version"] == FORMAT_VERSION == 1
    assert loaded.meta["world_size"] == 1
    assert loaded.meta["shared_keys"] == ["model", "step", "lr"]
    assert loaded.meta["per_rank_keys"] == ["rng", "np"]
    assert loaded.meta["extra_meta"] == {"strategy": "single_device"}
    assert isinstance(loaded.meta["fabricx_version"], str) and loaded.meta["created"] > 0
    assert loaded.path == path and not loaded.legacy
    assert is_checkpoint(path)
    # A rank that has no file of its own gets None.
    assert read_checkpoint(path, rank=3).per_rank is None


def test_overwriting_a_checkpoint_replaces_it_whole(tmp_path):
    path = tmp_path / "ckpt"
    write_checkpoint(path, {"a": 1}, {"r": 1})
    write_checkpoint(path, {"b": 2}, None)
    loaded = read_checkpoint(path)
    assert loaded.shared == {"b": 2} and loaded.per_rank is None
    assert os.listdir(tmp_path) == ["ckpt"]


def test_writer_in_pieces_lets_a_strategy_add_files(tmp_path):
    path = tmp_path / "ckpt"
    writer = CheckpointWriter(path, token="step3")
    tmp = writer.begin()
    assert tmp == tmp_path / "ckpt.tmp-step3"
    (tmp / "model").mkdir()
    (tmp / "model" / "shard_0.distcp").write_bytes(b"sharded")
    writer.write_rank({"x": 1})
    assert not path.exists()
    writer.commit()
    assert (path / "model" / "shard_0.distcp").read_bytes() == b"sharded"
    loaded = read_checkpoint(path)
    assert loaded.shared == {} and loaded.per_rank == {"x": 1}


def test_writer_aborts_on_error_and_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    write_checkpoint(path, {"v": "old"}, None)
    with pytest.raises(CheckpointError, match=r"\['bad'\]"), CheckpointWriter(path) as writer:
        writer.write_shared({"bad": object()})
    assert read_checkpoint(path).shared == {"v": "old"}
    assert os.listdir(tmp_path) == ["ckpt"]


def test_two_ranks_write_one_checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    barrier = threading.Barrier(2, timeout=30)
    errors = []

    def rank_main(rank):
        try:
            write_checkpoint(
                path,
                {"model": torch.ones(3)} if rank == 0 else {"ignored": True},
                {"rank": rank, "t": torch.full((2,), float(rank))},
                rank=rank,
                world_size=2,
                barrier=barrier.wait,
                token="s1",
            )
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for rank in range(2):
        loaded = read_checkpoint(path, rank=rank)
        assert list(loaded.shared) == ["model"]  # only rank 0's shared state is written
        assert loaded.per_rank["rank"] == rank and torch.equal(
            loaded.per_rank["t"], torch.full((2,), float(rank))
        )
    assert loaded.meta["world_size"] == 2
    with pytest.raises(ValueError, match="barrier"):
        CheckpointWriter(path, rank=0, world_size=2)


def test_single_file_checkpoint_round_trip(tmp_path):
    model = torch.nn.Linear(2, 2)
    state = {"model": model.state_dict(), "step": 3, "betas": (0.9, 0.99), "dtype": torch.float16}
    path = write_single_file(tmp_path / "model.ckpt", state)
    assert torch.load(path, weights_only=True)["step"] == 3
    loaded = read_checkpoint(path)
    assert loaded.legacy and loaded.per_rank is None
    assert loaded.shared["betas"] == (0.9, 0.99) and loaded.shared["dtype"] is torch.float16
    assert torch.equal(loaded.shared["model"]["weight"], model.weight.detach())
    assert is_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"\['rng'\].*numpy.*torch.from_numpy"):
        write_single_file(tmp_path / "bad.ckpt", {"rng": np.zeros(3)})
    assert not (tmp_path / "bad.ckpt").exists()


def test_lightning_style_torch_save_file_loads(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "epoch": 4}, path)
    loaded = read_checkpoint(path)
    assert loaded.shared["epoch"] == 4 and loaded.meta["legacy"] is True


class _CreatesMarker:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_pickle_that_would_run_code_is_refused(tmp_path, writer):
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.ckpt"
    payload = {"model": {"w": torch.ones(1)}, "evil": _CreatesMarker(str(marker))}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    with pytest.raises(CheckpointError, match="unsafe unpickling") as info:
        read_checkpoint(path)
    assert str(path) in str(info.value)
    assert not marker.exists()


def test_wrong_format_version_is_refused_with_both_versions(tmp_path):
    path = tmp_path / "ckpt"
    _write_sample(path)
    meta = json.loads((path / "meta.json").read_text())
    meta["format_version"] = 99
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"meta\.json.*version 99.*1 to 1"):
        read_checkpoint(path)
    meta["format_version"] = "one"
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="'one'"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    "name", ["meta.json", "shared.json", "shared.safetensors", "rank_0.json", "rank_0.safetensors"]
)
@pytest.mark.parametrize("damage", ["truncate", "random", "empty", "delete"])
def test_damaged_files_raise_checkpoint_error_naming_the_file(tmp_path, name, damage):
    path = tmp_path / "ckpt"
    _write_sample(path)
    target = path / name
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "random":
        target.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif damage == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    if damage == "delete" and name.startswith("rank_0.json"):
        assert read_checkpoint(path).per_rank is None  # a rank without its file is allowed
        return
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert name in str(info.value)


@pytest.mark.parametrize("damage", ["truncate", "random"])
def test_damaged_single_file_raises_checkpoint_error(tmp_path, damage):
    path = write_single_file(tmp_path / "m.pt", {"w": torch.randn(50)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else os.urandom(len(data)))
    with pytest.raises(CheckpointError, match=r"m\.pt"):
        read_checkpoint(path)


def test_missing_checkpoint_mentions_unfinished_saves(tmp_path):
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        read_checkpoint(tmp_path / "nothing")
    (tmp_path / "ckpt.tmp-abc").mkdir()
    with pytest.raises(CheckpointError, match=r"unfinished saves.*ckpt\.tmp-abc"):
        read_checkpoint(tmp_path / "ckpt")
    assert not is_checkpoint(tmp_path / "ckpt")
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match=r"no meta\.json"):
        read_checkpoint(tmp_path / "plain")


def test_extra_meta_must_be_json(tmp_path):
    with pytest.raises(CheckpointError, match="extra_meta"):
        write_checkpoint(tmp_path / "c", {}, None, extra_meta={"x": object()})
