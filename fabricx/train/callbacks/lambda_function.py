"""``LambdaCallback``: a callback made of functions, one per hook, as Lightning's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fabricx.train.callbacks.base import Callback


class LambdaCallback(Callback):
    """A callback whose hooks are the functions given by hook name; each takes the hook's arguments.

    Example:
        ```python
        def report(trainer, pl_module):
            print(trainer.current_epoch)

        Trainer(callbacks=[LambdaCallback(on_train_epoch_end=report)])
        ```
    """

    def __init__(
        self,
        setup: Callable[..., Any] | None = None,
        teardown: Callable[..., Any] | None = None,
        on_fit_start: Callable[..., Any] | None = None,
        on_fit_end: Callable[..., Any] | None = None,
        on_sanity_check_start: Callable[..., Any] | None = None,
        on_sanity_check_end: Callable[..., Any] | None = None,
        on_train_batch_start: Callable[..., Any] | None = None,
        on_train_batch_end: Callable[..., Any] | None = None,
        on_train_epoch_start: Callable[..., Any] | None = None,
        on_train_epoch_end: Callable[..., Any] | None = None,
        on_validation_epoch_start: Callable[..., Any] | None = None,
        on_validation_epoch_end: Callable[..., Any] | None = None,
        on_test_epoch_start: Callable[..., Any] | None = None,
        on_test_epoch_end: Callable[..., Any] | None = None,
        on_validation_batch_start: Callable[..., Any] | None = None,
        on_validation_batch_end: Callable[..., Any] | None = None,
        on_test_batch_start: Callable[..., Any] | None = None,
        on_test_batch_end: Callable[..., Any] | None = None,
        on_train_start: Callable[..., Any] | None = None,
        on_train_end: Callable[..., Any] | None = None,
        on_validation_start: Callable[..., Any] | None = None,
        on_validation_end: Callable[..., Any] | None = None,
        on_test_start: Callable[..., Any] | None = None,
        on_test_end: Callable[..., Any] | None = None,
        on_exception: Callable[..., Any] | None = None,
        on_save_checkpoint: Callable[..., Any] | None = None,
        on_load_checkpoint: Callable[..., Any] | None = None,
        on_before_backward: Callable[..., Any] | None = None,
        on_after_backward: Callable[..., Any] | None = None,
        on_before_optimizer_step: Callable[..., Any] | None = None,
        on_before_zero_grad: Callable[..., Any] | None = None,
        on_predict_start: Callable[..., Any] | None = None,
        on_predict_end: Callable[..., Any] | None = None,
        on_predict_batch_start: Callable[..., Any] | None = None,
        on_predict_batch_end: Callable[..., Any] | None = None,
        on_predict_epoch_start: Callable[..., Any] | None = None,
        on_predict_epoch_end: Callable[..., Any] | None = None,
    ) -> None:
        for name, function in locals().items():
            if name != "self" and function is not None:
                setattr(self, name, function)


__all__ = ["LambdaCallback"]
