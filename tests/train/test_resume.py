"""Stopping a fit in the middle of an epoch and resuming it in a new process with ckpt_path="last"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _train_helpers import Crash, stateful_run

HELPERS = os.path.dirname(os.path.abspath(__file__))


def test_resume_mid_epoch_in_new_process_matches_uninterrupted_run(tmp_path):
    reference = stateful_run(str(tmp_path / "reference"))
    assert reference["global_step"] == 3 * 16  # 32 micro-batches per epoch, accumulation 2

    root = tmp_path / "interrupted"
    with pytest.raises(Crash):
        # Step 22 is in the middle of epoch 1; the last step checkpoint before it is at step 21.
        stateful_run(str(root), crash_at_step=22)
    assert (root / "steps" / "last.ckpt").is_file()

    output = tmp_path / "resumed.pt"
    script = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]); import _train_helpers as h; "
        "torch.save(h.stateful_run(sys.argv[2], ckpt_path='last'), sys.argv[3])"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, HELPERS, str(root), str(output)], capture_output=True, text=True, timeout=240
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    resumed = torch.load(output, weights_only=True)

    assert resumed["global_step"] == reference["global_step"]
    assert resumed["current_epoch"] == reference["current_epoch"] == 3
    for key, value in reference["weights"].items():
        assert torch.equal(resumed["weights"][key], value), key
    assert resumed["lr"] == reference["lr"]
    # The resumed process saw epochs 1 and 2 end: epoch 1's metrics include the batches from before the crash.
    assert resumed["epochs"] == reference["epochs"][1:]
    assert resumed["early_stopping"] == reference["early_stopping"]
    # 4 validations per epoch; only the first improves by min_delta: 11 checks without improvement.
    assert resumed["early_stopping"]["wait_count"] == 11
    assert resumed["best"] == reference["best"]
    names = [Path(p).name for p in resumed["best_k"]]
    assert names == [Path(p).name for p in reference["best_k"]]
    assert all(Path(p).is_file() and p.endswith(".ckpt") for p in resumed["best_k"])


def test_last_without_checkpoint_starts_fresh_with_warning(tmp_path):
    from _train_helpers import Regressor, loader, regression_data

    from fabricx.train import Trainer

    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.warns(UserWarning, match="found no last checkpoint"):
        trainer.fit(Regressor(), loader(regression_data(64)), ckpt_path="last")
    assert trainer.global_step == 8
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()  # the default ModelCheckpoint


def _fit_regressor(root, samples, max_epochs, ckpt_path=None, hparams=None, **flags):
    """A seeded `Regressor` fit (resumed from `ckpt_path` when given): the trainer and the module."""
    from _train_helpers import Regressor, loader, regression_data

    from fabricx.train import Trainer

    trainer = Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        default_root_dir=root,
        seed=0,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **flags,
    )
    module = Regressor()
    if hparams:
        module.save_hyperparameters(hparams)
    trainer.fit(module, loader(regression_data(samples)), ckpt_path=ckpt_path)
    return trainer, module


def _assert_same_weights(reference, resumed):
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_resume_after_an_epoch_cut_short_by_limit(tmp_path):
    """A checkpoint written at the end of a limited epoch resumes with the next epoch's data."""
    reference_trainer, reference = _fit_regressor(tmp_path, 128, 3, limit_train_batches=5)
    _fit_regressor(tmp_path, 128, 2, limit_train_batches=5)
    resumed_trainer, resumed = _fit_regressor(tmp_path, 128, 3, ckpt_path="last", limit_train_batches=5)
    assert resumed_trainer.global_step == reference_trainer.global_step == 15
    _assert_same_weights(reference, resumed)


def test_a_checkpoint_folder_of_an_earlier_fabricx_trainer_resumes_exactly(tmp_path):
    """Before Lightning's keys, a fabricx Trainer wrote a checkpoint folder under its own keys (``module``,
    ``trainer``, ``hparams``, ...); `fit(ckpt_path=folder)` still resumes one, as exactly as a ``.ckpt``."""
    from fabricx.train.checkpoint.connector import _legacy_checkpoint_state
    from fabricx.train.checkpoint.entries import Extras, ProgressState, is_legacy_folder

    flags = {"hparams": {"width": 32}, "enable_checkpointing": False}
    reference_trainer, reference = _fit_regressor(tmp_path, 64, 3, **flags)
    trainer, _ = _fit_regressor(tmp_path, 64, 2, **flags)
    folder = tmp_path / "earlier-fabricx"
    trainer.fabric.save(folder, _legacy_checkpoint_state(trainer, Extras(), ProgressState(trainer)))
    assert is_legacy_folder(folder)
    assert trainer.fabric.load(folder)["hparams"] == {"hyper_parameters": {"width": 32}}

    resumed_trainer, resumed = _fit_regressor(tmp_path, 64, 3, ckpt_path=folder, **flags)
    assert resumed_trainer.global_step == reference_trainer.global_step == 24
    _assert_same_weights(reference, resumed)
