"""Run resume-matrix cells of the Trainer: ``python trainer_job.py OUT PHASE CELL_ID...`` (see fabric_job.py).

Stops: ``first``/``mid``/``last_in_for`` raise after that batch and resume from `OnExceptionCheckpoint`'s file
(a path); ``in_step`` raises inside the training step of a batch in the middle of epoch 1 (resumed from that
file, the batch is skipped: `cells.skips_interrupted_batch`); ``in_validation`` raises inside epoch 1's
end-of-epoch validation, ``in_mid_validation`` inside its mid-epoch one (``val_check_interval=0.5`` in every run of
such a cell) and ``in_epoch_end`` in epoch 1's ``on_train_epoch_end`` (after its validation), all resumed from that
file; ``after_for`` raises when the next epoch starts and resumes with ``ckpt_path="last"`` (ModelCheckpoint saved
it at the epoch's end); ``refit`` lets a first ``fit`` with fewer epochs return and resumes with
``ckpt_path="last"`` and more epochs; ``max_steps`` lets a first ``fit`` cut by ``max_steps`` in the middle of
epoch 1 return (its ``last.ckpt`` written by the cut epoch's end hooks) and resumes with ``ckpt_path="last"`` under
the epoch limit alone: the rest of epoch 1 runs as epoch 1, then epoch 2 whole; ``kill`` (one process) is killed
by SIGKILL after a seeded batch and resumes with ``ckpt_path="last"`` from ``ModelCheckpoint(every_n_train_steps=2)``;
``after_stop`` (one process, ``early_stop``) is killed in ``on_train_end`` of the run EarlyStopping ended and resumes
with ``ckpt_path="last"`` (written at that epoch's end): an uninterrupted run trained no more.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from cells import EPOCHS, KILLS, OVERFLOWING_SCALER, Cell, by_id, refusal
from record import final_state
from toy_data import BATCH, IdDataset, iterable_batches, make_loader

from fabricx import seed_everything
from fabricx.callbacks import (
    BackboneFinetuning,
    Callback,
    EarlyStopping,
    EMAWeightAveraging,
    GradientAccumulationScheduler,
    ModelCheckpoint,
    OnExceptionCheckpoint,
    StochasticWeightAveraging,
)
from fabricx.precision import MixedPrecision
from fabricx.train import CombinedLoader, Trainer, TrainModule
from fabricx.utilities.exceptions import FabricxError


class StopRun(Exception):
    """The stop of a cell's first run."""


