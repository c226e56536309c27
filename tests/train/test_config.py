"""TrainerConfig: the one place the Trainer's flags are checked; it must know every Trainer flag."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from fabricx.train import Trainer
from fabricx.train.config.trainer_config import TrainerConfig
from fabricx.utilities.exceptions import MisconfigurationError


def test_config_fields_are_the_trainer_flags_with_the_same_defaults():
    parameters = inspect.signature(Trainer.__init__).parameters
    given = {name: p.default for name, p in parameters.items() if name != "self"}
    fields = {f.name: f.default for f in dataclasses.fields(TrainerConfig) if f.init}
    assert given == fields


def test_modes_rewrite_the_flags_they_imply():
    config = TrainerConfig(fast_dev_run=3, max_time={"minutes": 2}, logger=False, accumulate_grad_batches=4)
    assert (config.max_steps, config.max_epochs, config.num_sanity_val_steps) == (3, 1, 0)
    assert config.limit_train_batches == config.limit_val_batches == 3
    assert config.max_time == 120.0 and config.loggers is False and config.enable_checkpointing is False
    assert config.grad_accum_steps == 4
    assert TrainerConfig(overfit_batches=2).limit_val_batches == 2
    # As Lightning: an unset max_epochs stays None until fit() resolves it (1000 with a warning, or -1).
    assert TrainerConfig().max_epochs is None and TrainerConfig(max_steps=5).max_epochs is None


def test_trainer_keeps_the_checked_values_as_plain_attributes(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, limit_val_batches=0.5, logger=False, enable_progress_bar=False)
    assert trainer.limit_val_batches == 0.5 and trainer.num_sanity_val_steps == 2 and trainer.log_every_n_steps == 50
    trainer.limit_val_batches = 0  # assignable, as in Lightning
    assert trainer.limit_val_batches == 0 and trainer.config.limit_val_batches == 0.5


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({"max_epochs": -2}, "You passed in -2"),
        ({"limit_train_batches": 1.5}, "invalid value 1.5 for limit_train_batches"),
        ({"deterministic": "sometimes"}, "deterministic='sometimes'"),
        ({"barebones": True, "enable_checkpointing": True}, "barebones=True"),
    ],
)
def test_a_wrong_flag_is_refused_before_anything_is_built(flags, match):
    with pytest.raises(MisconfigurationError, match=match):
        TrainerConfig(**flags)
