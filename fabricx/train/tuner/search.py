"""Trial runs for the Tuner: a short ``fit`` on a throwaway Trainer with the original's hardware settings.

The user's Trainer is left as it was (no counters, callbacks or loggers touched) and the module's
weights are put back afterwards, so a search never leaks into the real run.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from fabricx.utilities.exceptions import MisconfigurationException


def check_single_process(trainer: Any, what: str) -> None:
    if trainer.world_size > 1 or trainer.num_devices > 1:
        raise MisconfigurationException(
            f"{what} is currently not supported with distributed strategies (this Trainer runs on"
            f" {trainer.num_devices} devices x {trainer.num_nodes} nodes). Tune with devices=1, then train distributed."
        )


def search_trainer(trainer: Any, callbacks: list[Any], **flags: Any) -> Any:
    """A Trainer on the same hardware and precision as ``trainer``, without loggers, checkpoints or bars."""
    from fabricx.train.trainer import Trainer

    settings: dict[str, Any] = {
        "accelerator": trainer.accelerator,
        "devices": 1,
        "precision": trainer.precision,
        "default_root_dir": trainer.default_root_dir,
        "max_epochs": trainer.max_epochs,
        "limit_train_batches": trainer.limit_train_batches,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "gradient_clip_val": trainer.gradient_clip_val,
        "gradient_clip_algorithm": trainer.gradient_clip_algorithm,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "callbacks": callbacks,
    }
    settings.update(flags)
    return Trainer(**settings)


@contextmanager
def weights_restored(module: Any, *loaders: Any) -> Iterator[None]:
    """Put ``module``'s parameters and buffers, the random generators, and the generators ``loaders`` shuffle
    and sample with, back as they were when the block ends.

    Restoring the generators makes a search repeatable (a loader that draws random data draws the same
    data again) and leaves the real run the random stream, and the batch order, it would have had without
    tuning.
    """
    from fabricx.utilities.rng import capture_rng_states, restore_rng_states

    state = copy.deepcopy(module.state_dict())
    rng = capture_rng_states()
    generators = {id(g): (g, g.get_state()) for g in _loader_generators(loaders)}
    try:
        yield
    finally:
        module.load_state_dict(state)
        restore_rng_states(rng)
        for generator, saved in generators.values():
            generator.set_state(saved)


def _loader_generators(loaders: Any) -> Iterator[torch.Generator]:
    """The ``torch.Generator`` objects of the loaders in ``loaders`` (nested in lists, tuples or dicts): the
    loader's own, its sampler's and its batch sampler's sampler's."""
    for loader in loaders:
        if isinstance(loader, dict):
            yield from _loader_generators(loader.values())
        elif isinstance(loader, list | tuple):
            yield from _loader_generators(loader)
        elif loader is not None:
            batch_sampler = getattr(loader, "batch_sampler", None)
            for owner in (loader, getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
                generator = getattr(owner, "generator", None)
                if isinstance(generator, torch.Generator):
                    yield generator
