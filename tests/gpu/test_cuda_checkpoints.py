"""Checkpoints on CUDA: pinned host copies, the deferred copy of an asynchronous save ordered on the caller's
stream, and exact resumption (bit-identical to an uninterrupted run, deterministic algorithms on).

Skipped without a GPU; `FABRICX_GPU_TESTS_ON_CPU=1` runs the resumption test on the CPU (see test_cuda_paths.py).
"""

import os

# cuBLAS is deterministic only with this set before its first use (`make gpu-check` sets it for the run).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

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
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="CUDA-only behaviour (pinned memory, streams)")


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1))


@cuda_only
def test_host_copies_of_cuda_tensors_are_pinned():
    from fabricx.checkpoint.background import stage_to_host

    staged = stage_to_host({"w": torch.randn(128, 128, device="cuda"), "nested": [torch.ones(3, device="cuda")]})
    assert staged["w"].device.type == "cpu" and staged["w"].is_pinned()
    assert staged["nested"][0].is_pinned()


@cuda_only
def test_async_save_copies_after_the_work_queued_on_the_callers_stream(tmp_path):
    """Parameters written by work still queued on a side stream when save(async_save=True) is called are
    saved as that work leaves them, and the following optimizer.step() does not leak into the checkpoint."""
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cuda", devices=1)
    model = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512))
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(model(torch.randn(8, 512, device="cuda")).square().mean())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        slow = torch.randn(4096, 4096, device="cuda")
        for _ in range(30):  # tens of milliseconds of queued work the written values depend on
            slow = torch.tanh(slow @ slow)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.copy_(torch.full_like(parameter, 3.0) + slow[0, 0] * 0)
        handle = fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer}, async_save=True)
        assert handle is not None
        optimizer.step()  # waits for the copy, then moves the parameters away from 3.0
    handle.wait()
    torch.cuda.synchronize()
    assert all(not torch.all(p == 3.0) for p in model.parameters())
    restored = fabric.setup(nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512)))
    fabric.load(tmp_path / "ckpt", {"model": restored}, strict=False)
    for parameter in restored.parameters():
        assert torch.all(parameter == 3.0)


def _train(fabric: Fabric, model, optimizer, loader, steps: int) -> None:
    iterator = iter(loader)
    for _ in range(steps):
        x, y = next(iterator)
        fabric.backward(nn.functional.mse_loss(model(x).float(), y))
        optimizer.step()
        optimizer.zero_grad()


def _setup(precision: str, seed: int):
    fabric = Fabric(accelerator=DEVICE, devices=1, precision=precision)
    fabric.seed_everything(seed)
    model = _model()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(512, 16, generator=generator), torch.randn(512, 1, generator=generator))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=16, shuffle=True))
    return fabric, model, optimizer, loader


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed"])
def test_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path, precision):
    torch.use_deterministic_algorithms(True)
    try:
        fabric, model, optimizer, loader = _setup(precision, seed=7)
        _train(fabric, model, optimizer, loader, 12)
        expected = [p.detach().clone() for p in model.parameters()]

        fabric, model, optimizer, loader = _setup(precision, seed=7)
        _train(fabric, model, optimizer, loader, 6)
        fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer, "loader": loader})

        fabric, model, optimizer, loader = _setup(precision, seed=123)  # other weights, other RNG
        fabric.load(tmp_path / "ckpt", {"model": model, "optimizer": optimizer, "loader": loader})
        _train(fabric, model, optimizer, loader, 6)
    finally:
        torch.use_deterministic_algorithms(False)
    for ours, theirs in zip(model.parameters(), expected, strict=True):
        assert torch.equal(ours, theirs)
