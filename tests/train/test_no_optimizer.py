"""``configure_optimizers`` returning ``None`` trains with a stand-in that changes nothing (as Lightning)."""

from __future__ import annotations

import pytest
import torch


def test_fit_without_optimizer_runs_the_steps_and_keeps_the_weights(tmp_path):
    from _train_helpers import Regressor, loader, regression_data

    from fabricx.train import Trainer

    class NoOptimizerRegressor(Regressor):
        steps = 0

        def training_step(self, batch, batch_idx):
            self.steps += 1
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self):
            return None

    model = NoOptimizerRegressor()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=3,
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.warns(UserWarning, match="returned `None`, this fit will run with no optimizer"):
        trainer.fit(model, loader(regression_data(64)))
    assert model.steps == 3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert "No Optimizer" in repr(trainer.optimizers[0])
