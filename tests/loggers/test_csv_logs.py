from __future__ import annotations

import csv
from argparse import Namespace
from enum import Enum
from pathlib import Path

import pytest
import torch

from fabricx.loggers import CSVLogger, Logger
from fabricx.utilities.rank_zero import rank_zero_only


@pytest.fixture(autouse=True)
def rank_zero(monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 0)


def read_csv(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def test_is_a_logger_with_lightning_shaped_properties(tmp_path):
    logger = CSVLogger(tmp_path, name="exp")
    assert isinstance(logger, Logger)
    assert (logger.root_dir, logger.name, logger.version) == (str(tmp_path), "exp", 0)
    assert logger.log_dir == str(tmp_path / "exp" / "version_0")
    assert logger.group_separator == "/"


def test_version_numbering(tmp_path):
    (tmp_path / "exp" / "version_0").mkdir(parents=True)
    (tmp_path / "exp" / "version_3").mkdir()
    (tmp_path / "exp" / "version_9").touch()  # a file, not a version folder
    (tmp_path / "exp" / "version_best").mkdir()
    assert CSVLogger(tmp_path, name="exp").version == 4
    assert CSVLogger(tmp_path, name="other").version == 0
    assert CSVLogger(tmp_path, name="exp", version=7).log_dir.endswith("version_7")
    assert CSVLogger(tmp_path, name="exp", version="run_a").log_dir == str(tmp_path / "exp" / "run_a")
    assert CSVLogger(tmp_path, name="").log_dir == str(tmp_path / "version_0")


def test_versions_follow_earlier_runs(tmp_path):
    first = CSVLogger(tmp_path)
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("success")
    second = CSVLogger(tmp_path)
    assert second.version == 1
    assert Path(second.log_dir).name == "version_1"


def test_columns_grow_when_new_keys_appear(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=0)
    logger.save()
    logger.log_metrics({"loss": 0.25}, step=1)
    logger.save()
    logger.log_metrics({"loss": torch.tensor(0.125), "acc": torch.tensor(0.75, dtype=torch.float64)}, step=2)
    logger.finalize("success")

    header, rows = read_csv(logger.metrics_file_path)
    assert header == ["acc", "loss", "step"]  # sorted, as Lightning writes them
    assert rows == [
        {"step": "0", "loss": "0.5", "acc": ""},
        {"step": "1", "loss": "0.25", "acc": ""},
        {"step": "2", "loss": "0.125", "acc": "0.75"},
    ]


def test_rows_are_buffered_until_the_flush_interval(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    logger.log_metrics({"x": 1}, step=0)
    assert not Path(logger.metrics_file_path).exists()
    logger.log_metrics({"x": 2}, step=1)
    assert [row["x"] for row in read_csv(logger.metrics_file_path)[1]] == ["1", "2"]
    logger.log_metrics({"x": 3}, step=2)
    logger.log_metrics({"x": 4}, step=3)
    assert [row["step"] for row in read_csv(logger.metrics_file_path)[1]] == ["0", "1", "2", "3"]


def test_step_defaults_to_unwritten_rows_and_prefix_is_applied(tmp_path):
    # As Lightning: without a step, a row's step is the number of rows not yet written out.
    logger = CSVLogger(tmp_path, prefix="train")
    logger.log_metrics({"loss": 1.0})
    logger.log_metrics({"loss": 2.0})
    logger.save()
    logger.log_metrics({"loss": 3.0})
    logger.save()
    header, rows = read_csv(logger.metrics_file_path)
    assert header == ["step", "train-loss"]
    assert [row["step"] for row in rows] == ["0", "1", "0"]


def test_logging_into_an_existing_version_appends(tmp_path):
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"loss": 1.0}, step=0)
    first.finalize("success")
    resumed = CSVLogger(tmp_path, version=0)
    resumed.log_metrics({"loss": 0.5}, step=1)
    resumed.save()
    resumed.log_metrics({"lr": 0.1}, step=2)
    resumed.finalize("success")
    header, rows = read_csv(resumed.metrics_file_path)
    assert header == ["loss", "lr", "step"]
    assert [(row["step"], row["loss"], row["lr"]) for row in rows] == [
        ("0", "1.0", ""),
        ("1", "0.5", ""),
        ("2", "", "0.1"),
    ]
    assert not list(Path(resumed.log_dir).glob("*.partial"))


def test_bad_metric_values_are_explained(tmp_path):
    logger = CSVLogger(tmp_path)
    with pytest.raises(ValueError, match=r"shape \(2,\) for 'loss'.*value.mean\(\)"):
        logger.log_metrics({"loss": torch.ones(2)})
    with pytest.raises(TypeError, match="got str for 'name'"):
        logger.log_metrics({"name": "abc"})
    with pytest.raises(ValueError, match="flush_logs_every_n_steps must be at least 1, got 0"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=0)


class Color(Enum):
    RED = "red"


def test_hparams_yaml(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams(Namespace(lr=1e-05, layers=[64, 32], optimizer="adam", flag="yes"))
    logger.log_hyperparams(
        {
            "model": Namespace(dropout=0.1, act=None),
            "scale": torch.tensor(2.5),
            "path": Path("/data/x y"),
            "color": Color.RED,
            "nan": float("nan"),
            "empty": {},
            "use_amp": True,
        }
    )
    text = (Path(logger.log_dir) / "hparams.yaml").read_text()
    assert text == (
        "lr: 1.0e-05\n"
        "layers: [64, 32]\n"
        "optimizer: adam\n"
        'flag: "yes"\n'
        "model:\n"
        "  dropout: 0.1\n"
        "  act: null\n"
        "scale: 2.5\n"
        'path: "/data/x y"\n'
        "color: RED\n"  # by name, as Lightning writes an Enum
        "nan: .nan\n"
        "empty: {}\n"
        "use_amp: true\n"
    )
    assert logger.hparams["model"] == {"dropout": 0.1, "act": None}



def test_hparams_yaml_of_a_hydra_config(tmp_path):
    # A Hydra config (what save_hyperparameters(config) keeps) reads back as the same plain values: its lists
    # (ListConfig, not a list) were written as a quoted string.
    omegaconf = pytest.importorskip("omegaconf")
    yaml = pytest.importorskip("yaml")
    config = omegaconf.OmegaConf.create({"model": {"width": 4, "sizes": [1, 2], "depth": "${model.width}"}, "lr": 0.1})
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams(config)
    written = yaml.safe_load((Path(logger.log_dir) / "hparams.yaml").read_text())
    assert written == omegaconf.OmegaConf.to_container(config, resolve=True)

def test_hparams_rejects_other_types(tmp_path):
    with pytest.raises(TypeError, match=r"dict or an argparse\.Namespace, got list"):
        CSVLogger(tmp_path).log_hyperparams([1, 2])


def test_other_ranks_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    logger.finalize("success")
    assert list(tmp_path.iterdir()) == []
    # The rank is read at call time: the same logger writes once this process is rank 0.
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    logger.log_metrics({"loss": 1.0}, step=0)
    assert Path(logger.metrics_file_path).exists()
