"""``fabric.load(..., weights_only=False)`` is an explicit, warned, one-call opt-in; the default never unpickles."""

from __future__ import annotations

import collections

import pytest
import torch

from fabricx import Fabric
from fabricx.checkpoint.unsafe_pickle import pickle_allowed
from fabricx.utilities.exceptions import CheckpointError


class Custom:  # a class the weights-only reader refuses
    def __init__(self, value: int) -> None:
        self.value = value


def test_default_refuses_and_opt_in_unpickles_with_a_warning(tmp_path):
    path = tmp_path / "foreign.ckpt"
    torch.save({"obj": Custom(3), "counts": collections.Counter(a=1)}, path)
    fabric = Fabric(accelerator="cpu")
    with pytest.raises(CheckpointError, match="unsafe unpickling"):
        fabric.load(path)
    with pytest.warns(UserWarning, match="weights_only=False.*can run arbitrary code"):
        contents = fabric.load(path, weights_only=False)
    assert contents["obj"].value == 3
    assert not pickle_allowed()  # the opt-in covered that one call only
    with pytest.raises(CheckpointError):
        fabric.load(path, weights_only=True)


def test_load_raw_opt_in(tmp_path):
    model = torch.nn.Linear(2, 2)
    path = tmp_path / "weights.pt"
    state = model.state_dict()
    state["_extra"] = Custom(1)  # not a tensor: needs unpickling
    torch.save(state, path)
    fabric = Fabric(accelerator="cpu")
    target = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError):
        fabric.load_raw(path, target)
    with pytest.warns(UserWarning, match="weights_only=False"):
        fabric.load_raw(path, target, strict=False, weights_only=False)
    assert torch.equal(target.weight, model.weight)
