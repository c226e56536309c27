"""Gradient accumulation in one process: window boundaries, real-length scaling, no-op steps, refused saves.

Under DDP (no all-reduce off a boundary, equality with the large-batch step) it is checked in
test_resume_ddp.py, inside the launch that file makes anyway.
"""

from __future__ import annotations

import copy
import gc
import weakref

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric

FEATURES = 3


def _data(samples: int):
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(samples, FEATURES, generator=generator)
    y = torch.randn(samples, 1, generator=generator)
    return torch.arange(samples), x, y


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, 1))


def _reference_grads(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Gradients of ONE step on the window's samples as one large batch."""
    reference = copy.deepcopy(module)
    reference.zero_grad(set_to_none=True)
    nn.functional.mse_loss(reference(x), y).backward()
    return [p.grad.clone() for p in reference.parameters()]


def test_windows_of_four_over_ten_batches_match_large_batch_steps():
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=4)
    ids, x_all, y_all = _data(40)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    model, optimizer, scheduler = fabric.setup(model, optimizer, scheduler=scheduler)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(ids, x_all, y_all), batch_size=4))
    window: list[int] = []
    window_lengths: list[int] = []
    parameter_changes = 0
    for _ in range(2):  # the window count restarts with every epoch
        for batch_ids, x, y in loader:
            before = [p.detach().clone() for p in model.parameters()]
            with fabric.accumulate(model):
                fabric.backward(nn.functional.mse_loss(model(x), y))
                window.extend(batch_ids.tolist())
                if fabric.sync_gradients:
                    expected = _reference_grads(model.module, x_all[window], y_all[window])
                    for got, want in zip([p.grad for p in model.parameters()], expected, strict=True):
                        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
                    window_lengths.append(len(window) // 4)
                    window = []
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
            after = list(model.parameters())
            parameter_changes += any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # 10 batches with N=4: steps after batches 4, 8 and 10; the last window holds 2 (scaled by 1/2).
    assert window_lengths == [4, 4, 2, 4, 4, 2]
    assert parameter_changes == 6
    assert scheduler.last_epoch == 6


def test_without_accumulate_context_every_step_counts():
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=4)
    model = _model()
    model, _ = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    _, x, y = _data(4)
    fabric.backward(nn.functional.mse_loss(model(x), y))
    grads = [p.grad.clone() for p in model.parameters()]
    expected = _reference_grads(_model(), x, y)  # unscaled: outside accumulate() nothing is divided
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_save_inside_a_window_continues_the_window_after_loading(tmp_path):
    """A save after micro-batch 1 of 4 holds the gradients and the position (it used to be refused)."""

    def build():
        fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=4)
        model = _model()
        return fabric, *fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))

    def micro_batches(fabric, model, optimizer, count):
        for _ in range(count):
            with fabric.accumulate(model):
                fabric.backward(nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()

    _, x, y = _data(4)
    fabric, model, optimizer = build()
    micro_batches(fabric, model, optimizer, 1)
    fabric.save(tmp_path / "ckpt", {"model": model, "optimizer": optimizer})
    micro_batches(fabric, model, optimizer, 3)  # the window ends: one optimizer step over 4 micro-batches
    fresh, fresh_model, fresh_optimizer = build()
    fresh.load(tmp_path / "ckpt", {"model": fresh_model, "optimizer": fresh_optimizer})
    assert all(p.grad is not None for p in fresh_model.parameters())
    micro_batches(fresh, fresh_model, fresh_optimizer, 3)
    for got, want in zip(fresh_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(got, want)


def test_an_error_inside_accumulate_leaves_the_window_state_consistent():
    """The body raising (a bad batch) ends the micro-batch: not in a window, the counter kept off a
    boundary and reset on one, and a model that was not set up is refused on the first micro-batch."""
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=2)
    module = _model()
    model, _ = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    state = fabric._accumulation
    for expected_counter in (1, 0, 1):
        try:
            with fabric.accumulate(model):
                assert state.in_window
                raise ValueError("bad batch")
        except ValueError:
            pass
        assert not state.in_window
        assert state.counter == expected_counter
    state.counter = 0
    try:
        with fabric.accumulate(nn.Linear(1, 1)):
            raise AssertionError("the body must not run for a model that was not set up")
    except TypeError as error:
        assert "fabric.setup" in str(error)
    assert not state.in_window


def test_the_last_window_follows_a_dataset_that_grew_between_epochs():
    """The epoch's length is measured when each epoch starts (not once for the loader's lifetime)."""
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=4)
    model = _model()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    samples = list(zip(*_data(40)[1:], strict=True))
    loader = fabric.setup_dataloaders(DataLoader(samples, batch_size=4))
    lengths = []
    for _ in range(2):
        for x, y in loader:
            with fabric.accumulate(model):
                fabric.backward(nn.functional.mse_loss(model(x), y))
                if fabric.sync_gradients:
                    lengths.append(fabric._accumulation.window_length)
                optimizer.step()
                optimizer.zero_grad()
        samples.extend(samples[:4])  # one more batch next epoch: 11, so the last window holds 3
    assert lengths == [4, 4, 2, 4, 4, 3]


def test_one_context_serves_consecutive_micro_batches_without_keeping_the_model_alive():
    fabric = Fabric(accelerator="cpu", devices=1, grad_accum_steps=2)
    first, second = (fabric.setup_module(_model()) for _ in range(2))
    assert fabric.accumulate(first) is fabric.accumulate(first)
    with fabric.accumulate(first):
        inner = fabric.accumulate(first)  # the outer context is in use: a new one
        assert inner is not fabric._window
    fabric._accumulation.counter = 0
    _, x, y = _data(4)
    boundaries = []
    for model in (first, second, first, second):  # alternating models share one window count
        with fabric.accumulate(model):
            fabric.backward(nn.functional.mse_loss(model(x), y))
            boundaries.append(fabric.sync_gradients)
    assert boundaries == [False, True, False, True]
    collected = weakref.ref(second)  # the context of the last micro-batch was second's
    del model, second
    gc.collect()
    assert collected() is None
