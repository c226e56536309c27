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
    callbacks = given + extra
    _check_unique_state_keys(callbacks)
    return checkpoints_last(callbacks)


def _check_unique_state_keys(callbacks: list[Any]) -> None:
    # As Lightning: two callbacks with state under one checkpoint key would overwrite each other's state.
    from fabricx.train.callbacks.base import Callback, overrides

    seen: set[str] = set()
    for callback in callbacks:
        if not isinstance(callback, Callback) or not overrides(callback, "state_dict", Callback):
            continue
        if callback.state_key in seen:
            name = type(callback).__name__
            raise RuntimeError(
                f"Found more than one stateful callback of type `{name}`. In the current configuration, this "
                "callback does not support being saved alongside other instances of the same type. Please consult "
                f"the documentation of `{name}` regarding valid settings for the callback state to be "
                "checkpointable. HINT: The `callback.state_key` must be unique among all callbacks in the Trainer."
            )
        seen.add(callback.state_key)


def with_module_callbacks(given: list[Any], module: TrainModule) -> list[Any]:
    """``configure_callbacks()`` results replace the Trainer's callbacks of the same types."""
    from fabricx.train.module.current_hook import call_hook

    hook = getattr(module, "configure_callbacks", None)
    returned = call_hook(module, "configure_callbacks", hook) if callable(hook) else []
    extra = list(returned) if isinstance(returned, (list, tuple)) else ([returned] if returned else [])
    if not extra:
        return list(given)
    from fabricx.train.callbacks.base import Callback

    # As Lightning: a module's callback replaces the Trainer's of its class or of a parent class (not a bare Callback).
    given_kinds = {type(cb) for cb in given} - {Callback}
    parents = ({kind for kind in given_kinds if issubclass(new, kind)} for new in {type(cb) for cb in extra})
    replaced = {next(iter(found)) for found in parents if found}
    if replaced:
        rank_zero_info(
            "The following callbacks returned in `LightningModule.configure_callbacks` will override existing "
            f"callbacks passed to Trainer: {', '.join(sorted(kind.__name__ for kind in replaced))}"
        )
    return checkpoints_last([cb for cb in given if type(cb) not in replaced] + extra)


def checkpoints_last(callbacks: list[Any]) -> list[Any]:
    """Checkpoint callbacks last, so that they store what every other callback did in the same hook."""
    from fabricx.train.callbacks.base import Checkpoint

    checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint)]
    return [cb for cb in callbacks if not isinstance(cb, Checkpoint)] + checkpoints


__all__ = ["checkpoints_last", "trainer_callbacks", "with_module_callbacks"]
