"""Timer, fine-tuning, stochastic weight averaging, device statistics and the tqdm bar, checked on real runs."""

from __future__ import annotations

import csv
from datetime import timedelta

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data

from fabricx.callbacks import (
    BackboneFinetuning,
    Callback,
    DeviceStatsMonitor,
    RichProgressBar,
    StochasticWeightAveraging,
    Timer,
    TQDMProgressBar,
)
from fabricx.loggers import CSVLogger
from fabricx.train import Trainer
from fabricx.utilities.exceptions import MisconfigurationException


def _trainer(tmp_path, **kwargs):
    options = dict(
        accelerator="cpu",
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    options.update(kwargs)
    return Trainer(**options)


class _WeightsAtEpochStart(Callback):
    def __init__(self):
        self.weights = []

    def on_train_epoch_start(self, trainer, module):
        self.weights.append([p.detach().clone() for p in module.parameters()])


def test_swa_puts_the_mean_of_the_averaged_epochs_into_the_model(tmp_path):
    torch.manual_seed(0)
    seen = _WeightsAtEpochStart()
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=1)
    lrs = []

    class Rates(Callback):
        def on_train_epoch_end(self, trainer, module):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    # `seen` runs before SWA folds the weights in at each epoch start.
    trainer = _trainer(tmp_path, max_epochs=4, callbacks=[seen, swa, Rates()])
    module = Regressor(lr=0.05)
    trainer.fit(module, loader(regression_data(32)))
    # swa_epoch_start=2 averages the weights at the start of epochs 1, 2, 3 (0-based).
    expected = [torch.stack(ws).mean(0) for ws in zip(*seen.weights[1:], strict=True)]
    for parameter, mean in zip(module.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.detach(), mean)
    assert int(swa.n_averaged) == 3
    # As in Lightning: SWALR is built at the first averaged epoch (which keeps the rate) and steps after it.
    assert lrs == pytest.approx([0.05, 0.05, 0.02, 0.02])


def test_swa_refuses_what_lightning_refuses():
    with pytest.raises(MisconfigurationException, match="swa_epoch_start should be a >0 integer"):
        StochasticWeightAveraging(swa_lrs=0.1, swa_epoch_start=0)
    with pytest.raises(MisconfigurationException, match="positive float"):
        StochasticWeightAveraging(swa_lrs=-1.0)


class _Backboned(Regressor):
    def __init__(self):
        super().__init__(lr=0.1)
        self.backbone = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.net(self.backbone(x))

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)


def test_backbone_finetuning_unfreezes_into_a_new_group_whose_rate_grows(tmp_path):
    groups = []

    class Groups(Callback):
        def on_train_epoch_end(self, trainer, module):
            groups.append([g["lr"] for g in trainer.optimizers[0].param_groups])

    module = _Backboned()
    frozen_at_start = module.backbone.weight.clone()
    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 2.0)
    trainer = _trainer(tmp_path, max_epochs=3, callbacks=[finetuning, Groups()])
    trainer.fit(module, loader(regression_data(32)))
    # epoch 0: one group, backbone frozen; epoch 1: backbone at lr * 0.1; epoch 2: doubled
    assert groups == [[0.1], [0.1, pytest.approx(0.01)], [0.1, pytest.approx(0.02)]]
    assert module.backbone.weight.requires_grad
    assert not torch.equal(module.backbone.weight, frozen_at_start)
    state = finetuning.state_dict()
    assert state["previous_backbone_lr"] == pytest.approx(0.02)
    assert [p for g in state["internal_optimizer_metadata"][0] for p in g["params"]][-2:] == [
        "backbone.weight",
        "backbone.bias",
    ]


def test_timer_stops_training_and_keeps_elapsed_time_in_its_state(tmp_path):
    timer = Timer(duration=timedelta(seconds=0), interval="step", verbose=False)
    trainer = _trainer(tmp_path, max_epochs=5, callbacks=[timer])
    trainer.fit(Regressor(), loader(regression_data(32)))
    assert trainer.global_step == 0 and trainer.current_epoch == 0
    assert timer.time_elapsed("train") >= 0
    restored = Timer(duration="00:00:01:00")
    restored.load_state_dict({"time_elapsed": {"train": 12.5}})
    assert restored.time_elapsed() == 12.5 and restored.time_remaining() == pytest.approx(47.5)
    with pytest.raises(MisconfigurationException, match="Expected a string in the format DD:HH:MM:SS"):
        Timer(duration="1:2")


def test_device_stats_monitor_writes_cpu_stats_on_logging_steps(tmp_path):
    logger = CSVLogger(tmp_path, name="stats")
    trainer = _trainer(tmp_path, max_epochs=1, loggers=logger, log_every_n_steps=2, callbacks=[DeviceStatsMonitor()])
    trainer.fit(Regressor(), loader(regression_data(32)))
    with open(logger.metrics_file_path) as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("DeviceStatsMonitor.on_train_batch_start/cpu_percent")]
    assert [int(row["step"]) for row in rows] == [1, 3]
    with pytest.raises(MisconfigurationException, match="Trainer\\(logger=False\\)"):
        _trainer(tmp_path, max_epochs=1, callbacks=[DeviceStatsMonitor()]).fit(Regressor(), loader(regression_data(8)))


def test_tqdm_bar_replaces_the_default_bar_and_draws_each_epoch(tmp_path, capsys):
    bar = TQDMProgressBar(refresh_rate=1)
    trainer = _trainer(tmp_path, max_epochs=2, enable_progress_bar=True, callbacks=[bar])
    assert trainer.progress_bar_callback is bar
    assert not any(isinstance(cb, RichProgressBar) for cb in trainer.callbacks)
    trainer.fit(Regressor(), loader(regression_data(32)), loader(regression_data(16), shuffle=False))
    out = capsys.readouterr().out
    assert "Epoch 0" in out and "Epoch 1" in out and "4/4" in out and "Validation" in out
