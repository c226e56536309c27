"""The pieces of Lightning's `tests_pytorch/helpers` the ported callback/logger/tuner/summary tests use, imports
swapped.

`RunIf` is rewritten (Lightning's wraps a private helper of its own package); the model, datamodule and
dataset classes are Lightning 2.6.5's, with only their imports changed.
"""

# ruff: noqa
from __future__ import annotations

import functools
import importlib.util
import sys

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics import Accuracy

from fabricx.train import DataModule as LightningDataModule
from fabricx.train import TrainModule as LightningModule

_TENSORBOARD_AVAILABLE = importlib.util.find_spec("tensorboard") is not None
_OMEGACONF_AVAILABLE = importlib.util.find_spec("omegaconf") is not None
_SKLEARN_AVAILABLE = importlib.util.find_spec("sklearn") is not None
_TORCH_GREATER_EQUAL_2_3 = True
_TORCH_GREATER_EQUAL_2_6 = True

_PACKAGES = {"sklearn": "sklearn", "tensorboard": "tensorboard", "psutil": "psutil", "omegaconf": "omegaconf",
             "rich": "rich", "deepspeed": "deepspeed", "mlflow": "mlflow", "wandb": "wandb", "onnx": "onnx"}


def RunIf(**kwargs):
    """Lightning's RunIf: skip unless every requirement holds (only what can be checked here)."""
    reasons = []
    for key, value in kwargs.items():
        if key == "min_cuda_gpus" and torch.cuda.device_count() < value:
            reasons.append(f"GPUs>={value}")
        elif key == "mps" and value and not (torch.backends.mps.is_available()):
            reasons.append("MPS")
        elif key == "tpu" and value:
            reasons.append("TPU")
        elif key == "skip_windows" and value and sys.platform == "win32":
            reasons.append("unix")
        elif key == "standalone" and value:
            reasons.append("standalone (PL_RUN_STANDALONE_TESTS)")
        elif key in _PACKAGES and value and importlib.util.find_spec(_PACKAGES[key]) is None:
            reasons.append(key)
        elif key in ("bf16_cuda", "deepspeed", "xla", "sklearn") and value and key not in _PACKAGES:
            reasons.append(key)
    return pytest.mark.skipif(condition=bool(reasons), reason=f"Requires: [{' + '.join(reasons)}]")


def getattr_recursive(obj, attr):
    return functools.reduce(getattr, [obj] + attr.split("."))


def load_hparams_from_yaml(config_yaml):
    with open(config_yaml) as handle:
        return yaml.full_load(handle)


class ClassificationModel(LightningModule):
    def __init__(self, num_features=32, num_classes=3, lr=0.01):
        super().__init__()

        self.lr = lr
        for i in range(3):
            setattr(self, f"layer_{i}", nn.Linear(num_features, num_features))
            setattr(self, f"layer_{i}a", torch.nn.ReLU())
        setattr(self, "layer_end", nn.Linear(num_features, 3))

        acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.train_acc = acc.clone()
        self.valid_acc = acc.clone()
        self.test_acc = acc.clone()

    def forward(self, x):
        x = self.layer_0(x)
        x = self.layer_0a(x)
        x = self.layer_1(x)
        x = self.layer_1a(x)
        x = self.layer_2(x)
        x = self.layer_2a(x)
        x = self.layer_end(x)
        return F.softmax(x, dim=1)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        return [optimizer], []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.forward(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", self.train_acc(logits, y), prog_bar=True)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.forward(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=False)
        self.log("val_acc", self.valid_acc(logits, y), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self.forward(x)
        self.log("test_loss", F.cross_entropy(logits, y), prog_bar=False)
        self.log("test_acc", self.test_acc(logits, y), prog_bar=True)

    def predict_step(self, batch, batch_idx):
        x, _ = batch
        return self.forward(x)


class SklearnDataset(Dataset):
    def __init__(self, x, y, x_type, y_type):
        self.x = x
        self.y = y
        self._x_type = x_type
        self._y_type = y_type

    def __getitem__(self, idx):
        return torch.tensor(self.x[idx], dtype=self._x_type), torch.tensor(self.y[idx], dtype=self._y_type)

    def __len__(self):
        return len(self.y)


class SklearnDataModule(LightningDataModule):
    def __init__(self, sklearn_dataset, x_type, y_type, batch_size: int = 10):
        super().__init__()
        self.batch_size = batch_size
        self._x, self._y = sklearn_dataset
        self._split_data()
        self._x_type = x_type
        self._y_type = y_type

    def _split_data(self):
        from sklearn.model_selection import train_test_split

        self.x_train, self.x_test, self.y_train, self.y_test = train_test_split(
            self._x, self._y, test_size=0.20, random_state=42
        )
        self.x_train, self.x_valid, self.y_train, self.y_valid = train_test_split(
            self.x_train, self.y_train, test_size=0.40, random_state=42
        )

    def train_dataloader(self):
        return DataLoader(
            SklearnDataset(self.x_train, self.y_train, self._x_type, self._y_type),
            batch_size=self.batch_size,
        )

    def val_dataloader(self):
        return DataLoader(
            SklearnDataset(self.x_valid, self.y_valid, self._x_type, self._y_type), batch_size=self.batch_size
        )

    def test_dataloader(self):
        return DataLoader(
            SklearnDataset(self.x_test, self.y_test, self._x_type, self._y_type), batch_size=self.batch_size
        )

    def predict_dataloader(self):
        return DataLoader(
            SklearnDataset(self.x_test, self.y_test, self._x_type, self._y_type), batch_size=self.batch_size
        )

    @property
    def sample(self):
        return torch.tensor([self._x[0]], dtype=self._x_type)


class ClassifDataModule(SklearnDataModule):
    def __init__(
        self, num_features=32, length=800, num_classes=3, batch_size=10, n_clusters_per_class=1, n_informative=2
    ):
        from sklearn.datasets import make_classification

        data = make_classification(
            n_samples=length,
            n_features=num_features,
            n_classes=num_classes,
            n_clusters_per_class=n_clusters_per_class,
            n_informative=n_informative,
            random_state=42,
        )
        super().__init__(data, x_type=torch.float32, y_type=torch.long, batch_size=batch_size)


class AverageDataset(Dataset):
    def __init__(self, dataset_len=300, sequence_len=100):
        self.dataset_len = dataset_len
        self.sequence_len = sequence_len
        self.input_seq = torch.randn(dataset_len, sequence_len, 10)
        top, bottom = self.input_seq.chunk(2, -1)
        self.output_seq = top + bottom.roll(shifts=1, dims=-1)

    def __len__(self):
        return self.dataset_len

    def __getitem__(self, item):
        return self.input_seq[item], self.output_seq[item]


class ParityModuleRNN(LightningModule):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(10, 20, batch_first=True)
        self.linear_out = nn.Linear(in_features=20, out_features=5)
        self.example_input_array = torch.rand(2, 3, 10)
        self._loss = []  # needed for checking if the loss is the same as vanilla torch

    def forward(self, x):
        seq, _ = self.rnn(x)
        return self.linear_out(seq)

    def training_step(self, batch, batch_nb):
        x, y = batch
        y_hat = self(x)
        loss = F.mse_loss(y_hat, y)
        self._loss.append(loss.item())
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)

    def train_dataloader(self):
        return DataLoader(AverageDataset(), batch_size=30)
