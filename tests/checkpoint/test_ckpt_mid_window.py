"""Saving inside a gradient-accumulation window resumes bit for bit (one process, CPU).

This process saves inside a window three ways: ``Fabric(grad_accum_steps=3)`` + ``fabric.accumulate``,
a manual ``no_backward_sync`` loop, and the Accelerate tutorial pattern
(``Accelerator(gradient_accumulation_steps=2)``, ``save_state()`` every 5 batches). One fresh
process (this file run as a script) resumes all three; each must end with the uninterrupted run's
weights exactly. (DDP, FSDP2 and DeepSpeed: tests/checkpoint/test_ckpt_pipeline_strategies.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

BATCHES = 10


def _batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(index)
    return torch.randn(6, 4, generator=generator), torch.randn(6, 1, generator=generator)


def _objects(lr: float = 0.05) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _fabric_run(root: Path, start: int, stop: int, save_at: int | None = None) -> dict[str, torch.Tensor]:
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", grad_accum_steps=3)
    model, optimizer = fabric.setup(*_objects())
    state = {"model": model, "optimizer": optimizer, "batch": 0}
    if start:
        fabric.load(root / "fabric_mid", state)
        assert state["batch"] == start
    while state["batch"] < stop:
        x, y = _batch(state["batch"])
        with fabric.accumulate(model):
            fabric.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        state["batch"] += 1
        if state["batch"] == save_at:
            assert not fabric.sync_gradients  # inside a window
            fabric.save(root / "fabric_mid", state)
    return _weights(fabric.unwrap(model))


def _manual_run(root: Path, start: int, stop: int, save_at: int | None = None) -> dict[str, torch.Tensor]:
    """Accumulate over pairs with no_backward_sync, the optimizer stepping on odd batches."""
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu")
    model, optimizer = fabric.setup(*_objects())
    state = {"model": model, "optimizer": optimizer, "batch": 0}
    if start:
        fabric.load(root / "manual_mid", state)
    while state["batch"] < stop:
        x, y = _batch(state["batch"])
        last = state["batch"] % 2 == 1
        with fabric.no_backward_sync(model, enabled=not last):
            fabric.backward(nn.functional.mse_loss(model(x), y) / 2)
        if last:
            optimizer.step()
            optimizer.zero_grad()
        state["batch"] += 1
        if state["batch"] == save_at:
            fabric.save(root / "manual_mid", state)
    return _weights(fabric.unwrap(model))


def _accelerate_run(root: Path, start: int, stop: int, save_every: int | None = None) -> dict[str, torch.Tensor]:
    from fabricx.compat.accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer = accelerator.prepare(*_objects())
    if start:
        accelerator.load_state(root / f"accelerate_{start}")
    for index in range(start, stop):
        x, y = _batch(index)
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        if save_every and (index + 1) % save_every == 0:
            accelerator.save_state(root / f"accelerate_{index + 1}")
    return _weights(accelerator.unwrap_model(model))


def _resume_all(root: Path) -> None:
    results = {
        "fabric": _fabric_run(root, 4, BATCHES),
        "manual": _manual_run(root, 3, BATCHES),
        "accelerate": _accelerate_run(root, 5, BATCHES),
    }
    torch.save(results, root / "resumed.pt")


def test_mid_window_saves_resume_exactly_in_a_fresh_process(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    uninterrupted = {
        "fabric": _fabric_run(tmp_path, 0, BATCHES),
        "manual": _manual_run(tmp_path, 0, BATCHES),
        "accelerate": _accelerate_run(tmp_path, 0, BATCHES, save_every=5),  # saves at 5 (mid-window) and 10
    }
    # Interrupted runs: stop right after the mid-window save (batch 4 of windows of 3; batch 3 of pairs).
    _fabric_run(tmp_path, 0, 4, save_at=4)
    _manual_run(tmp_path, 0, 3, save_at=3)
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = torch.load(tmp_path / "resumed.pt")
    for name, weights in uninterrupted.items():
        assert weights.keys() == resumed[name].keys()
        for key, value in weights.items():
            assert torch.equal(value, resumed[name][key]), f"{name}: {key} differs after a mid-window resume"


def test_a_save_inside_a_window_holds_the_gradients_and_position(tmp_path: Path) -> None:
    from fabricx.checkpoint.contents import reserved_key
    from fabricx.checkpoint.format import read_checkpoint

    _fabric_run(tmp_path, 0, 4, save_at=4)
    loaded = read_checkpoint(tmp_path / "fabric_mid")
    position = loaded.shared[reserved_key("accumulation")]
    assert (position["counter"], position["window_length"], position["has_gradients"]) == (1, 3, True)
    grads = loaded.per_rank[reserved_key("gradients")]["model"]
    assert sorted(grads) == ["0.bias", "0.weight", "3.bias", "3.weight"]
    assert all(g.abs().sum() > 0 for g in grads.values())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    torch.set_num_threads(1)
    _resume_all(Path(sys.argv[1]))
