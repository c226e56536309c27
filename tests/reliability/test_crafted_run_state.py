"""Run state read from a crafted checkpoint cannot reach outside the run.

* A Trainer ``.ckpt`` whose ModelCheckpoint state names files outside ``dirpath`` (``last_model_path``, a
  ``best_k_models`` key, through ``..`` or a symbolic link) never makes the resumed run delete them.
* ``Tuner.lr_find`` leaves a DataLoader's own shuffling generator as it found it, so the real run draws the
  batches it would have drawn without the search.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fabricx.train as ft
from fabricx.callbacks import ModelCheckpoint

_QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def _data(shuffle: bool = False, generator: torch.Generator | None = None) -> torch.utils.data.DataLoader:
    samples = torch.randn(12, 8, generator=torch.Generator().manual_seed(1))
    return torch.utils.data.DataLoader(samples, batch_size=4, shuffle=shuffle, generator=generator)


class _Model(ft.TrainModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.lr = lr
        self.layer = nn.Linear(8, 2)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch).pow(2).mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _crafted(tmp_path: Path, callback: ModelCheckpoint, change: dict[str, Any]) -> Path:
    """A real checkpoint of the run whose ModelCheckpoint state gets ``change``."""
    trainer = ft.Trainer(
        default_root_dir=tmp_path / "run", max_epochs=1, accelerator="cpu", **_QUIET, callbacks=[callback]
    )
    trainer.fit(_Model(), _data(), _data())
    contents = torch.load(callback.last_model_path or callback.best_model_path, weights_only=True)
    contents["callbacks"][callback.state_key].update(change)
    crafted = tmp_path / "crafted.ckpt"
    torch.save(contents, crafted)
    return crafted


@pytest.mark.parametrize("via", ["dotdot", "symlink"])
@pytest.mark.parametrize("field", ["last_model_path", "best_k_models"])
def test_a_checkpoint_cannot_make_the_run_delete_files_outside_dirpath(tmp_path: Path, field: str, via: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    dirpath = tmp_path / "run" / "checkpoints"

    def callback() -> ModelCheckpoint:
        if field == "last_model_path":
            return ModelCheckpoint(dirpath=dirpath, save_last=True)
        return ModelCheckpoint(dirpath=dirpath, monitor="val_loss", save_top_k=1, save_last=False)

    dirpath.mkdir(parents=True)
    if via == "dotdot":
        named = f"{dirpath}/../../victim.txt"
    else:
        (dirpath / "outside").symlink_to(tmp_path)
        named = f"{dirpath}/outside/victim.txt"
    if field == "last_model_path":
        change: dict[str, Any] = {"last_model_path": named}
    else:  # the worst score, so the first new checkpoint replaces (and would delete) it
        change = {"best_k_models": {named: 1e30}, "kth_best_model_path": named, "kth_value": 1e30,
                  "best_model_path": named, "best_model_score": 1e30}  # fmt: skip
    crafted = _crafted(tmp_path, callback(), change)
    resumed = ft.Trainer(
        default_root_dir=tmp_path / "run", max_epochs=2, accelerator="cpu", **_QUIET, callbacks=[callback()]
    )
    resumed.fit(_Model(), _data(), _data(), ckpt_path=crafted)
    assert victim.read_text() == "keep me"
    assert resumed.current_epoch == 2
    checkpoint = next(c for c in resumed.callbacks if isinstance(c, ModelCheckpoint))
    assert named not in checkpoint.best_k_models and checkpoint.last_model_path != named


def test_lr_find_leaves_the_loaders_own_generator_as_it_was(tmp_path: Path) -> None:
    from fabricx.train.tuner import Tuner

    def batches_of_a_run(search: bool) -> list[torch.Tensor]:
        seen: list[torch.Tensor] = []

        class Recording(_Model):
            def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
                if not self.trainer.sanity_checking:
                    seen.append(batch.clone())
                return super().training_step(batch, batch_idx)

        torch.manual_seed(0)
        loader = _data(shuffle=True, generator=torch.Generator().manual_seed(7))
        model = Recording()
        trainer = ft.Trainer(default_root_dir=tmp_path / str(search), max_epochs=2, accelerator="cpu", **_QUIET)
        if search:
            Tuner(trainer).lr_find(model, train_dataloaders=loader, num_training=5, update_attr=False)
            seen.clear()
        trainer.fit(model, loader)
        return seen

    plain, searched = batches_of_a_run(False), batches_of_a_run(True)
    assert len(plain) == len(searched) == 6
    for a, b in zip(plain, searched, strict=True):
        assert torch.equal(a, b)
