"""A ``self.log`` call repeated every step goes straight to what the first one recorded; nothing it checks or keeps
may change because of that: the value is still the one logged (a later in-place change does not reach it), and an
option or a kind of value that changes in a later step is still refused."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx.train import Trainer, TrainModule
from fabricx.utilities.exceptions import MisconfigurationException

STEPS = 4


class _Logging(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 1)
        self.logged: list[tuple[float, float, bool]] = []

    def step_loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(module: TrainModule, tmp_path) -> Trainer:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(2 * STEPS, 3, generator=generator), torch.randn(2 * STEPS, 1, generator=generator))
    trainer = Trainer(
        accelerator="cpu", max_steps=STEPS, loggers=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=tmp_path,
    )
    trainer.fit(module, DataLoader(data, batch_size=2))
    return trainer


def test_every_step_keeps_a_detached_copy_of_the_value_as_logged(tmp_path) -> None:
    class InPlaceAfterLog(_Logging):
        def training_step(self, batch, batch_idx):
            loss = self.step_loss(batch)
            self.log("loss", loss)
            self.log("doubled", loss * 2, on_epoch=True)
            before = loss.item()
            loss.mul_(10)  # changed in place after logging: what was logged stays as it was
            logged = self.trainer.callback_metrics["loss"]
            self.logged.append((before, logged.item(), logged.requires_grad))
            return loss

    module = InPlaceAfterLog()
    trainer = _fit(module, tmp_path)
    assert len(module.logged) == STEPS
    for before, logged, requires_grad in module.logged:
        assert logged == before and not requires_grad
    assert trainer.callback_metrics["loss"].item() == module.logged[-1][0]
    epoch = trainer.callback_metrics["doubled_epoch"].item()
    assert epoch == pytest.approx(2 * sum(before for before, _, _ in module.logged) / STEPS, rel=1e-6)


def test_an_option_changed_in_a_later_step_is_still_refused(tmp_path) -> None:
    class ChangesLater(_Logging):
        def training_step(self, batch, batch_idx):
            loss = self.step_loss(batch)
            self.log("loss", loss, prog_bar=batch_idx >= 2)
            return loss

    with pytest.raises(MisconfigurationException, match=r"self.log\(loss, ...\)` twice in `training_step`"):
        _fit(ChangesLater(), tmp_path)


def test_a_plain_value_after_a_metric_under_the_same_name_is_still_refused(tmp_path) -> None:
    torchmetrics = pytest.importorskip("torchmetrics")

    class MetricThenTensor(_Logging):
        def __init__(self) -> None:
            super().__init__()
            self.mean = torchmetrics.MeanMetric()

        def training_step(self, batch, batch_idx):
            loss = self.step_loss(batch)
            if batch_idx == 1:
                self.mean.update(loss.detach())
                self.log("value", self.mean, metric_attribute="mean")
            else:  # the same options: only the kind of value differs
                self.log("value", loss, metric_attribute="mean")
            return loss

    with pytest.raises(MisconfigurationException, match="first given a torchmetrics Metric"):
        _fit(MetricThenTensor(), tmp_path)


def test_step_values_read_back_as_tensors_of_the_logged_dtype(tmp_path) -> None:
    """A CPU step value is kept as its number between reads: every read still gives a tensor, of the dtype
    logged, holding exactly the value logged (float32 and float64 alike), and a checkpoint holds tensors."""

    class TwoDtypes(_Logging):
        def training_step(self, batch, batch_idx):
            loss = self.step_loss(batch)
            self.log("loss", loss)
            self.log("loss64", loss.double() / 3)
            if batch_idx == 1:  # logged in one batch only: the dicts keep it after later batches
                self.log("once", loss * 5)
            self.logged.append((loss.item(), (loss.double() / 3).item(), batch_idx == 1))
            return loss

    module = TwoDtypes()
    trainer = _fit(module, tmp_path)
    metrics = trainer.callback_metrics
    assert metrics["loss"].dtype == torch.float32 and metrics["loss64"].dtype == torch.float64
    assert metrics["loss"].item() == module.logged[-1][0]
    assert metrics["loss64"].item() == module.logged[-1][1]
    once = next(value for value, _, logged in module.logged if logged)
    assert metrics["once"].item() == (torch.tensor(once, dtype=torch.float32) * 5).item()
    for read in (metrics, trainer.logged_metrics):
        assert all(type(value) is torch.Tensor for value in read.values())
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    saved = torch.load(tmp_path / "after.ckpt", weights_only=True)
    kept = [value for key, value in _walk(saved) if key == "epoch_metrics"]
    assert kept and all(isinstance(v, torch.Tensor) for found in kept for v in found.values())


def _walk(tree, key=None):
    yield key, tree
    if isinstance(tree, dict):
        for name, value in tree.items():
            yield from _walk(value, name)
