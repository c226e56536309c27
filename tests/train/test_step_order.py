"""The order of one automatic optimization step against Lightning's Trainer, where torch's optimizer step hooks or
a step patched on the optimizer could see a difference.

A torch optimizer runs the closure first thing in its ``step``; fabricx runs it just before ``step()`` when nothing
could tell the two apart, and inside ``step`` (as Lightning does) when a step pre-hook is registered, globally or on
the optimizer, or when ``step`` was replaced on the instance. Each case records the events of the same module under
both Trainers and compares them, and the weights, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import DataLoader, TensorDataset

from fabricx.train import Trainer, TrainModule


def _data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(12, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)


def _module(base: type, events: list[str], prepare: Callable[[torch.optim.Optimizer, list[str]], None]) -> Any:
    class Recorded(base):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            events.append("training_step")
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def on_after_backward(self):
            events.append("backward")

        def on_before_optimizer_step(self, optimizer):
            events.append("on_before_optimizer_step")

        def on_train_batch_end(self, outputs, batch, batch_idx):
            events.append("batch_end")

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            prepare(optimizer, events)
            return optimizer

    return Recorded()


def _pre_and_post_hooks(optimizer: torch.optim.Optimizer, events: list[str]) -> None:
    optimizer.register_step_pre_hook(lambda *_: events.append("pre_hook"))
    optimizer.register_step_post_hook(lambda *_: events.append("post_hook"))


def _post_hook_only(optimizer: torch.optim.Optimizer, events: list[str]) -> None:
    optimizer.register_step_post_hook(lambda *_: events.append("post_hook"))


def _patched_step(optimizer: torch.optim.Optimizer, events: list[str]) -> None:
    own_step = optimizer.step

    def step(closure=None):
        events.append(f"patched step, closure given: {closure is not None}")
        return own_step(closure)

    optimizer.step = step  # type: ignore[method-assign]


def _nothing(optimizer: torch.optim.Optimizer, events: list[str]) -> None:
    pass


def _fit(trainer_class: type, base: type, prepare: Callable[..., None]) -> tuple[list[str], dict[str, torch.Tensor]]:
    events: list[str] = []
    module = _module(base, events, prepare)
    trainer = trainer_class(
        accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, _data())
    return events, module.state_dict()


@pytest.mark.parametrize(
    ("prepare", "first_step"),
    [
        (_nothing, ["training_step", "backward", "on_before_optimizer_step", "batch_end"]),
        (_post_hook_only, ["training_step", "backward", "on_before_optimizer_step", "post_hook", "batch_end"]),
        (_pre_and_post_hooks, ["pre_hook", "training_step", "backward", "on_before_optimizer_step", "post_hook",
                               "batch_end"]),
        (_patched_step, ["patched step, closure given: True", "training_step", "backward",
                         "on_before_optimizer_step", "batch_end"]),
    ],
    ids=["plain", "post-hook", "pre-hook", "patched-step"],
)
def test_step_events_and_weights_match_lightning(prepare: Callable[..., None], first_step: list[str]) -> None:
    ours, our_weights = _fit(Trainer, TrainModule, prepare)
    theirs, their_weights = _fit(pl.Trainer, pl.LightningModule, prepare)
    assert ours[: len(first_step)] == first_step
    assert ours == theirs
    assert our_weights.keys() == their_weights.keys()
    for name, value in our_weights.items():
        assert torch.equal(value, their_weights[name]), name


def test_a_global_step_pre_hook_runs_before_the_closure_as_in_lightning() -> None:
    def fit(trainer_class: type, base: type) -> list[str]:
        events: list[str] = []
        handle = register_optimizer_step_pre_hook(lambda *_: events.append("global_pre_hook"))
        try:
            module = _module(base, events, _nothing)
            trainer = trainer_class(
                accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False,
            )
            trainer.fit(module, _data())
        finally:
            handle.remove()
        return events

    ours = fit(Trainer, TrainModule)
    assert ours[:2] == ["global_pre_hook", "training_step"]
    assert ours == fit(pl.Trainer, pl.LightningModule)
