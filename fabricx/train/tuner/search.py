"""Trial runs for the Tuner: a short ``fit`` on a throwaway Trainer with the original's hardware settings.

The user's Trainer is left as it was (no counters, callbacks or loggers touched) and the module's
weights are put back afterwards, so a search never leaks into the real run.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
def weights_restored(module: Any) -> Iterator[None]:
    """Put ``module``'s parameters and buffers, and the random generators, back as they were when the block ends.

    Restoring the generators makes a search repeatable (a loader that draws random data draws the same
    data again) and leaves the real run the random stream it would have had without tuning.
    """
    from fabricx.utilities.rng import capture_rng_states, restore_rng_states

    state = copy.deepcopy(module.state_dict())
    rng = capture_rng_states()
    try:
        yield
    finally:
        module.load_state_dict(state)
        restore_rng_states(rng)


def is_oom_error(exception: BaseException) -> bool:
    """Whether ``exception`` is an out-of-memory error (CUDA, cuDNN's or the CPU allocator's)."""
    if not isinstance(exception, RuntimeError):
        return False
    if type(exception).__name__ == "OutOfMemoryError":
        return True
    if len(exception.args) != 1 or not isinstance(exception.args[0], str):
        return False
    message = exception.args[0]
    return (
        ("CUDA" in message and "out of memory" in message)
        or "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED." in message
        or "DefaultCPUAllocator: can't allocate memory" in message
    )


def free_accelerator_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
