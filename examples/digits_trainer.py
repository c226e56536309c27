"""Classify handwritten digits with ``TrainModule`` + ``Trainer``: metrics, progress, checkpoints, resume.

The data is scikit-learn's bundled 8x8 digits (no download; ``pip install fabricx[examples]``). The
Trainer shows a rich progress bar, logs to CSV, keeps the best checkpoint by validation accuracy plus
a ``last`` one, and ``--resume`` continues from ``last`` at the exact batch where it stopped.

Run::

    python examples/digits_trainer.py                                   # CPU, 10 epochs
    python examples/digits_trainer.py --max-epochs 3 --root-dir demo_runs
    python examples/digits_trainer.py --max-epochs 6 --root-dir demo_runs --resume   # 3 more epochs
    python examples/digits_trainer.py --devices 2 --strategy ddp_spawn --accelerator cpu
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

from fabricx.callbacks import ModelCheckpoint, ThroughputMonitor
from fabricx.loggers import CSVLogger
from fabricx.loggers.plot import plot_run
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.imports import require


def digits_datasets(seed: int = 0, limit: int | None = None) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's digits as (train, validation) tensors: 64 pixels scaled to [0, 1], labels 0-9."""
    # A missing scikit-learn is named with the extra that installs it.
    datasets = require("sklearn.datasets", extra="examples", feature="digits_trainer.py's data", package="scikit-learn")
    images, labels = datasets.load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32) / 16.0
    y = torch.tensor(labels, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    if limit is not None:
        order = order[:limit]
    split = int(0.8 * len(order))
    return TensorDataset(x[order[:split]], y[order[:split]]), TensorDataset(x[order[split:]], y[order[split:]])


class DigitsClassifier(TrainModule):
    """A small MLP; accuracy comes from torchmetrics and is synchronised across processes."""

    def __init__(self, hidden: int = 128, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()  # logged to the CSV logger's hparams file
        self.net = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 10),
        )
        self.train_acc = MulticlassAccuracy(num_classes=10)
        self.val_acc = MulticlassAccuracy(num_classes=10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc.update(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_acc.update(logits, y)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
        self.log("val_acc", self.val_acc, prog_bar=True)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"], weight_decay=1e-4)
        # Halve the learning rate every 4 epochs (the scheduler's state is part of every checkpoint).
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda, mps or auto")
    parser.add_argument("--strategy", default="auto", help="auto, ddp, ddp_spawn, fsdp, deepspeed, ...")
    parser.add_argument("--devices", default="auto", help="count (CPU: processes), '0,1', -1 or auto")
    parser.add_argument("--precision", default=None, help="32-true (default), bf16-mixed, 16-mixed, ...")
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many optimizer steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--root-dir", default="runs/digits", help="checkpoints and logs go here")
    parser.add_argument("--resume", action="store_true", help='continue from the "last" checkpoint')
    parser.add_argument("--save-every-steps", type=int, default=None, help="also checkpoint every N steps")
    parser.add_argument("--limit", type=int, default=None, help="use only this many samples (quick checks)")
    parser.add_argument("--no-progress", action="store_true", help="plain output instead of progress bars")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.devices != "auto" and args.devices.lstrip("-").isdigit():
        args.devices = int(args.devices)
    return args


def newest_last_checkpoint(root: Path) -> Path | None:
    """The newest ``last.ckpt`` any earlier run under ``root`` wrote (epoch-end or mid-epoch), or ``None``."""
    found = list(root.glob("lightning_logs/version_*/checkpoints/**/last.ckpt"))
    return max(found, key=lambda path: path.stat().st_mtime) if found else None


def _shown(path: str | os.PathLike) -> str:
    """``path`` relative to the current folder when it is below it, else as it is."""
    if not path:
        return "none yet"
    relative = os.path.relpath(path)
    return os.fspath(path) if relative.startswith("..") else relative


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(args.root_dir)
    # Each run writes into its own version folder (metrics and checkpoints together), so running the same
    # command again starts a new run beside the old one instead of writing into its checkpoint folder.
    resume_from = newest_last_checkpoint(root) if args.resume else None
    logger = CSVLogger(save_dir=root)
    run_dir = Path(logger.log_dir)
    # The best model by validation accuracy, plus "last" at every epoch end.
    best = ModelCheckpoint(
        dirpath=run_dir / "checkpoints", monitor="val_acc", mode="max", save_top_k=1, save_last=True,
        filename="best-{epoch}-{val_acc:.3f}",
    )
    checkpoints = [best]
    if args.save_every_steps:
        # Mid-epoch checkpoints; --resume picks the newest "last" of all of them.
        checkpoints.append(
            ModelCheckpoint(
                dirpath=run_dir / "checkpoints" / "steps", every_n_train_steps=args.save_every_steps,
                save_last=True,
            )
        )
    trainer = Trainer(
        accelerator=args.accelerator,
        strategy=args.strategy,
        devices=args.devices,
        precision=args.precision,
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        # Samples per second (and MFU when FLOPs are given) in the progress bar and in metrics.csv, averaged
        # over the last 20 batches: a 5-batch window made the figure jump from one update to the next.
        callbacks=[*checkpoints, ThroughputMonitor(log_every_n_steps=5, window_size=20)],
        default_root_dir=root,
        logger=logger,
        log_every_n_steps=5,
        enable_progress_bar=not args.no_progress,
        seed=args.seed,
    )
    train_set, val_set = digits_datasets(args.seed, args.limit)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=256)
    model = DigitsClassifier(lr=args.lr)

    if args.resume and resume_from is None:
        trainer.print(f"--resume: no 'last' checkpoint under {root} yet; starting fresh.")
    trainer.fit(model, train_loader, val_loader, ckpt_path=resume_from)

    metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in trainer.callback_metrics.items() if k.startswith("val_"))
    metrics_file = Path(trainer.log_dir) / "metrics.csv"
    # The epoch counter has moved past the last epoch trained; name that epoch as the progress bar did.
    where = f"step {trainer.global_step} in epoch {trainer.current_epoch - 1}/{args.max_epochs - 1}"
    trainer.print(f"\nFinished at {where}: {metrics}")
    score = "none yet" if best.best_model_score is None else f"{float(best.best_model_score):.4f}"
    # Each path on a line of its own (they are long), relative to where the command ran, as it was given.
    trainer.print(f"Best checkpoint (val_acc {score}):\n  {_shown(best.best_model_path)}")
    trainer.print(f"Last checkpoint (continue with --resume):\n  {_shown(checkpoints[-1].last_model_path)}")
    trainer.print(f"Metrics (CSV):\n  {_shown(metrics_file if metrics_file.exists() else trainer.log_dir)}")
    if trainer.fabric.is_global_zero and metrics_file.exists():
        trainer.print(f"Curves (PNG; or: fabricx plot {root}):\n  {_shown(plot_run(metrics_file.parent))}")
    trainer.print(f"Working folder:\n  {os.path.abspath(root)}")


if __name__ == "__main__":
    main()
