"""CUDA-only paths. They run where a GPU exists and are skipped (with the reason) everywhere else."""

import pytest
import torch
from torch import nn

from fabricx import Fabric

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; CPU paths are tested elsewhere"),
]


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "bf16-true", "32-true"])
def test_training_on_cuda_in_each_precision(precision):
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cuda", devices=1, precision=precision)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    assert next(model.parameters()).device.type == "cuda"
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


def test_cuda_accelerator_is_chosen_by_auto_and_batches_move():
    fabric = Fabric()
    assert fabric.device.type == "cuda"
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(torch.arange(8.0), batch_size=4))
    assert next(iter(loader)).device.type == "cuda"


def test_checkpoint_of_cuda_tensors_loads_on_cpu(tmp_path):
    fabric = Fabric(accelerator="cuda", devices=1)
    model = fabric.setup(nn.Linear(4, 4))
    fabric.save(tmp_path / "ckpt", {"model": model})
    cpu_fabric = Fabric(accelerator="cpu")
    restored = cpu_fabric.setup(nn.Linear(4, 4))
    cpu_fabric.load(tmp_path / "ckpt", {"model": restored})
    assert torch.equal(restored.weight, model.weight.cpu())
