"""The same LightningModule source through Lightning's Trainer and, imports swapped, through fabricx's.

``lightning_source/cases.py`` is ordinary Lightning code; ``_lightning_differential.py`` runs it as is
and with its import block replaced by fabricx's (one subprocess, both sides, every case), so the
comparison below is between identical user code. On CPU in 32-bit everything must agree bit for bit:
weights, ``callback_metrics``, ``logged_metrics``, step counts, the CSV logger's rows, hook order.

Deliberate differences, stated where they are skipped: after ``ddp_spawn`` Lightning's parent-process
trainer keeps ``global_step == 0`` and ``current_epoch == 0`` and no ``logged_metrics`` (it does not
bring the loop state back from the workers); fabricx brings them back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from _lightning_differential import case as _case
from _lightning_differential import run_both
from _lightning_differential import same_weights as _same_weights

pytest.importorskip("lightning")
# One subprocess runs every case on both sides (Lightning's import and its ddp_spawn workers dominate).
pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning_differential")
    loaded = run_both(out, "cases", timeout=840)
    loaded["out"] = out
    return loaded


def _same_run(expected, actual, skip=()):
    _same_weights(expected["weights"], actual["weights"])
    for key in ("callback_metrics", "logged_metrics", "global_step", "current_epoch"):
        if key not in skip:
            assert actual[key] == expected[key], key


def test_automatic_optimization_with_accumulation_and_clipping(results):
    lightning, fabricx = _case(results, "automatic")
    _same_run(lightning, fabricx)
    assert lightning["global_step"] == 3 * 4  # 8 batches per epoch, accumulation 2
    assert {"train_loss", "train_loss_step", "train_loss_epoch", "val_loss"} <= set(fabricx["callback_metrics"])


def test_manual_optimization_gan_with_two_optimizers(results):
    lightning, fabricx = _case(results, "gan")
    _same_run(lightning, fabricx)
    assert lightning["global_step"] == 2 * 6 * 2  # every optimizer.step() counts
    assert fabricx["lrs"] == lightning["lrs"]  # StepLR and a user-stepped ReduceLROnPlateau


def test_fit_trains_with_gradients_on_whatever_mode_it_is_called_in(results):
    # Lightning's fit loop turns gradients on before on_train_start and leaves them on (gluonts' tests call fit
    # after an abandoned prediction generator has left torch.no_grad on).
    lightning, fabricx = _case(results, "grad_off")
    _same_run(lightning, fabricx)
    assert lightning["grad_enabled_after_fit"] is fabricx["grad_enabled_after_fit"] is True


def test_datamodule(results):
    lightning, fabricx = _case(results, "datamodule")
    _same_run(lightning, fabricx)
    assert fabricx["test"] == lightning["test"]
    assert fabricx["test_callback_metrics"] == lightning["test_callback_metrics"] == ["test_loss"]
    assert fabricx["stages"] == lightning["stages"]
    assert fabricx["datamodule_is_attached"] and lightning["datamodule_is_attached"]


def test_module_defined_loaders_combined_and_several_val_loaders(results):
    lightning, fabricx = _case(results, "own_loaders")
    _same_run(lightning, fabricx)
    assert fabricx["seen"] == lightning["seen"]  # the short loader restarts: max_size_cycle
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"} <= set(fabricx["callback_metrics"])


def test_resume_from_last_in_the_middle_of_an_epoch(results):
    lightning, fabricx = _case(results, "resume")
    for side in (lightning, fabricx):
        _same_run(side["full"], side["resumed"])  # a resumed run is the uninterrupted one
    _same_run(lightning["resumed"], fabricx["resumed"])


def test_csv_logger_rows(results):
    lightning, fabricx = _case(results, "csv")
    assert fabricx["rows"] == lightning["rows"]
    assert len(lightning["rows"]) > 6


def test_hooks_are_called_in_lightnings_order(results):
    lightning, fabricx = _case(results, "hooks")
    assert fabricx["calls"] == lightning["calls"]
    assert "optimizer_step" in lightning["calls"] and "on_validation_model_zero_grad" in lightning["calls"]


def test_ddp_spawn_with_two_processes(results):
    lightning, fabricx = _case(results, "ddp_spawn")
    # Lightning's parent trainer does not get the loop counters or logged metrics back from its workers.
    _same_run(lightning, fabricx, skip=("global_step", "current_epoch", "logged_metrics"))
    assert {"train_loss", "train_loss_step", "val_loss"} <= set(fabricx["callback_metrics"])
    assert fabricx["global_step"] == 2 * 4 and lightning["global_step"] == 0


def test_a_lightning_ckpt_loads_into_the_swapped_module(results):
    """Lightning's own last.ckpt (from the resume case) rebuilds the fabricx-side module with its weights."""
    out = results["out"]
    sys.path.insert(0, str(out / "sources"))
    try:
        import cases_fabricx
    finally:
        sys.path.remove(str(out / "sources"))
    path = out / "lightning" / "resume" / "cut" / "ckpt" / "last.ckpt"
    saved = torch.load(path, weights_only=True)
    module = cases_fabricx.Regressor.load_from_checkpoint(path, hidden=saved["hyper_parameters"]["hidden"])
    assert dict(module.hparams) == saved["hyper_parameters"] == {"lr": 0.05, "hidden": 8}
    _same_weights(saved["state_dict"], module.state_dict())
