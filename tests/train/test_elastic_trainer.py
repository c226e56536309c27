"""Trainer resume on another number of processes: a 2-rank ``ddp_spawn`` fit checkpoints in the middle
of epoch 0 (every 3 steps) and writes a ``last`` checkpoint in the middle of epoch 1 (step 11 of 16);
1-process fits resume from the step-3 checkpoint's path and from ``ckpt_path="last"`` with the same global
batch (the per-process batch doubled) and end with the weights of the uninterrupted 2-rank run, their
counters continuing."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import Regressor, regression_data

from fabricx.callbacks import Callback, ModelCheckpoint
from fabricx.train import Trainer

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def _trainer(root, **flags) -> Trainer:
    return Trainer(accelerator="cpu", max_epochs=2, seed=0, default_root_dir=root, num_sanity_val_steps=0,
                   enable_progress_bar=False, enable_model_summary=False, **flags)


class _Steps(Callback):
    def __init__(self) -> None:
        self.taken: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.taken.append((trainer.current_epoch, batch_idx))


def _last_at_step_11(folder):
    return ModelCheckpoint(dirpath=folder, every_n_train_steps=11, save_top_k=0, save_last=True)


def test_checkpoint_at_two_ranks_mid_epoch_resumes_on_one_process(tmp_path):
    data = regression_data(64)
    every = ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=3, save_top_k=-1)
    last = _last_at_step_11(tmp_path / "last")
    two = _trainer(tmp_path / "two", strategy="ddp_spawn", devices=2, callbacks=[every, last])
    uninterrupted = Regressor()
    two.fit(uninterrupted, torch.utils.data.DataLoader(data, batch_size=4, shuffle=True))  # 8 steps per epoch
    assert two.global_step == 16
    [mid] = [path for path in (tmp_path / "ckpts").iterdir() if "step=3" in path.name]  # epoch 0, step 3 of 8

    one = _trainer(tmp_path / "one", devices=1)
    resumed = Regressor()
    one.fit(resumed, torch.utils.data.DataLoader(data, batch_size=8, shuffle=True), ckpt_path=mid)
    assert (one.global_step, one.current_epoch) == (16, 2)  # 5 more steps in epoch 0, 8 in epoch 1
    for (name, expected), got in zip(uninterrupted.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=name)

    # ckpt_path="last" after the world-size change: the newest last checkpoint (step 11, epoch 1, batch 3 of 8)
    steps = _Steps()
    again = _trainer(tmp_path / "again", devices=1, callbacks=[_last_at_step_11(tmp_path / "last"), steps])
    from_last = Regressor()
    again.fit(from_last, torch.utils.data.DataLoader(data, batch_size=8, shuffle=True), ckpt_path="last")
    assert steps.taken == [(1, 3), (1, 4), (1, 5), (1, 6), (1, 7)]  # the rest of epoch 1, nothing replayed
    assert (again.global_step, again.current_epoch) == (16, 2)
    for (name, expected), got in zip(uninterrupted.state_dict().items(), from_last.state_dict().values(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=name)
