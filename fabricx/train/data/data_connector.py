"""Where a stage's loaders come from: the call's arguments, else the DataModule, else the module's own methods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricx.train.data.datamodule import DataModule, defines
from fabricx.train.module.current_hook import call_hook
from fabricx.train.module.module import TrainModule
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.profilers import Profiler, profiled

_METHOD = {
    "train": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}


def is_datamodule(obj: Any) -> bool:
    """A DataModule (ours, or any object with the DataModule loader methods and ``setup``)."""
    return isinstance(obj, DataModule) or (
        not _is_loader_like(obj) and callable(getattr(obj, "train_dataloader", None)) and hasattr(obj, "setup")
    )


def _is_loader_like(obj: Any) -> bool:
    return hasattr(obj, "__iter__") or isinstance(obj, (list, tuple, Mapping))


def _source_defines(source: Any, method: str) -> bool:
    if source is None or not callable(getattr(source, method, None)):
        return False
    if isinstance(source, DataModule):
        return defines(source, method, DataModule)
    if isinstance(source, TrainModule):
        return defines(source, method, TrainModule)
    return True


def defines_loader(datamodule: Any, module: Any, kind: str) -> bool:
    """Whether the DataModule or the module has its own loader method for ``kind``."""
    return any(_source_defines(source, _METHOD[kind]) for source in (datamodule, module))


def request_loaders(
    kind: str, given: Any, datamodule: Any, module: Any, required: bool, profiler: Profiler | None = None
) -> Any:
    """The raw loader(s) for ``kind`` (``"train"``, ``"validate"``, ``"test"``, ``"predict"``), or ``None``.

    With a ``profiler``, the loader method is timed as Lightning names it
    (``[LightningDataModule]MyData.train_dataloader`` or ``[LightningModule]MyModel.train_dataloader``).

    Example:
        ```python
        loaders = request_loaders("validate", None, datamodule, module, required=False)
        ```
    """
    if given is not None:
        return given
    method = _METHOD[kind]
    for source, kind_name in ((datamodule, "LightningDataModule"), (module, "LightningModule")):
        if _source_defines(source, method):
            action = f"[{kind_name}]{type(source).__name__}.{method}"
            function = profiled(profiler, action, getattr(source, method))
            # As Lightning: the module's own loader method runs as its current hook (a DataModule has none).
            return call_hook(source, method, function) if source is module else function()
    if required:
        where = {"train": "fit", "validate": "validate", "test": "test", "predict": "predict"}[kind]
        argument = "train_dataloaders" if kind == "train" else "dataloaders"
        raise MisconfigurationError(
            f"Trainer.{where} found no {kind} data: no {argument} were passed, no datamodule was given, and "
            f"{type(module).__name__} defines no {method}(). Pass Trainer.{where}(model, {argument}=...), "
            f"or datamodule=..., or define {method}(self) on the module."
        )
    return None


def check_fit_arguments(train_dataloaders: Any, val_dataloaders: Any, datamodule: Any) -> tuple[Any, Any]:
    """``fit(model, dm)`` positionally becomes ``datamodule=dm``; loaders and a datamodule together are refused."""
    if train_dataloaders is not None and is_datamodule(train_dataloaders):
        if datamodule is not None:
            raise MisconfigurationError("Trainer.fit got two datamodules (positionally and as datamodule=); pass one.")
        datamodule, train_dataloaders = train_dataloaders, None
    if datamodule is not None and (train_dataloaders is not None or val_dataloaders is not None):
        raise MisconfigurationError(
            "Trainer.fit got a datamodule and loaders; the datamodule provides the loaders. Pass either "
            "fit(model, datamodule=dm) or fit(model, train_dataloaders, val_dataloaders)."
        )
    return train_dataloaders, datamodule


def check_eval_arguments(where: str, dataloaders: Any, datamodule: Any) -> tuple[Any, Any]:
    """``validate(model, dm)`` positionally becomes ``datamodule=dm``; both together are refused."""
    if dataloaders is not None and is_datamodule(dataloaders):
        if datamodule is not None:
            raise MisconfigurationError(f"Trainer.{where} got two datamodules; pass one.")
        datamodule, dataloaders = dataloaders, None
    if datamodule is not None and dataloaders is not None:
        raise MisconfigurationError(
            f"Trainer.{where} got a datamodule and dataloaders; pass one of them "
            f"({where}(model, dataloaders=...) or {where}(model, datamodule=dm))."
        )
    return dataloaders, datamodule


__all__ = [
    "check_eval_arguments",
    "check_fit_arguments",
    "defines_loader",
    "is_datamodule",
    "request_loaders",
]
