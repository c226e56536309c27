from __future__ import annotations

import pickle
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from fabricx.loggers import Logger, TensorBoardLogger
from fabricx.utilities.rank_zero import rank_zero_only


@pytest.fixture(autouse=True)
def rank_zero(monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 0)


def load_events(log_dir: str) -> EventAccumulator:
    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    return accumulator


def test_scalars_are_written_and_read_back(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="exp", prefix="train")
    assert isinstance(logger, Logger)
    assert logger.log_dir == str(tmp_path / "exp" / "version_0")
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=1)
    logger.log_metrics({"loss": 0.25, "acc": 0.75}, step=2)
    logger.finalize("success")

    assert list(Path(logger.log_dir).glob("events.out.tfevents.*"))
    events = load_events(logger.log_dir)
    assert sorted(events.Tags()["scalars"]) == ["train-acc", "train-loss"]
    assert [(e.step, e.value) for e in events.Scalars("train-loss")] == [(1, 0.5), (2, 0.25)]
    assert [(e.step, e.value) for e in events.Scalars("train-acc")] == [(2, 0.75)]


def test_versions_and_sub_dir(tmp_path):
    first = TensorBoardLogger(tmp_path)
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("success")
    second = TensorBoardLogger(tmp_path, sub_dir="val")
    assert second.version == 1
    assert second.log_dir == str(tmp_path / "lightning_logs" / "version_1" / "val")
    assert TensorBoardLogger(tmp_path, version="final").log_dir.endswith("final")


def test_hyperparams_go_to_hparams_tab_and_yaml(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams(Namespace(lr=0.01, optimizer="adam", model={"layers": [4, 2], "act": None}))
    logger.finalize("success")

    events = load_events(logger.log_dir)
    assert [(e.step, e.value) for e in events.Scalars("hp_metric")] == [(0, -1.0)]
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["lr"].number_value == pytest.approx(0.01)
    assert hparams["optimizer"].string_value == "adam"
    assert hparams["model/layers"].string_value == "[4, 2]"
    yaml_text = (Path(logger.log_dir) / "hparams.yaml").read_text()
    assert yaml_text == "lr: 0.01\noptimizer: adam\nmodel:\n  layers: [4, 2]\n  act: null\n"


def test_hyperparams_with_real_metrics_and_without_placeholder(tmp_path):
    logger = TensorBoardLogger(tmp_path, default_hp_metric=False)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_hyperparams({"lr": 0.1}, metrics={"val_acc": 0.5})
    logger.finalize("success")
    scalars = load_events(logger.log_dir).Tags()["scalars"]
    assert scalars == ["val_acc"]


def test_log_graph(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    with pytest.warns(UserWarning, match="Could not log computational graph to TensorBoard.*needs an example input"):
        logger.log_graph(model)
    logger.log_graph(model, torch.zeros(1, 3))
    logger.finalize("success")
    assert load_events(logger.log_dir).Graph() is not None


def test_other_ranks_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.experiment.add_text("note", "hello", 0)  # a direct call on the writer is a no-op too
    logger.save()
    logger.finalize("success")
    assert list(tmp_path.iterdir()) == []


def test_pickles_without_its_writer(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy.log_dir == logger.log_dir
    assert copy._experiment is None
    logger.finalize("success")


def test_missing_tensorboard_is_explained(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'fabricx\[tensorboard\]'"):
        TensorBoardLogger(tmp_path)


def test_importing_loggers_does_not_import_tensorboard():
    code = (
        "import sys, fabricx.loggers\n"
        "loaded = [m for m in sys.modules if m.startswith(('tensorboard', 'torch.utils.tensorboard'))]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