class Recorded(TrainModule):
    def __init__(self, cell: Cell, phase: str, out: Path) -> None:
        super().__init__()
        self.cell, self.phase, self.out = cell, phase, out
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 1))
        self.trace: list[tuple] = []
        self.validation: list[tuple] = []
        self.batches_done = 0  # training batches of the whole run, kept in the checkpoint
        self.start_step: int | None = None
        self.automatic_optimization = cell.config != "manual"
        if cell.config == "finetune":
            self.backbone = self.net[0]  # what BackboneFinetuning freezes, then trains

    def _loader(self, size: int, shuffle: bool = True) -> DataLoader:
        kwargs: dict[str, Any] = {"batch_size": BATCH, "shuffle": shuffle}
        if self.cell.loader == "shuffle_generator":
            kwargs["generator"] = torch.Generator().manual_seed(7)
        if self.cell.loader == "workers":
            kwargs["num_workers"] = 2
        return DataLoader(IdDataset(size, augment=True), **kwargs)

    def train_dataloader(self) -> Any:
        if self.cell.loader == "combined":
            return CombinedLoader({"a": self._loader(40), "b": self._loader(24)}, mode="max_size_cycle")
        return make_loader(self.cell.loader, self.trainer.global_rank, self.trainer.world_size)[0]

    @property
    def per_epoch(self) -> int:
        """Training batches an epoch (the ``iterable`` loaders have no length: the Trainer counts them as infinite)."""
        if self.cell.loader.startswith("iterable"):
            return iterable_batches(self.trainer.global_rank, self.trainer.world_size)
        return int(self.trainer.num_training_batches)

    def val_dataloader(self) -> Any:
        return self._loader(16, shuffle=False)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.start_step is None:
            self.start_step = self.batches_done
        in_the_middle = batch_idx == self.per_epoch // 2
        if self.phase == "first" and self.cell.stop == "in_step" and self.current_epoch == 1 and in_the_middle:
            raise StopRun("inside the training step")
        parts = list(batch.values()) if isinstance(batch, dict) else [batch]
        ids = torch.cat([p[0] for p in parts])
        x, y = torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])
        loss = nn.functional.mse_loss(self.net(x), y)
        self.trace.append((self.batches_done, self.current_epoch, ids.tolist(), loss.detach().clone()))
        self.batches_done += 1
        self.log("train_loss", loss)
        if not self.automatic_optimization:
            self._manual_step(loss, batch_idx)
        return loss

    def _manual_step(self, loss: torch.Tensor, batch_idx: int) -> None:
        """The first optimizer steps every batch; the second every other one, its gradients summed over two."""
        every_batch, every_other = self.optimizers()
        self.manual_backward(loss)
        every_batch.step()
        every_batch.zero_grad()
        if batch_idx % 2 == 1:
            every_other.step()
            every_other.zero_grad()
        self.lr_schedulers().step()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["batches_done"] = self.batches_done

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.batches_done = checkpoint["batches_done"]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        ids, x, y = batch
        in_the_middle = batch_idx == int(self.trainer.num_val_batches[0]) // 2  # 4 batches on 1 process, 2 on 2
        if self.phase == "first" and self.current_epoch == 1 and in_the_middle:
            read_this_epoch = self.batches_done - self.current_epoch * self.per_epoch
            at_the_end = read_this_epoch == self.per_epoch
            if self.cell.stop == "in_validation" and at_the_end:
                raise StopRun("inside validation")
            if self.cell.stop == "in_mid_validation" and not at_the_end:
                raise StopRun("inside the mid-epoch validation")
        loss = nn.functional.mse_loss(self.net(x), y)
        # keyed by the step too: a cell validating twice an epoch sees the same samples twice
        self.validation.append((self.current_epoch, self.trainer.global_step, ids.tolist(), loss.detach().clone()))
        # Reduced across processes, as a monitored metric must be: every rank's callbacks then decide alike (and a
        # restored rank gets rank 0's callback states).
        self.log("val_loss", loss, sync_dist=True)

    def configure_optimizers(self) -> Any:
        if not self.automatic_optimization:
            every_batch = torch.optim.AdamW(self.net[0].parameters(), lr=0.01)
            every_other = torch.optim.SGD(self.net[3].parameters(), lr=0.05, momentum=0.9)
            return [every_batch, every_other], [torch.optim.lr_scheduler.StepLR(every_batch, step_size=3, gamma=0.7)]
        # BackboneFinetuning adds the frozen backbone to the optimizer itself when it unfreezes it.
        optimizer = torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=0.01)
        if not self.cell.scheduler:
            return optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.cell.scheduler}}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.phase != "first":
            return
        stop, epoch, per_epoch = self.cell.stop, self.current_epoch, self.per_epoch
        if stop == "kill" and self.batches_done == kill_batch(self.cell, per_epoch):
            # A preemption between batches. fabricx runs the module's hook before ModelCheckpoint's (the migration
            # guide's row), so the newest file may be the one written 2 steps before.
            self._killed()
        if (
            (stop == "first" and epoch == 0 and batch_idx == 0)
            or (stop == "mid" and epoch == 1 and batch_idx == per_epoch // 2)
            or (stop == "last_in_for" and epoch == 1 and batch_idx == per_epoch - 1)
        ):
            raise StopRun(stop)

    def _killed(self) -> None:
        torch.save({"trace": self.trace, "val": self.validation}, self.out / f"{self.cell.id}.kill_trace.pt")
        os.kill(os.getpid(), signal.SIGKILL)

    def on_train_end(self) -> None:
        if self.phase == "first" and self.cell.stop == "after_stop":
            self._killed()  # EarlyStopping ended the run; its last checkpoint was written at the epoch's end

    def on_train_epoch_end(self) -> None:
        if self.phase == "first" and self.cell.stop == "in_epoch_end" and self.current_epoch == 1:
            raise StopRun("in the epoch's end hooks")

    def on_train_epoch_start(self) -> None:
        if self.phase == "first" and self.cell.stop == "after_for" and self.current_epoch == 2:
            raise StopRun("after the epoch")

    def write(self, final: bool) -> None:
        # A resume that reads no batch (stopped after the run's last one) starts where its checkpoint left off.
        start_step = self.batches_done if self.start_step is None else self.start_step
        record: dict[str, Any] = {"trace": self.trace, "start_step": start_step, "val": self.validation}
        if final:
            optimizer, *other_optimizers = self.trainer.optimizers
            schedulers = self.trainer.lr_scheduler_configs
            record["final"] = final_state(
                {
                    "model": self,
                    "optimizer": optimizer,
                    "scheduler": schedulers[0].scheduler if schedulers else None,
                    "step": self.trainer.global_step,
                },
                self.trainer.precision_plugin,
            )
            record["final"]["top_k"] = _top_k_state(self.trainer)
            record["final"]["epoch"] = self.trainer.current_epoch  # the epochs the run counts ended
            for index, other in enumerate(other_optimizers, start=1):  # manual optimization's second
                record["final"][f"optimizer_{index}"] = final_state({"model": self, "optimizer": other, "step": 0})[
                    "optimizer"
                ]
        rank = self.trainer.global_rank
        torch.save(record, self.out / f"{self.cell.id}.{self.phase}.rank{rank}.pt")

    def on_fit_end(self) -> None:
        if self.phase == "first" and self.cell.stop not in ("refit", "max_steps"):
            raise AssertionError(f"the first run of {self.cell.id} ended without reaching its stop")
        if self.phase == "first" and self.cell.stop == "max_steps":
            cut_epoch, in_epoch = divmod(self.batches_done, self.per_epoch)
            if (cut_epoch, self.trainer.global_step) != (1, self.trainer.max_steps) or in_epoch == 0:
                raise AssertionError(f"the first run of {self.cell.id} was not cut by max_steps inside epoch 1")
        self.write(final=self.phase != "first")



class WriteOnException(Callback):
    """Writes the stopped run's trace (a module has no exception hook; callbacks do)."""

    def on_exception(self, trainer: Trainer, pl_module: Recorded, exception: BaseException) -> None:
        pl_module.write(final=False)


def _top_k_state(trainer: Trainer) -> dict[str, Any]:
    """What the top-k `ModelCheckpoint` keeps: its best files and scores, and the files left in its folder."""
    [top_k] = [callback for callback in trainer.checkpoint_callbacks if getattr(callback, "monitor", None)]
    folder = Path(top_k.dirpath)
    return {
        "best_k": {Path(path).name: score for path, score in top_k.best_k_models.items()},
        "best": Path(top_k.best_model_path).name,
        "files": sorted(path.name for path in folder.iterdir()) if folder.is_dir() else [],
    }


def _strategy(cell: Cell, world: int) -> str:
    """The Trainer's strategy for a run of ``cell`` on ``world`` processes (a one-process cell resumed on two: DDP)."""
    strategy = "ddp" if cell.strategy == "single" else cell.strategy
    return "auto" if world == 1 and strategy in ("ddp", "ddp_spawn") else strategy  # sharded ones stay sharded


def kill_batch(cell: Cell, per_epoch: int) -> int:
    """After how many batches a ``kill`` cell's first run is killed: a seeded one of its ``EPOCHS * per_epoch`` (one
    process), after the first checkpoint (written at optimizer step 2) and before the run's end."""
    first = 2 * cell.accumulate + 1
    epochs = 2 if cell.config == "early_stop" else EPOCHS  # early stopping ends the run after epoch 1
    return first + cell.seed % (epochs * per_epoch - first)


def _overflowing_mixed_precision() -> MixedPrecision:
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(OVERFLOWING_SCALER)
    return MixedPrecision("16-mixed", "cpu", scaler=scaler)


def _cut_step(cell: Cell, world: int) -> int:
    """An optimizer step halfway through epoch 1: epochs of 10 batches on one process, 5 on each of two."""
    steps_per_epoch = -(-(10 // world) // cell.accumulate)
    return steps_per_epoch + max(1, steps_per_epoch // 2)


def _config_flags(cell: Cell, callbacks: list[Callback]) -> dict[str, Any]:
    """The Trainer flags of the cell's configuration (`cells.TRAINER_CONFIGS`); a callback it needs is added."""
    if cell.config == "limit":
        return {"limit_train_batches": 0.6}
    if cell.config == "val_every_3":
        return {"val_check_interval": 3, "check_val_every_n_epoch": None}
    if cell.config == "reload":
        return {"reload_dataloaders_every_n_epochs": 1}
    if cell.config == "acc_schedule":
        callbacks.append(GradientAccumulationScheduler({1: 2}))
        return {}
    if cell.config == "early_stop":
        callbacks.append(EarlyStopping(monitor="val_loss", min_delta=1e6, patience=1))
        return {}
    if cell.config == "manual":
        return {}
    if cell.config == "early_stop_mid":
        callbacks.append(EarlyStopping(monitor="val_loss", min_delta=1e6, patience=2, check_on_train_epoch_end=False))
        return {"val_check_interval": 0.5}
    if cell.config == "swa":
        callbacks.append(StochasticWeightAveraging(swa_lrs=0.005, swa_epoch_start=1))
        return {}
    if cell.config == "ema":
        callbacks.append(EMAWeightAveraging(decay=0.9))
        return {}
    if cell.config == "finetune":
        callbacks.append(BackboneFinetuning(unfreeze_backbone_at_epoch=1, backbone_initial_lr=0.001))
        return {}
    assert not cell.config, cell.config
    return {}


def fit(cell: Cell, phase: str, out: Path) -> None:
    world = cell.resume_world if phase == "resume" else cell.world
    # The same seed in every run, as a user's script has (the distributed sampler's order follows it); spawned
    # processes start from this process's generators.
    seed_everything(cell.seed % 1000, verbose=False)
    if phase == "resume":
        torch.manual_seed(4321), random.seed(4321), np.random.seed(4321)  # the resume must not depend on these
    module = Recorded(cell, phase, out)
    folder = out / f"{cell.id}.{'straight' if phase == 'straight' else 'first'}"  # the resume reads the first's
    # A kill cell resumes from the newest of the checkpoints written every 2 optimizer steps, as after a preemption.
    every_n_train_steps = 2 if cell.stop == "kill" else None
    callbacks = [
        ModelCheckpoint(dirpath=folder, save_last=True, every_n_train_steps=every_n_train_steps),
        # The best 2 by validation loss: which files it keeps, and deletes, must not depend on the stop.
        ModelCheckpoint(dirpath=folder / "top", monitor="val_loss", save_top_k=2, filename="{epoch}-{step}"),
        OnExceptionCheckpoint(folder),
        WriteOnException(),
    ]
    max_epochs = 2 if phase == "first" and cell.stop == "refit" else EPOCHS
    max_steps = _cut_step(cell, world) if phase == "first" and cell.stop == "max_steps" else -1
    flags = _config_flags(cell, callbacks)
    flags.setdefault("val_check_interval", 0.5 if cell.stop == "in_mid_validation" else None)
    trainer = Trainer(
        accelerator="cpu", devices=world, strategy=_strategy(cell, world),
        max_epochs=max_epochs, max_steps=max_steps, accumulate_grad_batches=cell.accumulate, logger=False,
        precision=None if cell.precision == "16-mixed" else cell.precision or "32-true",
        plugins=[_overflowing_mixed_precision()] if cell.precision == "16-mixed" else None,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
        gradient_clip_val=0.05 if cell.clip else None,
        use_distributed_sampler=cell.loader != "batch_sampler",  # the user's batch sampler splits the data itself
        **flags,
    )
    ckpt_path = None
    if phase == "resume":
        uses_last = cell.stop in ("after_for", "refit", "max_steps", *KILLS)
        ckpt_path = "last" if uses_last else str(folder / "on_exception.ckpt")
    try:
        trainer.fit(module, ckpt_path=ckpt_path)
    except FabricxError as error:
        if phase != "resume" or not any(reason in str(error) for reason in refusal(cell)):
            raise
        # A documented refusal (`cells.REFUSALS`): the outcome this cell's resume may have.
        torch.save({"refused": str(error)}, out / f"{cell.id}.resume.rank{trainer.global_rank}.pt")
    except Exception as error:
        # Re-raised from spawned processes as another class of the same name (`__mp_main__.StopRun`), or inside
        # the launcher's own error that quotes the process's traceback.
        if type(error).__name__ != StopRun.__name__ and f"{StopRun.__name__}:" not in str(error):
            raise


def main() -> None:
    out, phase, *ids = sys.argv[1:]
    torch.set_num_threads(1)
    for cell in map(by_id, ids):
        if phase == "first":
            fit(cell, "straight", Path(out))
            if cell.stop in KILLS:
                continue  # its first run is a process of its own (phase "kill"), which dies
        fit(cell, "first" if phase == "kill" else phase, Path(out))


if __name__ == "__main__":
    main()
