"""The ``"dcp"`` layout on one process: a torch.distributed.checkpoint folder plus ``meta.pt``, as Lightning's
sharded strategies write it.

fabricx writes it and reads it back exactly (model, optimizer with its per-parameter state, plain values,
the data loader's position); a folder written the way Lightning's ModelParallelStrategy writes one
(``torch.distributed.checkpoint.save`` of the named state dicts plus ``torch.save`` of the rest) loads into
plain objects; reading never runs code, neither from ``meta.pt`` nor from a pickled DCP item. The
two-process exchange with Lightning itself is tests/differential/test_dcp_layout_lightning.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.layouts import layout_keys, saved_layout
from fabricx.checkpoint.layouts.dcp import LAYOUT
from fabricx.utilities.exceptions import CheckpointError


def _setup(fabric: Fabric, seed: int) -> tuple[Any, Any, Any]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(torch.arange(40.0), batch_size=4, shuffle=True))
    return model, optimizer, loader


def _step(fabric: Fabric, model: Any, optimizer: Any) -> None:
    fabric.backward(model(torch.randn(2, 4)).pow(2).sum())
    optimizer.step()
    optimizer.zero_grad()


def _assert_same(expected: Any, got: Any, where: str = "") -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype, where
        assert torch.equal(expected, got), where
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), f"{where}: {sorted(map(str, got))}"
        for key in expected:
            _assert_same(expected[key], got[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), where
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            _assert_same(e, g, f"{where}[{i}]")
    else:
        assert expected == got, where


def test_fabricx_writes_a_dcp_folder_and_resumes_from_it_exactly(tmp_path: Path) -> None:
    assert "dcp" in layout_keys()
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, loader = _setup(fabric, seed=0)
    batches = iter(loader)
    next(batches), next(batches)
    _step(fabric, model, optimizer)
    path = tmp_path / "ckpt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "loader": loader, "step": 3}, layout="dcp")
    assert (path / ".metadata").is_file() and (path / "meta.pt").is_file() and not (path / "meta.json").exists()
    assert saved_layout(path) is LAYOUT
    expected_next = next(batches)

    other, other_optimizer, other_loader = _setup(fabric, seed=1)
    state = {"model": other, "optimizer": other_optimizer, "loader": other_loader, "step": 0}
    assert fabric.load(path, state) == {}
    assert state["step"] == 3
    _assert_same(model.state_dict(), other.state_dict(), "model")
    _assert_same(optimizer.state_dict(), other_optimizer.state_dict(), "optimizer")
    assert torch.equal(next(iter(other_loader)), expected_next)  # the loader continues where it stopped

    everything = fabric.load(path)  # no state: everything, in full
    _assert_same(model.state_dict(), everything["model"], "model")
    _assert_same(optimizer.state_dict(), everything["optimizer"], "optimizer")
    assert everything["step"] == 3


def _write_like_lightning(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, meta: Any) -> None:
    """What Lightning's ModelParallelStrategy.save_checkpoint writes (named state dicts into DCP, the rest
    with torch.save into meta.pt), here on one process without a process group."""
    from torch.distributed.checkpoint import save
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    converted = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    path.mkdir()
    save(converted, checkpoint_id=path)
    torch.save(meta, path / "meta.pt")


def test_a_folder_written_as_lightning_writes_it_loads_into_plain_objects(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    source_optimizer = torch.optim.Adam(source.parameters(), lr=0.05)
    source(torch.randn(2, 4)).sum().backward()
    source_optimizer.step()
    path = tmp_path / "lightning"
    _write_like_lightning(path, source, source_optimizer, {"step": 7, "note": "from lightning"})
    assert saved_layout(path) is LAYOUT

    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, _ = _setup(fabric, seed=1)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    remainder = fabric.load(path, state)
    assert state["step"] == 7 and remainder == {"note": "from lightning"}
    _assert_same(source.state_dict(), model.state_dict(), "model")
    _assert_same(source_optimizer.state_dict(), optimizer.state_dict(), "optimizer")


class _Runs:
    """Pickled, it would call os.system when unpickled with full unpickling."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_meta_pt_needing_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(source.parameters(), lr=0.1)
    marker = tmp_path / "ran"
    path = tmp_path / "ckpt"
    _write_like_lightning(path, source, optimizer, {"step": 1, "payload": _Runs(marker)})
    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(CheckpointError, match="Refusing to load"):
        fabric.load(path, {"model": fabric.setup(nn.Linear(4, 3))})
    assert not marker.exists()


def test_a_pickled_dcp_item_needing_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    from torch.distributed.checkpoint import save

    marker = tmp_path / "ran"
    path = tmp_path / "ckpt"
    path.mkdir()
    save({"model": {"weight": torch.ones(3)}, "optimizer": {"param_groups": [{"hook": _Runs(marker)}]}},
         checkpoint_id=path)
    with pytest.raises(CheckpointError, match="Refusing to load the item .*nothing was executed"):
        Fabric(accelerator="cpu", devices=1).load(path)
    assert not marker.exists()


def test_dcp_layout_refuses_a_fabricx_checkpoint_directory_or_a_file(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup(nn.Linear(4, 3))
    fabric.save(tmp_path / "plain", {"model": model})  # the fabricx directory layout
    with pytest.raises(CheckpointError, match="meta.json"):
        fabric.save(tmp_path / "plain", {"model": model}, layout="dcp")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="a file is there"):
        fabric.save(tmp_path / "file", {"model": model}, layout="dcp")
    assert (tmp_path / "file").read_text() == "x"


def test_an_optimizer_that_never_stepped_saves_and_loads_in_dcp(tmp_path: Path) -> None:
    # DCP stores no empty dict, so an unstepped optimizer's empty "state" is not in the folder.
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, _ = _setup(fabric, seed=0)
    optimizer.param_groups[0]["lr"] = 0.0125
    fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer, "step": 0}, layout="dcp")
    fresh_model, fresh_optimizer, _ = _setup(fabric, seed=1)
    state = {"model": fresh_model, "optimizer": fresh_optimizer, "step": -1}
    fabric.load(tmp_path / "ckpt", state)
    assert state["step"] == 0 and fresh_optimizer.param_groups[0]["lr"] == 0.0125
    _assert_same(optimizer.state_dict(), fresh_optimizer.state_dict(), "optimizer")
    for live_model, live_optimizer in ((model, optimizer), (fresh_model, fresh_optimizer)):
        torch.manual_seed(7)  # the same batch: both take their first step from the same state
        _step(fabric, live_model, live_optimizer)
    _assert_same(model.state_dict(), fresh_model.state_dict(), "model after a step")
    _assert_same(optimizer.state_dict(), fresh_optimizer.state_dict(), "optimizer after a step")
