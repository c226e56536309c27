"""Bad API use gets a clear error that says what was given and what to do."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.strategies import SingleDeviceStrategy
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


class WrapsInPlace(SingleDeviceStrategy):
    """A strategy that changes the module it sets up, as FSDP, TP and DeepSpeed do."""

    allows_repeated_module_setup = False


def test_setting_up_the_same_module_twice_is_refused():
    fabric = Fabric(strategy=WrapsInPlace())
    net = _net()
    model = fabric.setup(net)
    for again in (lambda: fabric.setup(net), lambda: fabric.setup_module(net)):
        with pytest.raises(FabricxError, match="Sequential was already set up by this Fabric.*once per model"):
            again()
    with pytest.raises(FabricxError, match="A model should be passed only once"):
        fabric.setup(model)


def test_a_new_module_is_never_mistaken_for_a_collected_one():
    # Set-up modules were remembered by id(); a new module can get the id of a collected one.
    fabric = Fabric(strategy=WrapsInPlace())
    seen = set()
    for _ in range(20):
        module = nn.Linear(2, 2)
        seen.add(id(module))
        fabric.setup(module)
        del module  # freed here (reference counting), so the next one can reuse its address
    assert len(seen) < 20, "no id was reused: this check did not exercise anything"


def test_optimizer_over_parameters_of_another_module_is_refused():
    fabric = Fabric(accelerator="cpu")
    model, other = _net(), _net()
    with pytest.raises(FabricxError, match=r"holds 4 parameter\(s\) that are not in the module Sequential"):
        fabric.setup(model, torch.optim.SGD(other.parameters(), lr=0.1))
    mixed = torch.optim.SGD([{"params": model.parameters()}, {"params": other[0].parameters()}], lr=0.1)
    with pytest.raises(FabricxError, match=r"holds 2 parameter\(s\)"):
        fabric.setup(model, mixed)
    with pytest.raises(TypeError, match="scheduler=scheduler"):
        fabric.setup(model, torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=1), 1))


def test_collectives_setup_save_and_backward_before_launch_are_refused(tmp_path):
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    model = _net()
    loader = DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)
    calls = {
        "barrier()": lambda: fabric.barrier(),
        "broadcast()": lambda: fabric.broadcast(1),
        "all_gather()": lambda: fabric.all_gather(torch.ones(1)),
        "all_reduce()": lambda: fabric.all_reduce(torch.ones(1)),
        "setup()": lambda: fabric.setup(model),
        "setup_module()": lambda: fabric.setup_module(model),
        "setup_optimizers()": lambda: fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1)),
        "setup_dataloaders()": lambda: fabric.setup_dataloaders(loader),
        "save()": lambda: fabric.save(tmp_path / "ckpt", {"model": model}),
        "backward()": lambda: fabric.backward(model(torch.ones(1, 4)).sum()),
    }
    for name, call in calls.items():
        with pytest.raises(FabricxError) as error:
            call()
        message = str(error.value)
        assert message.startswith(name) and "2-process configuration" in message and "fabric.launch" in message
    assert not (tmp_path / "ckpt").exists()
    assert not dist.is_initialized()


def test_loss_backward_under_16_mixed_is_caught_at_the_optimizer_step():
    fabric = Fabric(accelerator="cpu", precision="16-mixed")
    model = _net()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4)
    before = [p.detach().clone() for p in model.parameters()]
    model(x).pow(2).mean().backward()  # the loss is not scaled
    with pytest.raises(FabricxError, match=r"no fabric.backward\(loss\).*Replace loss.backward\(\)"):
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)), "no step taken"
    optimizer.zero_grad()
    for _ in range(2):  # the right way keeps working, step after step
        fabric.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    with pytest.raises(FabricxError, match="16-mixed"):
        optimizer.step()


def test_scaled_backward_checks_have_no_false_alarms():
    # One backward feeding two optimizers; gradient accumulation; precisions without a scaler.
    fabric = Fabric(accelerator="cpu", precision="16-mixed", grad_accum_steps=2)
    a, b = _net(), _net()
    a, opt_a = fabric.setup(a, torch.optim.SGD(a.parameters(), lr=0.1))
    b, opt_b = fabric.setup(b, torch.optim.SGD(b.parameters(), lr=0.1))
    for _ in range(2):
        fabric.backward((a(torch.randn(2, 4)) + b(torch.randn(2, 4))).mean())
        opt_a.step()
        opt_b.step()
        opt_a.zero_grad()
        opt_b.zero_grad()
    for _ in range(4):
        with fabric.accumulate(a):
            fabric.backward(a(torch.randn(2, 4)).mean())
            opt_a.step()
            opt_a.zero_grad()
    for precision in ("bf16-mixed", "32-true"):
        plain = Fabric(accelerator="cpu", precision=precision)
        model = _net()
        model, optimizer = plain.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        model(torch.randn(2, 4)).mean().backward()  # allowed: nothing to scale
        optimizer.step()


@pytest.mark.parametrize("given", [[1, 2, 3], TensorDataset(torch.ones(2)), iter(range(3))])
def test_a_dataloader_that_is_not_a_dataloader_is_refused(given):
    fabric = Fabric(accelerator="cpu")
    with pytest.raises(TypeError, match=f"got {type(given).__name__}. Wrap your dataset in a DataLoader"):
        fabric.setup_dataloaders(given)
    with pytest.raises(ValueError, match="at least one DataLoader"):
        fabric.setup_dataloaders()


@pytest.fixture
def existing_group(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, timeout=timedelta(seconds=60)
    )
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp"])
def test_launching_inside_an_initialised_process_group_is_refused(existing_group, strategy):
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy)
    with pytest.raises(FabricxError, match="already initialised in this process.*fabricx run"):
        fabric.launch(_never_called)


def test_joining_an_initialised_group_of_another_shape_is_refused(existing_group, monkeypatch):
    # Processes started by torchrun (mocked environment): Fabric joins the group instead of launching.
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999", "TORCHELASTIC_RUN_ID": "test"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(MisconfigurationError, match="world size 1.*expects world size 2.*destroy it first"):
        Fabric(accelerator="cpu", devices=2, strategy="ddp")


def _never_called(fabric: Fabric) -> None:
    raise AssertionError("no process should have been started")
