"""A checkpoint directory loads its tensors into fresh memory, checks them, and only then restores the objects.

* an I/O error or a file truncated in the middle of the read fails the load with a `CheckpointError` and leaves
  the model's parameters and the optimizer's state exactly as they were;
* the fresh tensors are handed to the model without a copy where that is the same as copying: the parameter
  objects stay the ones the optimizer holds, so training goes on exactly as after a copying load;
* tensors that share memory (tied weights) or that a kept read still holds (`read_once`) are copied.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.utilities.exceptions import CheckpointError


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 8), nn.Linear(8, 2))


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    model(torch.randn(4, 8, generator=generator)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def _setup(seed: int = 0) -> tuple[Fabric, nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    fabric = Fabric(accelerator="cpu", devices=1)
    model = _model()
    model, optimizer = fabric.setup(model, torch.optim.Adam(model.parameters(), lr=0.01))
    return fabric, model, optimizer


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "pointers": [p.data_ptr() for p in model.parameters()],
        "optimizer": {
            index: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
            for index, state in optimizer.state_dict()["state"].items()
        },
    }


def _assert_unchanged(before: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    after = _snapshot(model, optimizer)
    assert after["pointers"] == before["pointers"]
    assert after["params"].keys() == before["params"].keys()
    for key, value in before["params"].items():
        assert torch.equal(after["params"][key], value), key
    assert after["optimizer"].keys() == before["optimizer"].keys()
    for index, state in before["optimizer"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(after["optimizer"][index][name]), torch.as_tensor(value))


def _saved_then_trained(tmp_path: Path) -> tuple[Fabric, nn.Module, torch.optim.Optimizer, Path]:
    """A checkpoint of step 1, and the live objects moved on to step 2 (so a partial load would show)."""
    fabric, model, optimizer = _setup()
    _train_step(model, optimizer, seed=1)
    path = tmp_path / "ckpt"
    fabric.save(path, {"model": model, "optimizer": optimizer})
    _train_step(model, optimizer, seed=2)
    return fabric, model, optimizer, path


def _failing_reads(after: int, failure: str, file: Path) -> Callable[..., int]:
    """``os.preadv`` that reads ``after`` times, then fails: an I/O error, or ``file`` truncated under the reader."""
    real, calls = os.preadv, [0]

    def preadv(fd: int, buffers: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] > after:
            if failure == "io_error":
                raise OSError(5, "Input/output error")
            os.truncate(file, offset)
        return real(fd, buffers, offset)

    return preadv


@pytest.mark.parametrize(("failure", "message"), [("io_error", "Input/output error"), ("truncated", "ended after")])
def test_a_read_failing_midway_leaves_model_and_optimizer_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str, message: str
) -> None:
    fabric, model, optimizer, path = _saved_then_trained(tmp_path)
    before = _snapshot(model, optimizer)
    # The header and 2 tensors read, then the failure.
    monkeypatch.setattr(os, "preadv", _failing_reads(3, failure, path / "shared.safetensors"))
    with pytest.raises(CheckpointError, match=message) as raised:
        fabric.load(path, {"model": model, "optimizer": optimizer})
    assert "shared.safetensors" in str(raised.value)
    assert "Nothing was loaded" in str(raised.value)
    _assert_unchanged(before, model, optimizer)


def test_loaded_parameters_stay_the_optimizers_and_training_goes_on_as_after_a_copy(tmp_path: Path) -> None:
    fabric, model, optimizer, path = _saved_then_trained(tmp_path)
    parameters = list(model.parameters())
    fabric.load(path, {"model": model, "optimizer": optimizer})
    assert all(a is b for a, b in zip(model.parameters(), parameters, strict=True))
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in parameters]

    # The same checkpoint restored the way torch does it (copies into a model of its own), then one more step each.
    reference_fabric, reference, reference_optimizer = _setup(seed=5)
    contents = reference_fabric.load(path)
    reference.load_state_dict({k: v.clone() for k, v in contents["model"].items()})
    reference_optimizer.load_state_dict(contents["optimizer"])
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    _train_step(model, optimizer, seed=3)
    _train_step(reference, reference_optimizer, seed=3)
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_tied_weights_stay_tied_and_kept_reads_are_copied(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    encoder, decoder = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
    decoder.weight = encoder.weight
    tied = nn.Sequential(encoder, decoder)
    path = tmp_path / "ckpt"
    fabric.save(path, {"model": tied})
    saved = encoder.weight.detach().clone()
    with torch.no_grad():
        encoder.weight.zero_()
    fabric.load(path, {"model": tied})
    assert decoder.weight is encoder.weight
    assert torch.equal(encoder.weight.detach(), saved)

    plain = nn.Linear(4, 4)
    fabric.save(tmp_path / "plain", {"model": plain})
    first, second = nn.Linear(4, 4), nn.Linear(4, 4)
    with fabric.checkpointer.read_once(tmp_path / "plain"):  # one read, two loads: each gets memory of its own
        fabric.load(tmp_path / "plain", {"model": first})
        fabric.load(tmp_path / "plain", {"model": second})
    for name, value in plain.state_dict().items():
        assert torch.equal(first.state_dict()[name], value)
        assert torch.equal(second.state_dict()[name], value)
        assert first.state_dict()[name].data_ptr() != second.state_dict()[name].data_ptr()


def test_a_module_holding_tensor_subclasses_is_copied_into_not_handed_over() -> None:
    # FSDP2's DTensor parameters (and other subclasses) own their memory in their own way: the load copies.
    from fabricx.checkpoint.hand_over import hand_over

    class Wrapped(torch.Tensor):
        pass

    model = torch.nn.Linear(2, 2)
    model.weight = torch.nn.Parameter(torch.zeros(2, 2).as_subclass(Wrapped))
    state = {"weight": torch.ones(2, 2), "bias": torch.ones(2)}
    assert hand_over(model, state, strict=True) == 0
    model.load_state_dict(state)
    assert torch.equal(model.weight, torch.ones(2, 2)) and model.bias.data_ptr() != state["bias"].data_ptr()
