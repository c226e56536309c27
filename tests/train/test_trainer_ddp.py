"""Trainer on two real gloo processes (ddp_spawn): metrics synchronised, output on rank zero only."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import CaptureOutput, Classifier, classification_data

from fabricx.train import Trainer

pytestmark = pytest.mark.distributed


def test_ddp_spawn_accuracy_equals_whole_validation_set_and_rank_one_prints_nothing(tmp_path):
    train = classification_data(64, seed=1)
    val = classification_data(64, seed=2)  # 32 samples per rank, no padding
    trainer = Trainer(
        accelerator="cpu",
        strategy="ddp_spawn",
        devices=2,
        max_epochs=2,
        seed=0,
        default_root_dir=tmp_path,
        callbacks=[CaptureOutput(str(tmp_path))],
        num_sanity_val_steps=1,
    )
    module = Classifier()
    trainer.fit(
        module,
        torch.utils.data.DataLoader(train, batch_size=8, shuffle=True),
        torch.utils.data.DataLoader(val, batch_size=8),
    )
    assert trainer.global_step == 2 * 4  # 32 samples per rank, batch 8

    # Weights came back from rank 0: the accuracy over the whole validation set, computed here.
    with torch.no_grad():
        correct = (module(val.tensors[0]).argmax(dim=1) == val.tensors[1]).sum().item()
    metrics = trainer.callback_metrics
    assert float(metrics["val_acc"]) == pytest.approx(correct / 64)
    assert float(metrics["correct_all_ranks"]) == correct
    assert float(metrics["correct_this_rank"]) < correct  # rank 0 alone saw half of the data
    assert 0 < correct < 64

    rank0 = (tmp_path / "stdout_rank0.txt").read_text()
    rank1 = (tmp_path / "stdout_rank1.txt").read_text()
    assert "Epoch 1/1: 4/4" in rank0 and "Total params" in rank0 and "val_acc=" in rank0
    assert rank1 == ""
    # As in Lightning: with a logger, checkpoints go to <save_dir>/<name>/<version>/checkpoints
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_ddp_spawn_early_stopping_on_one_rank_stops_every_rank(tmp_path):
    from _train_helpers import RankOneDiverges, loader, regression_data

    from fabricx.callbacks import EarlyStopping, Timer

    early = EarlyStopping(monitor="m", patience=10)
    trainer = Trainer(
        accelerator="cpu",
        strategy="ddp_spawn",
        devices=2,
        max_epochs=6,
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[early, Timer(duration="00:01:00:00")],
    )
    trainer.fit(RankOneDiverges(), loader(regression_data(32)))
    # rank 1 saw a non-finite value at the end of epoch 1: both ranks stopped there (2 steps per epoch and rank)
    assert (trainer.current_epoch, trainer.global_step) == (2, 4)


class FailsOnItsFirstBatch(Classifier):  # at module level: ddp_spawn pickles it
    def training_step(self, batch, batch_idx):
        raise ValueError("a failing step")


def test_a_failed_ddp_spawn_fit_leaves_the_module_attached_as_lightning_does(tmp_path):
    # Lightning's main process holds the module from the start of fit; fabricx's attached it only when the spawned
    # processes' results came back, so after a raise `trainer.lightning_module` was None.
    trainer = Trainer(accelerator="cpu", strategy="ddp_spawn", devices=2, max_epochs=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    module = FailsOnItsFirstBatch()
    with pytest.raises(Exception, match="a failing step"):
        trainer.fit(module, torch.utils.data.DataLoader(classification_data(16, seed=1), batch_size=8))
    assert trainer.lightning_module is module
    assert module.trainer is trainer
