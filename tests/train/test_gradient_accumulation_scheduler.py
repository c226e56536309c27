"""`GradientAccumulationScheduler` beyond Lightning's own tests (ported in tests/conformance/trainer/callbacks) and
the differential contract (tests/train/test_lightning_contracts.py): an exact resume in the middle of an epoch,
and DeepSpeed refused by what the strategy can do, not by its class name."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data

from fabricx.callbacks import GradientAccumulationScheduler, ModelCheckpoint
from fabricx.train import Trainer


def _fit(root, ckpt_path=None):
    torch.manual_seed(0)
    module = Regressor()
    trainer = Trainer(
        accelerator="cpu",
        default_root_dir=root,
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            GradientAccumulationScheduler({1: 2, 2: 4}),
            ModelCheckpoint(dirpath=root, every_n_train_steps=10, save_top_k=-1, filename="{step}"),
        ],
    )
    # 8 shuffled batches an epoch: 8 steps in epoch 0, 4 in epoch 1, 2 in epoch 2
    trainer.fit(module, loader(regression_data(64), batch_size=8), ckpt_path=ckpt_path)
    return trainer, module


def test_a_run_resumed_in_the_middle_of_an_epoch_accumulates_that_epochs_factor(tmp_path):
    # Lightning calls no on_train_epoch_start for the epoch it resumes in, so its scheduler leaves that epoch at
    # the Trainer's factor (1) until the next epoch starts; fabricx's sets the epoch's factor in on_train_start.
    full_trainer, full = _fit(tmp_path / "full")
    assert full_trainer.global_step == 14 and full_trainer.accumulate_grad_batches == 4
    middle = tmp_path / "full" / "step=10.ckpt"  # epoch 1, after 4 of its 8 batches
    trainer, resumed = _fit(tmp_path / "resumed", ckpt_path=middle)
    assert trainer.global_step == 14
    for key, value in full.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key


def test_deepspeed_is_refused_by_capability(tmp_path):
    # DeepSpeed's engine owns the accumulation factor (Lightning refuses its DeepSpeedStrategy by class); a
    # user's subclass under another name is refused the same way. Made without its constructor: no DeepSpeed import.
    from types import SimpleNamespace

    from fabricx.strategies.deepspeed.strategy import DeepSpeedStrategy

    renamed = type("MyStrategy", (DeepSpeedStrategy,), {})
    trainer = SimpleNamespace(strategy=renamed.__new__(renamed), accumulate_grad_batches=1)
    with pytest.raises(RuntimeError, match="`MyStrategy` does not support `accumulate_grad_batches` changing"):
        GradientAccumulationScheduler({1: 2}).on_train_start(trainer, Regressor())  # type: ignore[arg-type]
