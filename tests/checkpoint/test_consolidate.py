"""consolidate_checkpoint / ``fabricx consolidate``: a sharded checkpoint becomes one loadable without a
process group. The sharded checkpoint comes from a real FSDP2 run of world size 1 in this process (the
2-rank case is covered in tests/strategies/test_fsdp.py)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.consolidate import consolidate_checkpoint
from fabricx.checkpoint.format import read_checkpoint, read_meta, write_checkpoint
from fabricx.strategies.fsdp import FSDPStrategy
from fabricx.utilities.exceptions import CheckpointError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("consolidate") / "ckpt"
    fabric = Fabric(accelerator="cpu", devices=1, strategy=FSDPStrategy(auto_wrap_policy={nn.Linear}, timeout=60))
    try:
        model = fabric.setup_module(_model())
        optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.1))
        fabric.backward(model(torch.randn(4, 6)).square().mean())
        optimizer.step()
        fabric.save(path, {"model": model, "optimizer": optimizer, "step": 7})
        weights = fabric.strategy.get_module_state_dict(fabric.unwrap(model))
        optimizer_state = fabric.strategy.get_optimizer_state(fabric.unwrap(optimizer))
    finally:
        fabric._teardown()
    return {"path": path, "weights": weights, "optimizer": optimizer_state}


def _assert_optimizer_equal(expected: dict[str, Any], got: dict[str, Any]) -> None:
    assert got["param_groups"] == expected["param_groups"]
    assert set(got["state"]) == set(expected["state"]) == {0, 1, 2, 3}
    for index, values in expected["state"].items():
        for key, value in values.items():
            assert torch.equal(value, got["state"][index][key]), (index, key)


def test_consolidated_checkpoint_holds_full_tensors(sharded: dict[str, Any]) -> None:
    written = consolidate_checkpoint(sharded["path"])
    assert written == sharded["path"].with_name("ckpt.consolidated")
    loaded = read_checkpoint(written)
    assert sorted(k for k in loaded.shared if not k.startswith("__")) == ["model", "optimizer", "step"]
    assert loaded.shared["step"] == 7
    for name, tensor in sharded["weights"].items():
        assert type(loaded.shared["model"][name]) is torch.Tensor
        assert torch.equal(loaded.shared["model"][name], tensor), name
    _assert_optimizer_equal(sharded["optimizer"], loaded.shared["optimizer"])
    assert loaded.per_rank is not None and "__fabricx_rng__" in loaded.per_rank
    assert not (written / "sharded").exists()
    assert read_meta(written)["extra_meta"]["consolidated_from"] == str(sharded["path"])


def test_plain_fabric_loads_consolidated_checkpoint(sharded: dict[str, Any], tmp_path: Path) -> None:
    written = consolidate_checkpoint(sharded["path"], tmp_path / "out")
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3)))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.5))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(written, state)
    assert state["step"] == 7
    for name, tensor in fabric.unwrap(model).state_dict().items():
        assert torch.equal(tensor, sharded["weights"][name]), name
    _assert_optimizer_equal(sharded["optimizer"], fabric.unwrap(optimizer).state_dict())


def test_plain_fabric_loads_a_sharded_checkpoint_directly(sharded: dict[str, Any]) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3)))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.5))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(sharded["path"], state)
    assert state["step"] == 7
    for name, tensor in fabric.unwrap(model).state_dict().items():
        assert torch.equal(tensor, sharded["weights"][name]), name
    _assert_optimizer_equal(sharded["optimizer"], fabric.unwrap(optimizer).state_dict())
    everything = fabric.load(sharded["path"])
    assert set(everything["model"]) == set(sharded["weights"])


def test_command_line(sharded: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fabricx.cli import main

    assert main(["consolidate", str(sharded["path"]), "-o", str(tmp_path / "cli")]) == 0
    assert torch.equal(read_checkpoint(tmp_path / "cli").shared["model"]["0.weight"], sharded["weights"]["0.weight"])
    assert "Consolidated" in capsys.readouterr().out


def test_refuses_what_it_cannot_consolidate(sharded: dict[str, Any], tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "plain", {"model": {"w": torch.ones(2)}}, None)
    with pytest.raises(CheckpointError, match="not a sharded checkpoint"):
        consolidate_checkpoint(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="is the checkpoint itself"):
        consolidate_checkpoint(sharded["path"], sharded["path"])
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        consolidate_checkpoint(tmp_path / "missing")


class _Payload:
    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(self.marker),))  # type: ignore[attr-defined]


def test_foreign_code_in_shard_metadata_is_not_run(sharded: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "tampered"
    shutil.copytree(sharded["path"], copy)
    payload = _Payload()
    payload.marker = str(tmp_path / "executed")  # type: ignore[attr-defined]
    (copy / "sharded" / ".metadata").write_bytes(pickle.dumps(payload))
    with pytest.raises(CheckpointError, match="Refusing to read"):
        consolidate_checkpoint(copy, tmp_path / "never")
    assert not (tmp_path / "executed").exists()
    assert not (tmp_path / "never").exists()


_CONSOLIDATE_UNDER_4_GIB = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from fabricx.cli import main
sys.exit(main(["consolidate", sys.argv[1], "-o", sys.argv[2]]))
"""


def _stride_zero_bomb(path: Path) -> Path:
    """A sub-kilobyte checkpoint whose one tensor is a stride-0 view claiming 8 GiB of a 4-byte buffer, with
    a (empty) sharded record so that consolidation takes it."""
    import json

    base = torch.zeros(2)
    write_checkpoint(path, {"model": {"w": base[0:1], "v": base[1:2]}}, None, extra_meta={
        "fabricx_sharded": {"format": "torch.distributed.checkpoint", "directory": "sharded", "entries": {}}})
    document = json.loads((path / "shared.json").read_text())
    entries = document["root"]["v"][0][1]["v"]
    entries[0][1].update(shape=[2**31], stride=[0])  # 2**31 float32 = 8 GiB
    del entries[1]  # the one view of its buffer: writing it out would materialize it whole
    text = json.dumps(document)
    (path / "shared.json").write_text(text)
    meta = json.loads((path / "meta.json").read_text())
    meta["files"]["shared.json"] = len(text)
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def test_consolidate_refuses_a_stride_zero_bomb_before_allocating(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    bomb = _stride_zero_bomb(tmp_path / "bomb")
    assert sum(f.stat().st_size for f in bomb.iterdir()) < 1024
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CONSOLIDATE_UNDER_4_GIB, str(bomb), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds = time.perf_counter() - start
    assert done.returncode == 1, done.stderr[-1500:]
    assert "fabricx consolidate: " in done.stderr and "is damaged" in done.stderr, done.stderr[-1500:]
    assert "expanded tensor" in done.stderr and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert not (tmp_path / "out").exists()
    print(f"refused in {seconds:.1f} s (process start included)")
