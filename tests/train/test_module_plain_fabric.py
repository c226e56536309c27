"""A TrainModule set up by a plain Fabric knows that Fabric, as a LightningModule does under Lightning Fabric:
``self.fabric``, ``self.device``, ``self.log``/``log_dict``, ``self.logger(s)``, the ranks, ``self.optimizers()``
and ``manual_backward`` go through it (Lightning's reinforcement-learning example relies on this)."""

from __future__ import annotations

import pytest
import torch

from fabricx import Fabric, Trainer, TrainModule
from fabricx.loggers import Logger


class _Collecting(Logger):
    name = "collecting"
    version = 0

    def __init__(self) -> None:
        self.metrics: list[tuple[dict, int | None]] = []

    def log_metrics(self, metrics, step=None):
        self.metrics.append((dict(metrics), step))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


class _Agent(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        loss = self(batch).pow(2).mean()
        self.log("loss", loss)
        return loss


def test_set_up_by_a_plain_fabric_the_module_uses_that_fabric():
    logger = _Collecting()
    fabric = Fabric(accelerator="cpu", devices=1, loggers=logger)
    agent = _Agent()
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)
    model, optimizer = fabric.setup(agent, optimizer)

    assert agent.fabric is fabric
    assert agent.device == fabric.device
    assert agent.logger is logger and agent.loggers == [logger]
    assert (agent.global_rank, agent.local_rank) == (0, 0)
    assert agent.optimizers() is optimizer

    before = agent.layer.weight.detach().clone()
    loss = model.training_step(torch.ones(4, 3), 0)
    agent.manual_backward(loss)
    assert agent.layer.weight.grad is not None
    agent.optimizers().step()
    assert not torch.equal(agent.layer.weight, before)

    agent.log_dict({"a": 1.0, "b": torch.tensor(2.0)})
    agent.log("hidden", 3.0, logger=False)
    assert [sorted(m) for m, _ in logger.metrics] == [["loss"], ["a", "b"]]
    assert logger.metrics[0][0]["loss"] == pytest.approx(loss.item())
    with pytest.raises(ValueError):
        agent.log("vector", torch.ones(2))


def test_a_module_the_trainer_ran_is_not_left_attached_to_the_trainers_fabric(tmp_path):
    class Regressor(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    module = Regressor()
    trainer = Trainer(
        accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False, default_root_dir=tmp_path
    )
    trainer.fit(module, torch.utils.data.DataLoader(torch.ones(4, 3), batch_size=2))
    assert module.__dict__["_fabric"] is None
    assert module.fabric is trainer.fabric
