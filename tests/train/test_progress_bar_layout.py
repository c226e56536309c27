"""The rich progress bar at 80 and 120 columns: every frame keeps its bar, counts and times on one line.

Each frame is what the bar's live display would draw after a batch, rendered to a fixed-width rich console.
Metrics that come and go (throughput is logged every few steps) and metrics too long for the line go below
the bar, never into it.
"""

from __future__ import annotations

import io
import re

import pytest
import torch

from fabricx.callbacks import Callback, RichProgressBar, ThroughputMonitor
from fabricx.train import Trainer
from tests.train._train_helpers import Regressor, loader, regression_data

BATCHES = 8  # 64 samples, batch size 8


class LongNamedMetrics(Regressor):
    """Logs the loss as train_loss (the bar's own loss must not repeat it) and two long-named metrics."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("gradient_norm_of_the_whole_model", 1.0 / 3.0 + batch_idx, prog_bar=True)
        self.log("learning_rate_of_group_zero", 0.05 / 7, prog_bar=True)
        return loss


class Frames(Callback):
    """After every training batch (after the bar updated), the bar's display rendered at ``width`` columns."""

    def __init__(self, bar: RichProgressBar, width: int) -> None:
        self.bar, self.width, self.frames = bar, width, []

    def _grab(self, trainer, label):
        console = _console(self.width)
        console.print(self.bar._progress.get_renderable())
        self.frames.append((label, trainer.global_step, console.export_text().rstrip("\n").splitlines()))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._grab(trainer, (trainer.current_epoch, batch_idx + 1))

    def on_train_end(self, trainer, module):
        self._grab(trainer, "end")


def _console(width: int):
    from rich.console import Console

    return Console(width=width, record=True, file=io.StringIO(), force_terminal=True, color_system=None)


def _fit(tmp_path, width: int, **kwargs):
    bar = RichProgressBar(console_kwargs={"file": io.StringIO(), "force_terminal": True, "width": width})
    frames = Frames(bar, width)
    trainer = Trainer(
        accelerator="cpu",
        default_root_dir=tmp_path,
        loggers=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        # Throughput joins the metrics on every second step only: the case that made the bar flicker.
        callbacks=[bar, ThroughputMonitor(log_every_n_steps=2, window_size=2), frames],
        **kwargs,
    )
    trainer.fit(LongNamedMetrics(), loader(regression_data(64), batch_size=8), loader(regression_data(16)))
    return frames.frames


_TIME = r"\d+:\d\d:\d\d"


@pytest.mark.parametrize("width", [80, 120])
def test_every_frame_keeps_bar_counts_and_times(tmp_path, width):
    frames = _fit(tmp_path, width, max_epochs=2)
    assert len(frames) == 2 * BATCHES + 1
    seen_throughput = False
    for label, _, lines in frames:
        epoch, done = (1, BATCHES) if label == "end" else label
        assert all(len(line) <= width for line in lines), lines
        bar_line = lines[0]
        assert bar_line.startswith(f"Epoch {epoch}/1 "), (label, lines)
        # The bar (at least 10 columns of it, drawn or still empty), the count, elapsed • remaining time.
        assert re.search(rf"/1 [━╸╺ ]{{10,}} +{done}/{BATCHES} {_TIME} • (-:--:--|{_TIME})", bar_line), (label, lines)
        if done > 1 or epoch > 0:
            assert re.search(r"\d+\.\d\d it/s$", bar_line), (label, lines)
        metrics = " ".join(lines[1:])
        assert "=" not in bar_line, (label, lines)  # metrics never share the bar's line
        assert "train_loss=" in metrics and not re.search(r"(^| )loss=", metrics), (label, lines)
        for name, value in re.findall(r"(\S+)=(\S+)", metrics):
            digits = re.sub(r"e[+-]\d+$", "", value).lstrip("-").replace(".", "").lstrip("0")
            assert len(digits) <= 4, f"{name}={value} is not rounded for display"
        # Once throughput was shown it stays (with its last value), so the layout holds still.
        if "throughput/samples_per_sec=" in metrics:
            seen_throughput = True
        elif seen_throughput:
            pytest.fail(f"throughput vanished from the bar at {label}: {lines}")
    assert seen_throughput


def test_the_bar_says_where_max_steps_stopped_training(tmp_path):
    frames = _fit(tmp_path, 80, max_epochs=3, max_steps=BATCHES + 3)
    label, step, lines = frames[-1]
    assert label == "end" and step == BATCHES + 3
    # Stopped in the second epoch (index 1) after 3 of its batches: the bar keeps that epoch and count.
    assert lines[0].startswith(f"Epoch 1/2 · stopped at step {BATCHES + 3} "), lines
    assert f" 3/{BATCHES} " in lines[0], lines


# -- a second run into the same run directory ----------------------------------------------------------------
def test_a_second_run_into_a_non_empty_checkpoint_directory_warns_as_lightning_does(tmp_path, recwarn):
    from fabricx.callbacks import ModelCheckpoint

    def fit() -> None:
        checkpoint = ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="val_loss", save_last=True)
        trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, loggers=False, enable_progress_bar=False,
                          enable_model_summary=False, num_sanity_val_steps=0, max_epochs=1, callbacks=[checkpoint])
        trainer.fit(Regressor(), loader(regression_data(16)), loader(regression_data(8)))

    fit()
    assert not [w for w in recwarn if "exists and is not empty" in str(w.message)]
    with pytest.warns(UserWarning, match=r"Checkpoint directory .*checkpoints exists and is not empty\."):
        fit()


class WithTestStep(Regressor):
    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self(x), y))


def test_testing_shows_its_known_length(tmp_path):
    # Once printed "Testing: 4/?" although the test loader's length is known.
    out = io.StringIO()
    bar = RichProgressBar(console_kwargs={"file": out, "force_terminal": False, "width": 120})
    trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, callbacks=[bar], logger=False,
                      enable_model_summary=False)
    trainer.test(WithTestStep(), loader(regression_data(64), batch_size=16))  # 4 batches
    assert "Testing: 4/4" in out.getvalue(), out.getvalue()
