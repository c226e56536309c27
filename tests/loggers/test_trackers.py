"""MLflow and Weights & Biases loggers against the real libraries: what a Trainer logs is what they store."""

from __future__ import annotations

import csv
import glob
import json
import random
import struct
import time
from pathlib import Path

import pytest
import torch

from fabricx.compat.accelerate import Accelerator
from fabricx.loggers import CSVLogger, MLFlowLogger, WandbLogger
from fabricx.train import Trainer
from fabricx.utilities.imports import require
from fabricx.utilities.rank_zero import rank_zero_only
from tests.train._train_helpers import Regressor, loader, regression_data


def _fit(tracker, root: Path) -> dict[int, float]:
    """Train briefly with ``tracker`` and a CSV logger side by side; the CSV rows are the reference."""
    csv_logger = CSVLogger(root, name="csv")
    torch.manual_seed(0)
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        loggers=[tracker, csv_logger],
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    module = Regressor()
    for logger in (tracker, csv_logger):
        logger.log_hyperparams({"lr": module.lr, "optimizer": {"name": "sgd"}})
    trainer.fit(module, loader(regression_data(64), batch_size=8), loader(regression_data(16), shuffle=False))
    tracker.finalize("success")  # the Trainer finalized already; a second call must be harmless
    with open(csv_logger.metrics_file_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {int(row["step"]): float(row["train_loss_step"]) for row in rows if row.get("train_loss_step")}


def test_mlflow_run_holds_the_trainer_metrics_and_params(tmp_path):
    tracker = MLFlowLogger(experiment_name="digits", run_name="first", save_dir=tmp_path / "mlruns", tags={"team": "x"})
    expected = _fit(tracker, tmp_path)
    assert len(expected) >= 3

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    run = client.get_run(tracker.run_id)
    history = {m.step: m.value for m in client.get_metric_history(tracker.run_id, "train_loss_step")}
    assert history == pytest.approx(expected, rel=1e-6)
    assert "val_loss" in run.data.metrics
    assert run.data.params == {"lr": "0.05", "optimizer/name": "sgd"}
    assert run.data.tags["team"] == "x" and run.info.run_name == "first"
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "digits"

    # The Accelerate adapter's log_with="mlflow" writes into the same kind of store.
    accelerator = Accelerator(cpu=True, log_with="mlflow", project_dir=tmp_path / "mlruns")
    accelerator.init_trackers("adapter", config={"lr": 0.1}, init_kwargs={"mlflow": {"run_name": "acc"}})
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    run_id = accelerator.get_tracker("mlflow").run_id
    accelerator.end_training()
    run = client.get_run(run_id)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(0, 1.0), (1, 0.5), (2, 1 / 3)]
    assert run.data.params == {"lr": "0.1"} and run.info.run_name == "acc" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "adapter"


def _wandb_records(run_file: str):
    """The records of a W&B transaction log: blocks of 32 KiB holding CRC/length/type framed chunks."""
    from wandb.proto import wandb_internal_pb2

    data = Path(run_file).read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            whole = chunk
        elif kind in (2, 3):
            pending += chunk
            continue
        else:
            whole, pending = pending + chunk, b""
        record = wandb_internal_pb2.Record()
        record.ParseFromString(whole)
        yield record


def _wandb_run(folder: Path, metric: str) -> tuple[dict[int, float], dict[str, object]]:
    """``{step: value}`` of ``metric`` and the config, from the one offline run under ``folder``."""
    (run_file,) = glob.glob(str(folder / "wandb" / "offline-run-*" / "run-*.wandb"))
    # W&B's service process writes the log on its own schedule; the run is complete once its exit record is in.
    deadline = time.monotonic() + 60
    while not any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(run_file)):
        assert time.monotonic() < deadline, "the W&B run log never got its exit record"
        time.sleep(0.2)
    history: dict[int, float] = {}
    config: dict[str, object] = {}
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            if metric in items:
                history[items["trainer/global_step"]] = items[metric]
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    return history, config


def test_wandb_offline_run_holds_the_trainer_metrics_and_config(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    tracker = WandbLogger(project="digits", name="first", offline=True, save_dir=tmp_path / "wandb_runs")
    expected = _fit(tracker, tmp_path)
    history, config = _wandb_run(tmp_path / "wandb_runs", "train_loss_step")
    assert history == pytest.approx(expected, rel=1e-6)
    assert config["lr"] == 0.05 and config["optimizer"] == {"name": "sgd"}

    # The Accelerate adapter's log_with="wandb", offline through init_kwargs as with Accelerate; as Accelerate's
    # tracker, the run goes where wandb puts it (WANDB_DIR, else the working directory), not under project_dir.
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "adapter"))
    accelerator = Accelerator(cpu=True, log_with="wandb", project_dir=tmp_path / "adapter_project")
    accelerator.init_trackers("adapter", config={"lr": 0.1}, init_kwargs={"wandb": {"offline": True}})
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    accelerator.end_training()
    history, config = _wandb_run(tmp_path / "adapter", "loss")
    assert history == {0: 1.0, 1: 0.5, 2: pytest.approx(1 / 3)} and config["lr"] == 0.1


def test_starting_tracker_runs_leaves_the_random_streams_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    mlflow_logger = MLFlowLogger(save_dir=tmp_path / "m")  # no run name: MLflow draws one at random
    mlflow_logger.log_metrics({"loss": 1.0}, step=0)
    wandb_logger = WandbLogger(offline=True, save_dir=tmp_path / "w")
    wandb_logger.log_metrics({"loss": 1.0}, step=0)
    assert [random.random() for _ in range(3)] == expected
    mlflow_logger.finalize("success")
    wandb_logger.finalize("success")


def test_trackers_do_nothing_off_rank_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    mlflow_logger = MLFlowLogger(save_dir=tmp_path / "m")
    mlflow_logger.log_metrics({"loss": 1.0}, step=0)
    mlflow_logger.experiment.log_batch("anything")  # a do-nothing stand-in
    mlflow_logger.finalize("success")
    assert mlflow_logger.run_id is None and not (tmp_path / "m" / "mlflow.db").exists()
    wandb_logger = WandbLogger(offline=True, save_dir=tmp_path / "w")
    wandb_logger.log_metrics({"loss": 1.0}, step=0)
    wandb_logger.finalize("success")
    assert not (tmp_path / "w" / "wandb").exists()


def test_missing_tracker_package_names_the_install_command():
    with pytest.raises(ModuleNotFoundError, match=r'pip install "fabricx\[nothere\]"'):
        require("fabricx_no_such_package", extra="nothere", feature="SomeLogger")


def test_wandb_refuses_uploading_checkpoints_offline(tmp_path):
    with pytest.raises(ValueError, match="offline=True"):
        WandbLogger(offline=True, log_model=True, save_dir=tmp_path)


def test_mlflow_log_model_stores_the_checkpoints_the_trainer_saved(tmp_path):
    # The Trainer hands loggers its ModelCheckpoint after each save (as Lightning's does); with log_model="all" each
    # newly saved file becomes an artifact of the run.
    from fabricx.callbacks import ModelCheckpoint

    tracker = MLFlowLogger(experiment_name="models", save_dir=tmp_path / "mlruns", log_model="all")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
    torch.manual_seed(0)
    trainer = Trainer(
        accelerator="cpu", max_epochs=2, loggers=[tracker], callbacks=[checkpoint], enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), loader(regression_data(32), batch_size=8))

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    stored = sorted(Path(entry.path).name for entry in client.list_artifacts(tracker.run_id, "checkpoints"))
    assert stored == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]
