"""What crosses from the processes a Trainer starts itself (``ddp_spawn``) back to the one that called ``fit``.

The started processes train; the calling one receives rank 0's weights, counters, metrics and callback
states, so that ``trainer.global_step``, ``trainer.callback_metrics`` and the module read as after a fit
in this process.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.fabric import Fabric
from fabricx.train.checkpoint import entries as ckpt
from fabricx.train.logging.logging_result import tensors_in

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

#: The key that marks a started process's result.
SPAWN_RESULT_KEY = "__fabricx_spawn__"


class TrainerFabric(Fabric):
    """A Fabric that can be pickled into spawned processes (weak sets are sent as their items).

    It leaves a module's ``_fabric`` alone: a module the Trainer runs reaches everything through the Trainer.
    """

    _attaches_modules = False
    # As Lightning's Trainer: the device and the process group are set up by the first fit/validate/test/predict
    # (Trainer(accelerator="gpu") selects no CUDA device and starts no process group when built).
    _prepares_when_built = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key, value in state.items():
            if isinstance(value, weakref.WeakSet):
                state[key] = _WeakSetItems(list(value))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if isinstance(value, _WeakSetItems):
                state[key] = weakref.WeakSet(value.items)
        self.__dict__.update(state)


def spawn_result(trainer: Trainer, result: Any) -> dict[str, Any]:
    """What a started process returns: `result` and the state the calling process takes over."""
    module = trainer.lightning_module
    connector = trainer.run_context.logger_connector
    connector.take_step_values()
    fit_loop = trainer.fit_loop
    return {
        SPAWN_RESULT_KEY: True,
        "result": result,
        "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()} if module is not None else None,
        "callback_metrics": {k: _cpu(v) for k, v in trainer.callback_metrics.items()},
        "logged_metrics": {k: _cpu(v) for k, v in tensors_in(connector.logged).items()},
        "progress": trainer.progress.state_dict(),
        # global_step and current_epoch are the fit loop's counters (its loader position stays here).
        "fit_loop": {"epoch_progress": fit_loop.epoch_progress.state_dict(), **fit_loop.epoch_loop.state_dict()},
        "callbacks": ckpt.CallbackStates(trainer.callbacks).state_dict(),
    }


def is_spawn_result(returned: Any) -> bool:
    return isinstance(returned, dict) and SPAWN_RESULT_KEY in returned


def apply_spawn_result(trainer: Trainer, module: TrainModule, returned: dict[str, Any]) -> Any:
    """Take over rank 0's state in the calling process; returns the entry point's result."""
    if returned["state_dict"] is not None:
        module.load_state_dict(returned["state_dict"])
    trainer.progress.load_state_dict(returned["progress"])
    trainer.fit_loop.take_counters(returned["fit_loop"])
    connector = trainer.run_context.logger_connector
    connector.callback = returned["callback_metrics"]
    connector.logged = returned["logged_metrics"]
    ckpt.CallbackStates(trainer.callbacks).load_state_dict(returned["callbacks"])
    module.__dict__["_trainer"] = trainer
    trainer.run_context.module = module
    trainer.run_context.automatic = bool(getattr(module, "automatic_optimization", True))  # which steps count
    return returned["result"]


class _WeakSetItems:
    def __init__(self, items: list[Any]) -> None:
        self.items = items


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, Tensor) else value


__all__ = ["TrainerFabric", "apply_spawn_result", "is_spawn_result", "spawn_result"]
