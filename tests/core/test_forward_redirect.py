"""A set-up module's own weights per process, and its step methods through the strategy's forward.

* A model built in the parent and passed through ``fabric.launch(train, model)`` with ``ddp_spawn``
  must be owned by each child: otherwise every rank's optimizer step lands in one shared copy.
* ``model.training_step(batch)`` must run through DDP's forward (gradient averaging) and FSDP2's root
  hooks (the root's parameters gathered), not straight on the user's module.

Both are checked against one process trained on the ranks' concatenated batches.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.strategies import DDPStrategy, FSDPStrategy
from fabricx.utilities.exceptions import FabricxError

STEPS = 4
PER_RANK = 4
LR = 0.1


class StepNet(nn.Module):
    """A model whose ``training_step`` reaches its layers directly (not through ``self(x)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 6)
        self.second = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.second(torch.tanh(self.first(x))), y)

    def predict_step(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return self.first(x), torch.is_autocast_enabled("cpu")

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return self.first(x), torch.is_autocast_enabled("cpu")


def _net() -> StepNet:
    torch.manual_seed(0)
    return StepNet()


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS, 2 * PER_RANK, 4, generator=generator)
    return x, torch.randn(STEPS, 2 * PER_RANK, 1, generator=generator)


def _flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def _reference() -> list[torch.Tensor]:
    """One process, the two ranks' batches concatenated: what every step must equal."""
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data()
    weights = []
    for step in range(STEPS):
        nn.functional.mse_loss(model(x[step]), y[step]).backward()
        optimizer.step()
        optimizer.zero_grad()
        weights.append(_flat(model))
    return weights


def _train(fabric: Fabric, model: nn.Module, use_training_step: bool) -> list[torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = fabric.setup(model, optimizer)
    x, y = _data()
    rows = slice(fabric.global_rank * PER_RANK, (fabric.global_rank + 1) * PER_RANK)
    gathered = []
    for step in range(STEPS):
        batch = (x[step, rows], y[step, rows])
        loss = model.training_step(batch) if use_training_step else nn.functional.mse_loss(model(batch[0]), batch[1])
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        gathered.append(fabric.all_gather(_flat(model)))
    return gathered


def _ddp_spawn_job(fabric: Fabric, parent_forward: nn.Module, parent_step: nn.Module) -> dict:
    torch.set_num_threads(1)
    return {
        "forward": _train(fabric, parent_forward, use_training_step=False),
        "training_step": _train(fabric, parent_step, use_training_step=True),
    }


def _fsdp_job(fabric: Fabric) -> dict:
    torch.set_num_threads(1)
    model = _net()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=LR))
    x, y = _data()
    rows = slice(fabric.global_rank * PER_RANK, (fabric.global_rank + 1) * PER_RANK)
    for step in range(STEPS):
        fabric.backward(model.training_step((x[step, rows], y[step, rows])))
        optimizer.step()
        optimizer.zero_grad()
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    return {k: v.detach().clone() for k, v in full.items()}


@pytest.mark.distributed
def test_parent_built_models_are_owned_per_rank_and_training_step_goes_through_ddp() -> None:
    parent_forward, parent_step = _net(), _net()
    before = _flat(parent_forward)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn", timeout=60))
    results = fabric.launch(_ddp_spawn_job, parent_forward, parent_step)
    reference = _reference()
    for kind in ("forward", "training_step"):
        for step, gathered in enumerate(results[kind]):
            assert torch.equal(gathered[0], gathered[1]), f"{kind}: ranks differ after step {step + 1}"
            torch.testing.assert_close(gathered[0], reference[step], rtol=0, atol=1e-6, msg=f"{kind} step {step + 1}")
    # The children trained copies of their own; the parent's modules were never written to.
    assert torch.equal(_flat(parent_forward), before)
    assert torch.equal(_flat(parent_step), before)


@pytest.mark.distributed
def test_training_step_under_fsdp2_gathers_the_root_parameters() -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy=FSDPStrategy(start_method="spawn", timeout=60))
    final = fabric.launch(_fsdp_job)
    model = _net()
    offset = 0
    expected = _reference()[-1]
    for name, parameter in model.named_parameters():
        size = parameter.numel()
        torch.testing.assert_close(
            final[name].flatten(), expected[offset : offset + size], rtol=0, atol=1e-6, msg=name
        )
        offset += size


def test_one_device_full_precision_returns_the_method_itself() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(_net())
    assert model.training_step == model.module.training_step
    assert model.encode == model.module.encode


def test_mixed_precision_runs_step_methods_under_autocast_and_guards_other_methods() -> None:
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(_net())
    x = torch.randn(2, 4)
    assert model.predict_step(x)[1] is True  # a step method runs under forward's autocast
    assert "forward" not in model.module.__dict__  # the swap was undone
    with torch.no_grad():
        assert model.encode(x)[1] is False  # a plain method, allowed without gradients
    with pytest.raises(FabricxError, match=r"mark_forward_method\('encode'\)"):
        model.encode(x)
    model.mark_forward_method("encode")
    assert model.encode(x)[1] is True  # now through forward
    with pytest.raises(AttributeError, match="has no method 'missing'"):
        model.mark_forward_method("missing")
    with pytest.raises(ValueError, match="forward already"):
        model.mark_forward_method("forward")


def test_a_method_that_runs_no_layer_is_checked_once() -> None:
    class WithHelper(StepNet):
        def scale(self, value: float) -> float:
            return value * 2

    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(WithHelper())
    assert model.scale(2.0) == 4.0
    assert model.scale == model.module.scale  # checked: later lookups get the method itself


def test_a_method_under_its_own_no_grad_decorator_is_allowed_and_stays_checked() -> None:
    # Lightning's reinforcement-learning example: `@torch.no_grad()` on a method that runs the critic.
    class WithNoGradHelper(StepNet):
        @torch.no_grad()
        def value(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(torch.tanh(self.first(x)))

        def value_then_train(self, x: torch.Tensor, with_grad: bool) -> torch.Tensor:
            with torch.set_grad_enabled(with_grad):
                return self.first(x)

    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(WithNoGradHelper())
    x = torch.randn(2, 4)
    assert not model.value(x).requires_grad
    assert not model.value_then_train(x, with_grad=False).requires_grad
    assert model.value_then_train != model.module.value_then_train  # ran layers, so still checked next time
    with pytest.raises(FabricxError, match=r"mark_forward_method\('value_then_train'\)"):
        model.value_then_train(x, with_grad=True)
