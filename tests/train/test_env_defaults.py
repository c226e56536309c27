"""``PL_TRAINER_*`` environment variables fill the Trainer arguments the code leaves out."""

from __future__ import annotations

import pytest

from fabricx.train.config.env_defaults import env_defaults


def test_values_are_read_as_literals_and_strings_stay_strings():
    environ = {"PL_TRAINER_MAX_STEPS": "7", "PL_TRAINER_LOGGER": "False", "PL_TRAINER_ACCELERATOR": "cpu"}
    found = env_defaults(["max_steps", "logger", "accelerator", "devices"], environ)
    assert found == {"max_steps": 7, "logger": False, "accelerator": "cpu"}


def test_empty_and_unknown_variables_are_ignored():
    assert env_defaults(["max_steps"], {"PL_TRAINER_MAX_STEPS": "", "PL_TRAINER_NOT_AN_ARG": "1"}) == {}


def test_trainer_takes_env_defaults_but_explicit_arguments_win(monkeypatch: pytest.MonkeyPatch, tmp_path):
    from fabricx.train import Trainer

    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    monkeypatch.setenv("PL_TRAINER_ENABLE_CHECKPOINTING", "False")
    trainer = Trainer(default_root_dir=tmp_path, logger=False)
    assert trainer.max_steps == 7
    assert trainer.checkpoint_callback is None
    assert Trainer(default_root_dir=tmp_path, logger=False, max_steps=42).max_steps == 42
