"""Which hooks may call ``self.log``, and the ``on_step``/``on_epoch`` each one defaults to (Lightning's table).

Step-level hooks of training log per step by default; those of validation/test aggregate per epoch; start
and epoch-level hooks only aggregate per epoch; hooks that run outside a loop (``setup``, ``on_fit_start``,
data hooks, checkpoint hooks...) refuse, as in Lightning.

Example:
    ```python
    on_step, on_epoch = logging_levels("validation_step", None, None)  # (False, True)
    ```
"""

from __future__ import annotations

from fabricx.utilities.exceptions import MisconfigurationException

# (allowed on_step, allowed on_epoch, default on_step, default on_epoch)
_Levels = tuple[tuple[bool, ...], tuple[bool, ...], bool, bool]
_PLAIN = (bool, type(None))
_TRAIN_STEP: _Levels = ((False, True), (False, True), True, False)
_EVAL_STEP: _Levels = ((False, True), (False, True), False, True)
_EPOCH_ONLY: _Levels = ((False,), (True,), False, True)

_TRAIN_STEP_HOOKS = (
    "training_step",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "optimizer_step",
    "configure_gradient_clipping",
    "clip_gradients",
    "on_before_zero_grad",
    "optimizer_zero_grad",
)
_EVAL_STEP_HOOKS = (
    "validation_step",
    "test_step",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
)
_EPOCH_HOOKS = (
    "on_train_start",
    "on_validation_start",
    "on_test_start",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
)
_REFUSING_HOOKS = (
    "lr_scheduler_step",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_end",
    "on_validation_end",
    "on_test_end",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "predict_step",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "on_exception",
    "state_dict",
    "load_state_dict",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "setup",
    "teardown",
    "configure_sharded_model",
    "configure_model",
    "configure_optimizers",
    "configure_callbacks",
    "prepare_data",
    "train_dataloader",
    "val_dataloader",
    "test_dataloader",
    "predict_dataloader",
    "on_validation_model_zero_grad",
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_test_model_eval",
    "on_test_model_train",
    "on_predict_model_eval",
)

LEVELS: dict[str, _Levels | None] = {
    **dict.fromkeys(_TRAIN_STEP_HOOKS, _TRAIN_STEP),
    **dict.fromkeys(_EVAL_STEP_HOOKS, _EVAL_STEP),
    **dict.fromkeys(_EPOCH_HOOKS, _EPOCH_ONLY),
    **dict.fromkeys(_REFUSING_HOOKS, None),
}


# The answers of `logging_levels` already given, by (hook, on_step, on_epoch): `self.log` runs every step.
_RESOLVED: dict[tuple[str, bool | None, bool | None], tuple[bool, bool]] = {}


def logging_levels(hook: str, on_step: bool | None, on_epoch: bool | None) -> tuple[bool, bool]:
    """``(on_step, on_epoch)`` for a ``self.log`` call in ``hook``: the hook's defaults where ``None``.

    Raises `MisconfigurationException` (Lightning's type and phrases) for a hook that may not log or a level
    it does not allow.
    """
    try:
        return _RESOLVED[(hook, on_step, on_epoch)]
    except (KeyError, TypeError):  # not asked yet, or a level that is not even hashable (refused below)
        pass
    if hook not in LEVELS:
        raise RuntimeError(
            f"Logging inside `{hook}` is not implemented: self.log works in the Trainer's step, batch and epoch "
            "hooks. Log from one of them, or write to the logger directly (`self.logger.log_metrics`)."
        )
    levels = LEVELS[hook]
    if levels is None:
        raise MisconfigurationException(
            f"You can't `self.log()` inside `{hook}`. HINT: You can still log directly to the logger by using"
            " `self.logger.experiment`; self.log works in the step, batch and epoch hooks."
        )
    allowed_step, allowed_epoch, default_step, default_epoch = levels
    given_step, given_epoch = on_step, on_epoch
    on_step = default_step if on_step is None else on_step
    on_epoch = default_epoch if on_epoch is None else on_epoch
    if on_step not in allowed_step:
        raise MisconfigurationException(
            f"You can't `self.log(on_step={on_step})` inside `{hook}`, must be one of {allowed_step}: "
            "there is no step there. Log it with on_epoch=True, or from a *_step or batch hook."
        )
    if on_epoch not in allowed_epoch:
        raise MisconfigurationException(
            f"You can't `self.log(on_epoch={on_epoch})` inside `{hook}`, must be one of {allowed_epoch}."
        )
    resolved = bool(on_step), bool(on_epoch)
    if type(given_step) in _PLAIN and type(given_epoch) in _PLAIN:  # a few keys, never a user's object
        _RESOLVED[(hook, given_step, given_epoch)] = resolved
    return resolved


__all__ = ["LEVELS", "logging_levels"]
