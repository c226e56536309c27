"""Checks that a module can run the entry point it was given to, before anything is set up.

The messages start with the sentence Lightning's Trainer uses (code that matches it keeps working) and go on
to say what to do. A step method set to ``None`` (``validation_step = None``) counts as absent, as in Lightning.

Example:
    ```python
    check_loop_configuration(trainer, module, "fit", has_val_data=True)
    ```
"""

from __future__ import annotations

from typing import Any

from fabricx.train.module.overrides import is_overridden
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.utilities.warnings import PossibleUserWarning

_STEP = {"validate": "validation_step", "test": "test_step", "predict": "predict_step"}
_REMOVED_EPOCH_END = {"fit": ("training_epoch_end", "validation_epoch_end"), "validate": ("validation_epoch_end",)}
_REMOVED_EPOCH_END["test"] = ("test_epoch_end",)


def defines_step(module: Any, name: str) -> bool:
    """Whether ``module`` has its own ``name`` step (not the base class's, not ``None``)."""
    if getattr(module, name, None) is None:
        return False
    try:
        return is_overridden(name, module)
    except ValueError:  # not a TrainModule: any callable counts
        return callable(getattr(module, name, None))


def check_loop_configuration(trainer: Any, module: Any, stage: str) -> None:
    """Refuse a module that cannot run ``stage`` (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``)."""
    name = type(module).__name__
    if stage == "fit":
        if not defines_step(module, "training_step"):
            raise MisconfigurationError(
                "No `training_step()` method defined. Lightning `Trainer` expects as minimum a `training_step()`, "
                f"`train_dataloader()` and `configure_optimizers()` to be defined: add training_step(self, batch, "
                f"batch_idx) to {name}, returning the loss."
            )
        if not defines_step(module, "configure_optimizers"):
            raise MisconfigurationError(
                "No `configure_optimizers()` method defined. Lightning `Trainer` expects as minimum a "
                "`training_step()`, `train_dataloader()` and `configure_optimizers()` to be defined: add "
                f"configure_optimizers(self) to {name}, returning e.g. torch.optim.SGD(self.parameters(), lr=0.1)."
            )
        if not getattr(module, "automatic_optimization", True):
            if trainer.gradient_clip_val is not None and trainer.gradient_clip_val > 0:
                raise MisconfigurationError(
                    "Automatic gradient clipping is not supported for manual optimization. Remove "
                    f"`Trainer(gradient_clip_val={trainer.gradient_clip_val})` or switch to automatic optimization: "
                    f"{name} has automatic_optimization=False. Call self.clip_gradients(opt, gradient_clip_val=..., "
                    "gradient_clip_algorithm=...) in training_step and drop the flag."
                )
            if trainer.accumulate_grad_batches != 1:
                raise MisconfigurationError(
                    "Automatic gradient accumulation is not supported for manual optimization. Remove "
                    f"`Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches})` or switch to automatic "
                    f"optimization: {name} has automatic_optimization=False. Accumulate in training_step yourself "
                    "(step the optimizer every N batches) and drop the flag."
                )
    elif stage == "predict":
        if getattr(module, "predict_step", None) is None:
            raise MisconfigurationError("`predict_step` cannot be None to run `Trainer.predict`.")
        import torch

        if not defines_step(module, "predict_step") and type(module).forward is torch.nn.Module.forward:
            raise MisconfigurationError(
                f"`Trainer.predict` requires `forward` method to run: {name} defines neither forward nor "
                "predict_step(self, batch, batch_idx)."
            )
    else:
        step = _STEP[stage]
        if not defines_step(module, step):
            raise MisconfigurationError(
                f"No `{step}()` method defined to run `Trainer.{stage}`. Add {step}(self, batch, batch_idx) to {name}."
            )
    for legacy in _REMOVED_EPOCH_END.get(stage, ()):
        if callable(getattr(module, legacy, None)):
            hook = "on_" + legacy
            raise NotImplementedError(
                f"Support for `{legacy}` has been removed in v2.0.0. `{name}` implements this method. You can use "
                f"the `{hook}` hook instead. To access outputs, save them in-memory as instance attributes."
            )


def warn_val_mismatch(module: Any, has_val_data: bool) -> None:
    """Lightning's warnings when validation data and ``validation_step`` do not come together in ``fit``."""
    has_step = defines_step(module, "validation_step")
    if has_val_data and not has_step:
        rank_zero_warn("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
    if has_step and not has_val_data:
        rank_zero_warn(
            "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop.",
            category=PossibleUserWarning,
        )


__all__ = ["check_loop_configuration", "defines_step", "warn_val_mismatch"]
