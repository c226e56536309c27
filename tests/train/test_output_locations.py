"""Where a run's files go and with which mode: the PyTorch profiler's trace under ``default_root_dir``, and
every checkpoint and exported weights file with the one mode the user's umask gives."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from fabricx import Fabric
from fabricx.checkpoint.export import save_weights
from fabricx.train import Trainer
from fabricx.utilities.profilers import PyTorchProfiler, resolve_profiler
from tests.train._train_helpers import Regressor, loader, regression_data


def test_pytorch_profiler_writes_under_default_root_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a stray ./profiles would land here
    root = tmp_path / "run"
    trainer = Trainer(accelerator="cpu", default_root_dir=root, profiler="pytorch", loggers=False, max_steps=2,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(Regressor(), loader(regression_data(32)))
    assert list((root / "profiles").glob("*.pt.trace.json")), sorted(p.name for p in root.rglob("*"))
    assert not (tmp_path / "profiles").exists()


def test_a_chosen_profiler_folder_is_kept(tmp_path):
    chosen = PyTorchProfiler(dirpath=tmp_path / "mine")
    assert resolve_profiler(chosen, root_dir=tmp_path / "run").dirpath == os.fspath(tmp_path / "mine")
    assert resolve_profiler(PyTorchProfiler(), root_dir=tmp_path / "run").dirpath == os.path.join(
        os.fspath(tmp_path / "run"), "profiles"
    )


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoint_files_all_get_the_mode_of_the_users_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        Fabric(accelerator="cpu", devices=1).save(tmp_path / "ckpt", {"model": torch.nn.Linear(2, 2), "step": 3})
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "ckpt").iterdir() if path.is_file()}
    assert any(name.endswith(".safetensors") for name in modes), modes
    assert set(modes.values()) == {0o666 & ~umask}, {name: oct(mode) for name, mode in modes.items()}


@pytest.mark.parametrize("umask", [0o022, 0o002])
@pytest.mark.parametrize("max_shard_size", ["10GB", 200], ids=["one-file", "sharded"])
def test_exported_weights_get_the_mode_of_the_users_umask(tmp_path, umask, max_shard_size):
    previous = os.umask(umask)
    try:
        save_weights(torch.nn.Linear(8, 8), tmp_path / "weights", max_shard_size=max_shard_size)
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "weights").iterdir()}
    assert any(name.endswith(".safetensors") for name in modes), modes
    assert any(name.endswith(".index.json") for name in modes) == (max_shard_size == 200), modes
    assert set(modes.values()) == {0o666 & ~umask}, {name: oct(mode) for name, mode in modes.items()}
