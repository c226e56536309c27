import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.precision import MixedPrecision

PRECISIONS = ["32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"]


def _data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    y = (x @ torch.randn(8, 1, generator=generator)) + 0.1
    return x, y


@pytest.mark.parametrize("precision", PRECISIONS)
def test_loss_falls_in_every_precision(precision):
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", precision=precision)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    # pure fp16 cannot represent Adam's default eps=1e-8; SGD has no such constant.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    x, y = _data()
    losses = []
    for _ in range(30):
        output = model(x)
        loss = nn.functional.mse_loss(output.float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_true_precisions_convert_parameters_and_inputs():
    fabric = Fabric(accelerator="cpu", precision="64-true")
    model = fabric.setup(nn.Linear(4, 2))
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model(torch.randn(3, 4)).dtype == torch.float64

    fabric = Fabric(accelerator="cpu", precision="bf16-true")
    model = fabric.setup(nn.Linear(4, 2))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    # inputs are cast to bf16 for the computation, outputs come back in the default dtype
    assert model(torch.randn(3, 4)).dtype == torch.float32
    with fabric.init_tensor():
        assert torch.empty(2).dtype == torch.bfloat16
    with fabric.init_module():
        assert nn.Linear(2, 2).weight.dtype == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32


def test_mixed_precision_autocasts_and_keeps_fp32_weights():
    fabric = Fabric(accelerator="cpu", precision="bf16-mixed")
    model = fabric.setup(nn.Linear(4, 2))
    assert model.weight.dtype == torch.float32
    seen = {}

    def record(module, inputs, output):
        seen["dtype"] = output.dtype

    model.module.register_forward_hook(record)
    assert model(torch.randn(3, 4)).dtype == torch.float32
    assert seen["dtype"] == torch.bfloat16
    with fabric.autocast():
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.bfloat16


def test_16_mixed_skips_step_on_inf_and_halves_scale():
    fabric = Fabric(accelerator="cpu", precision="16-mixed")
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    scaler = fabric.precision.scaler
    scale_before = scaler.get_scale()
    weight_before = model.weight.detach().clone()
    # one small sample keeps fp16 gradients (bias grad = scale) below fp16 max at scale 32768
    x = torch.full((1, 4), 1e-3)
    fabric.backward(model(x).sum())
    model.weight.grad[0, 0] = float("inf")
    optimizer.step()
    assert torch.equal(model.weight, weight_before), "a step with inf gradients must be skipped"
    assert scaler.get_scale() == scale_before / 2

    optimizer.zero_grad()
    fabric.backward(model(x).sum())
    optimizer.step()
    assert not torch.equal(model.weight, weight_before)
    assert scaler.get_scale() == scale_before / 2


def test_16_mixed_loss_is_scaled_and_unscaled_before_clipping():
    # the default initial scale (65536) is itself beyond fp16's range for a unit output gradient
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    fabric = Fabric(accelerator="cpu", plugins=MixedPrecision("16-mixed", device="cpu", scaler=scaler))
    model = nn.Linear(4, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    x = torch.full((1, 4), 0.25)  # exact in fp16, and x * scale stays finite
    fabric.backward(model(x).sum())
    scale = fabric.precision.scaler.get_scale()
    assert torch.allclose(model.weight.grad, torch.full((1, 4), 0.25 * scale))
    norm = fabric.clip_gradients(model, optimizer, max_norm=100.0)
    assert torch.allclose(norm, torch.tensor(0.5))  # ||(0.25,)*4|| after unscaling
    # a second clip in the same step must not unscale twice
    fabric.clip_gradients(model, optimizer, clip_val=0.1)
    assert torch.allclose(model.weight.grad, torch.full((1, 4), 0.1))
