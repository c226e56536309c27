"""`configure_optimizers` returning `torch.optim.LBFGS`: the optimizer re-evaluates the closure inside its step, as
in Lightning; the same module trained by Lightning's Trainer and by fabricx's ends with the same weights."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx.train import Trainer, TrainModule


def _data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(24, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)


def _module(base: type) -> torch.nn.Module:
    class LBFGSRegression(base):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)
            self.closure_calls = 0
            self.hook_calls = 0

        def training_step(self, batch, batch_idx):
            self.closure_calls += 1
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def on_before_optimizer_step(self, optimizer):
            self.hook_calls += 1

        def configure_optimizers(self):
            return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)

    return LBFGSRegression()


def _fit(trainer_class: type, module: torch.nn.Module, clip: bool) -> torch.nn.Module:
    flags = {"gradient_clip_val": 0.5} if clip else {}
    trainer = trainer_class(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, **flags,
    )
    trainer.fit(module, _data())
    return module


def test_lbfgs_reevaluates_the_closure_and_trains_as_in_lightning() -> None:
    for clip in (False, True):
        ours = _fit(Trainer, _module(TrainModule), clip)
        theirs = _fit(pl.Trainer, _module(pl.LightningModule), clip)
        # More evaluations than batches: the closure ran inside LBFGS's step, each followed by the step's hooks.
        assert ours.closure_calls > 6 and ours.closure_calls == theirs.closure_calls
        assert ours.hook_calls == theirs.hook_calls == ours.closure_calls
        for name, value in ours.state_dict().items():
            assert torch.equal(value, theirs.state_dict()[name]), (clip, name)
