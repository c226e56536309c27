"""The Trainer's callback list: the user's, the defaults Lightning adds, and ``configure_callbacks()``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fabricx.train.config.trainer_config import TrainerConfig
    from fabricx.train.module.module import TrainModule


def trainer_callbacks(config: TrainerConfig) -> list[Any]:
    """The given callbacks plus a progress bar, a model summary and a ModelCheckpoint unless disabled or given."""
    from fabricx.train.callbacks.base import Checkpoint
    from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint
    from fabricx.train.callbacks.model_summary import ModelSummary, RichModelSummary
    from fabricx.train.callbacks.progress import ProgressBar
    from fabricx.train.callbacks.progress_bar import RichProgressBar

    given = list(config.callbacks)  # the config made any iterable a list
    extra: list[Any] = []
    if config.enable_progress_bar and not any(isinstance(cb, ProgressBar) for cb in given):
        extra.append(RichProgressBar())
    summaries = [type(cb) for cb in given if isinstance(cb, ModelSummary)]
    if config.enable_model_summary and summaries:
        rank_zero_info(
            f"Trainer already configured with model summary callbacks: {summaries}. Skipping setting a default "
            "`ModelSummary` callback."
        )
    elif config.enable_model_summary:
        extra.append(RichModelSummary())  # Lightning's default where rich is installed (fabricx depends on it)
    if config.enable_checkpointing and not any(isinstance(cb, Checkpoint) for cb in given):
        default = ModelCheckpoint(save_last=True, save_top_k=0)
        default._last_at_every_trigger = True  # a last.ckpt at every epoch end, for fit(ckpt_path="last")
        extra.append(default)
    return checkpoints_last(given + extra)


def with_module_callbacks(given: list[Any], module: TrainModule) -> list[Any]:
    """``configure_callbacks()`` results replace the Trainer's callbacks of the same types."""
    from fabricx.train.module.current_hook import call_hook

    hook = getattr(module, "configure_callbacks", None)
    returned = call_hook(module, "configure_callbacks", hook) if callable(hook) else []
    extra = list(returned) if isinstance(returned, (list, tuple)) else ([returned] if returned else [])
    if not extra:
        return list(given)
    kinds = {type(cb) for cb in extra}
    return checkpoints_last([cb for cb in given if type(cb) not in kinds] + extra)


def checkpoints_last(callbacks: list[Any]) -> list[Any]:
    """Checkpoint callbacks last, so that they store what every other callback did in the same hook."""
    from fabricx.train.callbacks.base import Checkpoint

    checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint)]
    return [cb for cb in callbacks if not isinstance(cb, Checkpoint)] + checkpoints


__all__ = ["checkpoints_last", "trainer_callbacks", "with_module_callbacks"]
