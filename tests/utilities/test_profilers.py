"""Profilers: named-action timing, cProfile, and torch.profiler traces written per rank."""

from __future__ import annotations

import json

import pytest
import torch

from fabricx.utilities.profilers import (
    AdvancedProfiler,
    PassThroughProfiler,
    PyTorchProfiler,
    SimpleProfiler,
    profile_run,
    resolve_profiler,
)


def test_simple_profiler_counts_calls_and_writes_per_rank(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="fit")
    for _ in range(3):
        with profiler.profile("training_step"):
            torch.mm(torch.randn(32, 32), torch.randn(32, 32))
    with profiler.profile("validation_step"):
        pass
    assert len(profiler.recorded_durations["training_step"]) == 3
    summary = profiler.summary()
    assert "training_step" in summary and "validation_step" in summary
    profiler.describe()
    assert "training_step" in (tmp_path / "fit-rank0.txt").read_text()
    with pytest.raises(ValueError, match="never started"):
        profiler.stop("other")


def test_advanced_profiler_lists_called_functions():
    profiler = AdvancedProfiler(line_count_restriction=5)
    with profiler.profile("step"):
        sorted(range(1000), key=lambda v: -v)
    assert "Profile of step" in profiler.summary() and "sorted" in profiler.summary()


def test_profile_run_writes_a_chrome_trace_and_prints_the_table(tmp_path, capsys):
    with profile_run(tmp_path, row_limit=5) as profiler:
        for _ in range(2):
            with profiler.profile("step"):
                torch.mm(torch.randn(64, 64), torch.randn(64, 64))
    trace = json.loads((tmp_path / "pytorch-rank0.pt.trace.json").read_text())
    assert sum(event.get("name") == "[step]" for event in trace["traceEvents"]) == 2
    assert "aten::mm" in capsys.readouterr().out
    assert "aten::mm" in (tmp_path / "pytorch-rank0.txt").read_text()


def test_profiler_names_resolve_like_lightning():
    assert isinstance(resolve_profiler(None), PassThroughProfiler)
    assert isinstance(resolve_profiler("simple"), SimpleProfiler)
    assert isinstance(resolve_profiler("advanced"), AdvancedProfiler)
    assert isinstance(resolve_profiler("pytorch"), PyTorchProfiler)
    with pytest.raises(ValueError, match="'simple'"):
        resolve_profiler("fast")


def test_trainer_profiler_times_steps_backward_and_hooks(tmp_path, capsys):
    from fabricx.train import Trainer
    from tests.train._train_helpers import Regressor, loader, regression_data

    profiler = SimpleProfiler(dirpath=tmp_path / "profile", filename="fit")
    trainer = Trainer(
        accelerator="cpu", max_epochs=1, profiler=profiler, default_root_dir=tmp_path, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, limit_val_batches=2,
    )
    trainer.fit(Regressor(), loader(regression_data(64), batch_size=8), loader(regression_data(16), shuffle=False))
    assert len(profiler.recorded_durations["[Strategy]training_step"]) == 8
    assert len(profiler.recorded_durations["[Strategy]backward"]) == 8
    assert len(profiler.recorded_durations["[Strategy]validation_step"]) == 2 + 2  # sanity check, then the epoch's
    assert "[Strategy]training_step" in (tmp_path / "profile" / "fit-rank0.txt").read_text()
    simple = Trainer(accelerator="cpu", max_epochs=1, profiler="simple", default_root_dir=tmp_path,
                     enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    simple.fit(Regressor(), loader(regression_data(16), batch_size=8))
    assert "Profiler report (SimpleProfiler)" in capsys.readouterr().out


def test_trainer_profiler_times_datamodule_hooks_under_lightnings_names(tmp_path):
    from fabricx.train import DataModule, Trainer
    from tests.train._train_helpers import Regressor, loader, regression_data

    class Data(DataModule):
        def prepare_data(self):
            pass

        def train_dataloader(self):
            return loader(regression_data(16), batch_size=8)

        def state_dict(self):
            return {"seen": 1}

        def load_state_dict(self, state_dict):
            self.loaded = state_dict

    def fit(ckpt_path=None):
        trainer = Trainer(
            accelerator="cpu", max_steps=1, profiler="simple", default_root_dir=tmp_path, logger=False,
            enable_progress_bar=False, enable_model_summary=False,
        )
        trainer.fit(Regressor(), datamodule=data, ckpt_path=ckpt_path)
        return trainer

    data = Data()
    first = fit()
    recorded = first.profiler.recorded_durations
    for hook in ("prepare_data", "setup", "train_dataloader", "state_dict", "teardown"):
        assert len(recorded[f"[LightningDataModule]Data.{hook}"]) == 1, hook
    assert "[LightningDataModule]Data.load_state_dict" not in recorded
    resumed = fit(first.checkpoint_callback.best_model_path)
    assert len(resumed.profiler.recorded_durations["[LightningDataModule]Data.load_state_dict"]) == 1
    assert data.loaded == {"seen": 1}
