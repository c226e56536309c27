"""Digits classification where the data lives in a ``DataModule``: fit, test the best checkpoint, reload it.

The DataModule downloads nothing (scikit-learn's digits ship with it, or a synthetic stand-in),
splits once in ``setup`` and hands out loaders; ``Trainer.fit(model, datamodule=dm)`` and
``Trainer.test(datamodule=dm, ckpt_path="best")`` use it. The module saves its hyper-parameters,
so ``Classifier.load_from_checkpoint(path)`` rebuilds it.

    python examples/datamodule_trainer.py --max-epochs 5
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

from fabricx.callbacks import ModelCheckpoint
from fabricx.train import DataModule, Trainer, TrainModule


class Digits(DataModule):
    """8x8 digit images split 80/10/10 (a seeded split, the same in every process)."""

    def __init__(self, batch_size: int = 64, limit: int | None = None):
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self) -> None:
        _load()  # where a real DataModule downloads

    def setup(self, stage: str) -> None:
        x, y = _load()
        if self.hparams.limit:
            x, y = x[: self.hparams.limit], y[: self.hparams.limit]
        data = TensorDataset(x, y)
        n_val = n_test = len(data) // 10
        split = random_split(
            data, [len(data) - n_val - n_test, n_val, n_test], generator=torch.Generator().manual_seed(0)
        )
        self.train_set, self.val_set, self.test_set = split

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=256)


def _load() -> tuple[torch.Tensor, torch.Tensor]:
    try:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target)
    except ImportError:  # a synthetic stand-in with the same shapes
        generator = torch.Generator().manual_seed(0)
        y = torch.randint(0, 10, (1797,), generator=generator)
        centers = torch.randn(10, 64, generator=generator)
        return centers[y] + 0.5 * torch.randn(1797, 64, generator=generator), y


class Classifier(TrainModule):
    def __init__(self, hidden: int = 64, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)

    def _loss_acc(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(dim=1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss, acc = self._loss_acc(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("train_acc", acc, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._loss_acc(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc}, prog_bar=True)

    def test_step(self, batch, batch_idx):
        loss, acc = self._loss_acc(batch)
        self.log_dict({"test_loss": loss, "test_acc": acc})

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N samples")
    parser.add_argument("--root-dir", default="datamodule_runs")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()

    best = ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=1, save_last=True)
    trainer = Trainer(
        accelerator=args.accelerator,
        max_epochs=args.max_epochs,
        default_root_dir=args.root_dir,
        callbacks=[best],
        enable_progress_bar=not args.no_progress,
        seed=0,
    )
    data = Digits(limit=args.limit)
    model = Classifier()
    trainer.fit(model, datamodule=data)
    [tested] = trainer.test(datamodule=data, ckpt_path="best")
    reloaded = Classifier.load_from_checkpoint(best.best_model_path)
    trainer.print(
        f"Finished at step {trainer.global_step} in epoch {trainer.current_epoch - 1}/{args.max_epochs - 1}\n"
        f"Best checkpoint:  {best.best_model_path} (val_acc={best.best_model_score:.3f})\n"
        f"Test on best:     test_acc={tested['test_acc']:.3f} test_loss={tested['test_loss']:.3f}\n"
        f"Reloaded hparams: {dict(reloaded.hparams)}"
    )


if __name__ == "__main__":
    main()
