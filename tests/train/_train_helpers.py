"""Small modules and data shared by the Trainer tests (importable by spawned and fresh processes)."""

from __future__ import annotations

import io
import math
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx.callbacks import Callback
from fabricx.train import TrainModule


def regression_data(samples: int = 256, features: int = 32, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    y = x.sum(dim=1, keepdim=True) * 0.1 + 0.01 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def classification_data(samples: int = 64, seed: int = 1) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 8, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return TensorDataset(x, y)


def mlp(dropout: float = 0.0) -> torch.nn.Module:
    layers: list[torch.nn.Module] = [torch.nn.Linear(32, 64), torch.nn.ReLU()]
    if dropout:
        layers.append(torch.nn.Dropout(dropout))
    layers.append(torch.nn.Linear(64, 1))
    return torch.nn.Sequential(*layers)


class Regressor(TrainModule):
    """MLP regression; ``scheduler`` is None, "step" or "epoch"."""

    def __init__(self, lr: float = 0.05, scheduler: str | None = None, dropout: float = 0.0, adam: bool = False):
        super().__init__()
        self.net = mlp(dropout)
        self.lr = lr
        self.scheduler = scheduler
        self.adam = adam

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y), prog_bar=True)

    def configure_optimizers(self):
        optimizer = (torch.optim.Adam if self.adam else torch.optim.SGD)(self.parameters(), lr=self.lr)
        if self.scheduler is None:
            return optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler}}


def loader(dataset: TensorDataset, batch_size: int = 8, shuffle: bool = True) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


class StatefulRegressor(Regressor):
    """Dropout (random), Adam (optimizer state), a step scheduler and a torchmetrics metric."""

    def __init__(self):
        super().__init__(lr=0.01, scheduler="step", dropout=0.2, adam=True)
        from torchmetrics import MeanSquaredError

        self.train_mse = MeanSquaredError()

    def training_step(self, batch, batch_idx):
        x, y = batch
        prediction = self(x)
        loss = torch.nn.functional.mse_loss(prediction, y)
        self.train_mse(prediction.detach(), y)
        self.log("train_loss", loss, on_epoch=True)
        self.log("train_mse", self.train_mse, on_step=False, on_epoch=True)
        return loss


class Crash(Exception):
    pass


def stateful_run(root: str, crash_at_step: int | None = None, ckpt_path: str | None = None) -> dict:
    """Three epochs with every kind of state; optionally crash at an optimizer step, or resume."""
    from fabricx.callbacks import Callback, EarlyStopping, ModelCheckpoint
    from fabricx.train import Trainer

    torch.set_num_threads(1)

    class Recorder(Callback):
        def __init__(self):
            self.epochs: list[dict] = []

        def on_train_epoch_end(self, trainer, module):
            metrics = trainer.callback_metrics
            self.epochs.append({k: float(metrics[k]) for k in ("train_loss_epoch", "train_mse", "val_loss")})

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if crash_at_step is not None and trainer.global_step == crash_at_step and trainer.progress.stepped:
                raise Crash(f"simulated crash at step {crash_at_step}")

    recorder = Recorder()
    early = EarlyStopping(monitor="val_loss", patience=100, min_delta=10.0)  # improves only once
    best = ModelCheckpoint(dirpath=f"{root}/best", monitor="val_loss", save_top_k=2)
    last = ModelCheckpoint(dirpath=f"{root}/steps", save_top_k=0, save_last=True, every_n_train_steps=3)
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=3,
        grad_accum_steps=2,
        seed=7,
        default_root_dir=root,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder, early, best, last],
        num_sanity_val_steps=1,
        val_check_interval=8,
    )
    module = StatefulRegressor()
    trainer.fit(
        module,
        loader(regression_data(), batch_size=8),
        loader(regression_data(64, seed=3), batch_size=16, shuffle=False),
        ckpt_path=ckpt_path,
    )
    return {
        "weights": {k: v.clone() for k, v in module.state_dict().items()},
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "epochs": recorder.epochs,
        "early_stopping": early.state_dict(),
        "best": {k: best.state_dict()[k] for k in ("best_model_score", "kth_value")},
        "best_k": sorted(best.best_k_models),
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
    }


class Classifier(TrainModule):
    """Logs a torchmetrics Accuracy in validation, plus plain per-rank and synchronised counts."""

    def __init__(self):
        super().__init__()
        from torchmetrics.classification import MulticlassAccuracy

        self.layer = torch.nn.Linear(8, 2)
        self.val_acc = MulticlassAccuracy(num_classes=2, average="micro")

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        predictions = self(x).argmax(dim=1)
        self.val_acc(predictions, y)
        self.log("val_acc", self.val_acc, prog_bar=True)
        correct = (predictions == y).sum().float()
        self.log("correct_this_rank", correct, reduce_fx="sum")
        self.log("correct_all_ranks", correct, reduce_fx="sum", sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class CaptureOutput(Callback):
    """Sends what each process prints during a run to ``<folder>/stdout_rank<r>.txt``."""

    def __init__(self, folder: str):
        self.folder = folder
        self._saved = None

    def setup(self, trainer, module, stage):
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()

    def teardown(self, trainer, module, stage):
        out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
        sys.stdout, sys.stderr = self._saved
        with open(f"{self.folder}/stdout_rank{trainer.global_rank}.txt", "w") as handle:
            handle.write(out)
        with open(f"{self.folder}/stderr_rank{trainer.global_rank}.txt", "w") as handle:
            handle.write(err)


class RankOneDiverges(Regressor):
    """Logs ``m`` at each epoch end: falling everywhere, but not finite on rank 1 at epoch 1."""

    def on_train_epoch_end(self):
        bad = self.trainer.global_rank == 1 and self.current_epoch == 1
        self.log("m", torch.tensor(math.inf if bad else float(-self.current_epoch)))
