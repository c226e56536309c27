"""A ``.pth`` from ``fabric.save`` opens with Lightning's lazy loader, as a file from Lightning Fabric's ``save`` does.

Fabric projects load large checkpoints onto the meta device with ``lightning.fabric.utilities.load._lazy_load``,
which reads the storage records ``torch.save`` writes for tensors with a typed storage. The same state is saved
through fabricx and through Lightning Fabric; both files are lazily loaded, materialized, and compared tensor
by tensor (values and dtypes), with each other and with the objects saved. fabricx's own entries (random states
with NumPy's unsigned arrays among them) must not stop the lazy loader either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _compare import assert_same
from torch import nn

from fabricx import Fabric

lightning_load = pytest.importorskip("lightning.fabric.utilities.load")


def _trained(fabric: Any) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    loss = model(torch.randn(6, 4)).sum()
    fabric.backward(loss)
    optimizer.step()
    return model, optimizer


def _lazily_loaded(path: Path) -> dict[str, Any]:
    return lightning_load._materialize_tensors(lightning_load._lazy_load(path))


def test_fabric_save_file_lazily_loads_like_lightning_fabrics(tmp_path: Path) -> None:
    from lightning.fabric import Fabric as LightningFabric

    np.random.seed(1)  # NumPy's state (uint32 arrays) goes into fabricx's random-state entry
    ours = Fabric(accelerator="cpu", devices=1)
    model, optimizer = _trained(ours)
    ours.save(tmp_path / "fabricx.pth", {"model": model, "optimizer": optimizer, "step": 3})

    theirs = LightningFabric(accelerator="cpu", devices=1)
    their_model, their_optimizer = _trained(theirs)
    theirs.save(tmp_path / "lightning.pth", {"model": their_model, "optimizer": their_optimizer, "step": 3})

    from_fabricx = _lazily_loaded(tmp_path / "fabricx.pth")
    from_lightning = _lazily_loaded(tmp_path / "lightning.pth")
    for key in ("model", "optimizer", "step"):
        assert_same(from_lightning[key], from_fabricx[key], key)
    assert_same(model.state_dict(), from_fabricx["model"], "model")  # the values saved, not just equal files
    # fabricx's extra entries load too (a lazy load of the whole file never stops at them).
    assert {key for key in from_fabricx if key.startswith("__fabricx_")}
    assert isinstance(from_fabricx["step"], int)


def test_numpy_random_state_survives_the_file(tmp_path: Path) -> None:
    # The unsigned arrays of NumPy's state are stored as same-width signed tensors and read back as they were.
    fabric = Fabric(accelerator="cpu", devices=1)
    np.random.seed(5)
    fabric.save(tmp_path / "state.pth", {"step": 1})
    expected = np.random.rand(4)
    np.random.seed(99)
    fabric.load(tmp_path / "state.pth", {"step": 0})
    assert np.array_equal(np.random.rand(4), expected)
