"""CUDA paths: accelerator selection, each precision (the fp16 grad scaler against torch's own), torch.compile
through the strategy, FSDP2 on one GPU.

They run where a GPU exists (`make gpu-check` runs this folder) and are skipped, with the reason, everywhere
else. `FABRICX_GPU_TESTS_ON_CPU=1` runs those that have a CPU meaning on the CPU instead, to check the tests
themselves while no GPU is at hand.
"""

import os

import pytest
import torch
from torch import nn

from fabricx import Fabric

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not HAS_CUDA and os.environ.get("FABRICX_GPU_TESTS_ON_CPU") != "1",
        reason="needs a CUDA device; CPU paths are tested elsewhere",
    ),
]
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="CUDA-only behaviour")


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "bf16-true", "32-true"])
def test_training_in_each_precision(precision):
    torch.manual_seed(0)
    fabric = Fabric(accelerator=DEVICE, devices=1, precision=precision)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    assert next(model.parameters()).device.type == DEVICE
    x = torch.randn(64, 16, device=fabric.device)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(30):
        loss = nn.functional.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@cuda_only
def test_cuda_accelerator_is_chosen_by_auto_and_batches_move():
    fabric = Fabric()
    assert fabric.device.type == "cuda"
    assert Fabric(accelerator="gpu", devices=1).device == torch.device("cuda", 0)
    assert Fabric(accelerator="cuda", devices=[0]).device == torch.device("cuda", 0)
    assert Fabric(accelerator="cuda", devices=-1).world_size == torch.cuda.device_count()
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(torch.arange(8.0), batch_size=4))
    assert next(iter(loader)).device.type == "cuda"


def test_checkpoint_of_device_tensors_loads_on_cpu(tmp_path):
    fabric = Fabric(accelerator=DEVICE, devices=1)
    model = fabric.setup(nn.Linear(4, 4))
    fabric.save(tmp_path / "ckpt", {"model": model})
    cpu_fabric = Fabric(accelerator="cpu")
    restored = cpu_fabric.setup(nn.Linear(4, 4))
    cpu_fabric.load(tmp_path / "ckpt", {"model": restored})
    assert torch.equal(restored.weight, model.weight.cpu())


def test_16_mixed_scaler_skips_inf_and_nan_steps_as_torch_grad_scaler_does():
    """The same steps (good, inf, good, nan, good, good) through fabricx and through torch's autocast + GradScaler:
    parameters and loss scale equal bit for bit after every step; the bad steps change no parameter."""
    torch.manual_seed(0)
    reference = _mlp().to(DEVICE)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(DEVICE)
    fabric = Fabric(accelerator=DEVICE, devices=1, precision="16-mixed")
    torch.manual_seed(0)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    x = torch.randn(32, 16, device=DEVICE)
    y = x.sum(dim=1, keepdim=True)
    initial = [p.detach().clone() for p in model.parameters()]
    for factor in (1.0, float("inf"), 1.0, float("nan"), 1.0, 1.0):
        before = [p.detach().clone() for p in model.parameters()]
        with torch.autocast(DEVICE, dtype=torch.float16):
            reference_loss = nn.functional.mse_loss(reference(x).float(), y) * factor
        scaler.scale(reference_loss).backward()
        scaler.step(reference_optimizer)
        scaler.update()
        reference_optimizer.zero_grad()

        loss = nn.functional.mse_loss(model(x).float(), y) * factor
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

        for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(ours, theirs)
        assert fabric.precision.scaler.get_scale() == scaler.get_scale()
        if factor != 1.0:  # (a good step may be skipped too, by both, while the first scale overflows fp16)
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(initial, model.parameters(), strict=True))
    assert scaler.get_scale() < 65536.0  # the bad steps halved the scale


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bf16_precisions_match_the_hand_written_loop(precision):
    """bf16-mixed is autocast with float32 parameters; bf16-true is a bf16 model: both bit for bit as by hand."""
    torch.manual_seed(0)
    reference = _mlp().to(DEVICE)
    if precision == "bf16-true":
        reference = reference.to(torch.bfloat16)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    fabric = Fabric(accelerator=DEVICE, devices=1, precision=precision)
    torch.manual_seed(0)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    expected_dtype = torch.bfloat16 if precision == "bf16-true" else torch.float32
    assert {p.dtype for p in model.parameters()} == {expected_dtype}
    x = torch.randn(32, 16, device=DEVICE)
    y = x.sum(dim=1, keepdim=True)
    for _ in range(5):
        if precision == "bf16-mixed":
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                out = reference(x)
        else:
            out = reference(x.to(torch.bfloat16))
        assert out.dtype == torch.bfloat16
        nn.functional.mse_loss(out.float(), y).backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()

        out = model(x)  # (converted back to float32, as Lightning's precision plugins do)
        fabric.backward(nn.functional.mse_loss(out.float(), y))
        optimizer.step()
        optimizer.zero_grad()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_torch_compile_through_the_strategy_trains_compiled():
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    torch.manual_seed(0)
    fabric = Fabric(accelerator=DEVICE, devices=1, precision="bf16-mixed", compile=True)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    x = torch.randn(64, 16, device=DEVICE)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(10):
        loss = nn.functional.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert counters["stats"]["unique_graphs"] >= 1, dict(counters["stats"])
    assert losses[-1] < losses[0]
    assert not any(key.startswith("_orig_mod") for key in model.state_dict())


def test_fsdp2_on_one_device_matches_the_plain_loop(tmp_path):
    """FSDP2 with one rank: DTensor parameters, the same numbers as the plain loop, a checkpoint that loads."""
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    reference = _mlp().to(DEVICE)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    fabric = Fabric(accelerator=DEVICE, devices=1, strategy="fsdp")
    torch.manual_seed(0)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert isinstance(next(model.parameters()), DTensor)
    x = torch.randn(32, 16, device=fabric.device)
    y = x.sum(dim=1, keepdim=True)
    for _ in range(5):
        nn.functional.mse_loss(reference(x), y).backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
        fabric.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.full_tensor(), theirs, rtol=1e-5, atol=1e-6)
    fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer})
    weights = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    fabric.load(tmp_path / "ckpt", {"model": model, "optimizer": optimizer})
    for key, value in model.state_dict().items():
        assert torch.equal(value.full_tensor(), weights[key])
