"""Two `ModelCheckpoint`s, one keeping ``last.ckpt`` and one the best 2 by a metric: a fit resumed from
``last.ckpt`` keeps the files the run left alone keeps (deliberate difference).

Lightning writes ``last.ckpt`` in the first callback's hook, before the second saves its top-k file of the same
step: the ``last.ckpt`` a resume reads does not know that file. The resumed run never deletes it and ranks the rest
without it, so it keeps other checkpoints than the run left alone. fabricx writes ``last`` once every checkpoint
callback of the hook has saved (docs/migrating/lightning-trainer.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset


def _module_class(base: type) -> type:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            # the best 2 (lowest): epochs 0 and 1, then 0 and 2; epoch 3 is worse than both
            self.log("score", torch.tensor([0.0, 2.0, 1.0, 1.5][self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Module


def _kept(trainer_class: type, module_class: type, checkpoint: type, folder: Path, stop_after: int | None) -> dict:
    """The top-2 files kept after 4 epochs: left alone, or a first fit of ``stop_after`` epochs resumed from its
    ``last.ckpt``."""
    Module = _module_class(module_class)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    fits = [(stop_after, None), (4, "last.ckpt")] if stop_after else [(4, None)]
    for max_epochs, resume_from in fits:
        top_k = checkpoint(dirpath=folder / "top", monitor="score", save_top_k=2, filename="{epoch}")
        callbacks = [checkpoint(dirpath=folder, save_last=True), top_k]
        trainer = trainer_class(max_epochs=max_epochs, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=callbacks)
        ckpt_path = str(folder / resume_from) if resume_from else None
        trainer.fit(Module(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4), ckpt_path=ckpt_path)
    return {
        "best_k": sorted(Path(path).name for path in top_k.best_k_models),
        "files": sorted(path.name for path in (folder / "top").iterdir()),
    }


def test_a_fit_resumed_from_last_keeps_the_top_k_files_of_the_run_left_alone(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint

    import fabricx.train as fx
    from fabricx.callbacks import ModelCheckpoint

    left_alone = {"best_k": ["epoch=0.ckpt", "epoch=2.ckpt"], "files": ["epoch=0.ckpt", "epoch=2.ckpt"]}
    theirs = (pl.Trainer, pl.LightningModule, LightningModelCheckpoint)
    assert _kept(*theirs, tmp_path / "lightning", stop_after=None) == left_alone
    # Lightning's `last.ckpt` of epoch 2 misses that epoch's top-k file: the resumed run still holds epoch 1 as
    # second best, replaces it by epoch 3, and leaves epoch 2's file on disk.
    assert _kept(*theirs, tmp_path / "lightning-resumed", stop_after=3) == {
        "best_k": ["epoch=0.ckpt", "epoch=3.ckpt"],
        "files": ["epoch=0.ckpt", "epoch=2.ckpt", "epoch=3.ckpt"],
    }
    ours = (fx.Trainer, fx.TrainModule, ModelCheckpoint)
    assert _kept(*ours, tmp_path / "fabricx", stop_after=None) == left_alone
    assert _kept(*ours, tmp_path / "fabricx-resumed", stop_after=3) == left_alone
