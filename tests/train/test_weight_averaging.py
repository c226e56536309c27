"""`WeightAveraging`/`EMAWeightAveraging` beyond Lightning's own tests (ported in
`tests/conformance/trainer/callbacks/test_pl_weight_averaging.py`) and the bit-for-bit contract
(`tests/train/test_lightning_contracts.py`): exact resumption where Lightning's is not, and the averaged copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from fabricx.callbacks import (
    Callback,
    EMAWeightAveraging,
    OnExceptionCheckpoint,
    StochasticWeightAveraging,
    WeightAveraging,
)
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.exceptions import FabricxError


class Stop(Exception):
    pass


class Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))
        self.stop_at: tuple[int, int] | None = None  # (epoch, batch) after which training stops
        self.stop_in_validation: int | None = None  # the epoch whose validation raises

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # SWA recomputes the batch-norm statistics through it
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if (self.current_epoch, batch_idx) == self.stop_at:
            raise Stop("stopped")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.current_epoch == self.stop_in_validation and batch_idx == 1:
            raise Stop("stopped inside validation")
        self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=0.05)


class StopAtEpochEnd(Callback):
    """Raises in epoch ``epoch``'s end hooks, after the averaging callback before it updated."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if trainer.current_epoch == self.epoch:
            raise Stop("stopped at the epoch's end")


def _data(seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=6, shuffle=True)


def _fit(
    folder: Path, averaging: WeightAveraging | StochasticWeightAveraging, *, stop_at: tuple[int, int] | None = None,
    stop_epoch: int | None = None, ckpt_path: str | None = None, stop_in_validation: int | None = None,
) -> tuple[Net, Any]:
    torch.manual_seed(0)
    module = Net()
    module.stop_at, module.stop_in_validation = stop_at, stop_in_validation
    trainer = Trainer(
        accelerator="cpu", max_epochs=3, accumulate_grad_batches=3, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=folder,
        callbacks=[averaging, StopAtEpochEnd(stop_epoch), OnExceptionCheckpoint(folder)],
    )
    try:
        trainer.fit(module, _data(1), _data(2), ckpt_path=ckpt_path)
    except Stop:
        pass
    return module, averaging


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in module.state_dict().items()}


def _assert_same(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> None:
    assert expected.keys() == actual.keys()
    for key, value in expected.items():
        assert torch.equal(value, actual[key]), key


def test_a_fit_stopped_inside_an_epoch_resumes_to_the_same_model_and_average(tmp_path: Path) -> None:
    # Stopped after batch 4 of epoch 1 (inside an accumulation window of 3): Lightning restarts that epoch, so its
    # average and weights differ from the uninterrupted run's; fabricx continues the epoch and the window.
    straight, straight_ema = _fit(tmp_path / "a", EMAWeightAveraging(decay=0.7))
    _fit(tmp_path / "b", EMAWeightAveraging(decay=0.7), stop_at=(1, 4))
    resumed, resumed_ema = _fit(tmp_path / "b", EMAWeightAveraging(decay=0.7),
                                ckpt_path=str(tmp_path / "b" / "on_exception.ckpt"))
    _assert_same(_state(straight), _state(resumed))
    assert straight_ema._average_model is not None and resumed_ema._average_model is not None
    _assert_same(_state(straight_ema._average_model), _state(resumed_ema._average_model))
    assert int(resumed_ema._average_model.n_averaged) == 9  # 3 optimizer steps an epoch


def test_a_fit_stopped_in_an_epochs_end_hooks_does_not_average_that_epoch_twice(tmp_path: Path) -> None:
    # Updates after each epoch only (SWA-like). The stop comes after the average took epoch 1's weights; the resumed
    # fit runs epoch 1's end hooks again, and the saved epoch of the last update keeps it from averaging epoch 1
    # twice (Lightning's state keeps the step alone).
    def by_epoch() -> EMAWeightAveraging:
        return EMAWeightAveraging(decay=0.5, update_every_n_steps=0, update_starting_at_epoch=0)

    straight, straight_ema = _fit(tmp_path / "a", by_epoch())
    _fit(tmp_path / "b", by_epoch(), stop_epoch=1)
    resumed, resumed_ema = _fit(tmp_path / "b", by_epoch(), ckpt_path=str(tmp_path / "b" / "on_exception.ckpt"))
    assert straight_ema._average_model is not None and resumed_ema._average_model is not None
    assert int(resumed_ema._average_model.n_averaged) == int(straight_ema._average_model.n_averaged) == 3
    _assert_same(_state(straight_ema._average_model), _state(resumed_ema._average_model))
    _assert_same(_state(straight), _state(resumed))


def test_a_fit_stopped_inside_validation_resumes_from_the_trained_weights_not_the_average(tmp_path: Path) -> None:
    # Validation runs on the average: the callback swaps it into the model until validation ends. A checkpoint
    # written in between (`OnExceptionCheckpoint`) must still name the trained weights `current_model_state`;
    # Lightning's names the average so, and its resumed run trains on from the average.
    straight, straight_ema = _fit(tmp_path / "a", EMAWeightAveraging(decay=0.7))
    _fit(tmp_path / "b", EMAWeightAveraging(decay=0.7), stop_in_validation=1)
    resumed, resumed_ema = _fit(tmp_path / "b", EMAWeightAveraging(decay=0.7),
                                ckpt_path=str(tmp_path / "b" / "on_exception.ckpt"))
    _assert_same(_state(straight), _state(resumed))
    assert straight_ema._average_model is not None and resumed_ema._average_model is not None
    _assert_same(_state(straight_ema._average_model), _state(resumed_ema._average_model))


@pytest.mark.parametrize("stop", [{"stop_at": (1, 4)}, {"stop_in_validation": 1}, {"stop_epoch": 1}],
                         ids=["mid-epoch", "in-validation", "epoch-end"])
def test_swa_resumed_after_its_schedule_began_goes_on_as_the_run_left_alone(tmp_path: Path, stop: dict) -> None:
    # The schedule begins at epoch 1. Resumed inside that epoch, Lightning's SWA builds its SWALR only at the next
    # epoch's start, and building it steps the optimizer's rate away from the restored one.
    def swa() -> StochasticWeightAveraging:
        return StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=2)

    straight, straight_swa = _fit(tmp_path / "a", swa())
    _fit(tmp_path / "b", swa(), **stop)
    resumed, resumed_swa = _fit(tmp_path / "b", swa(), ckpt_path=str(tmp_path / "b" / "on_exception.ckpt"))
    _assert_same(_state(straight), _state(resumed))
    _assert_same(_state(straight_swa._average_model), _state(resumed_swa._average_model))
    assert resumed_swa.n_averaged is not None and int(resumed_swa.n_averaged) == int(straight_swa.n_averaged) == 2
    assert resumed_swa._swa_scheduler.state_dict() == straight_swa._swa_scheduler.state_dict()


def test_the_averaged_copy_holds_neither_the_trainer_nor_the_data(tmp_path: Path) -> None:
    averaging = WeightAveraging()
    module, _ = _fit(tmp_path, averaging)
    assert averaging._average_model is not None
    copy = averaging._average_model.module
    assert isinstance(copy, Net) and copy is not module
    with pytest.raises(FabricxError, match="not attached to a `Trainer`"):
        copy.trainer  # noqa: B018
    # SWA's equal-weight average over the 9 optimizer steps is what training ended with.
    _assert_same(_state(copy), _state(module))
