"""Finding a hyperparameter (``lr``, ``batch_size``) where Lightning looks: the module, its hparams, the datamodule."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def _holders(module: Any, attribute: str, datamodule: Any = None) -> list[Any]:
    holders: list[Any] = []
    if hasattr(module, attribute):
        holders.append(module)
    hparams = getattr(module, "hparams", None)
    if hparams is not None and attribute in hparams:
        holders.append(hparams)
    if datamodule is None:
        trainer = module.__dict__.get("_trainer") if hasattr(module, "__dict__") else None
        datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    if datamodule is not None:
        if hasattr(datamodule, attribute):
            holders.append(datamodule)
        dm_hparams = getattr(datamodule, "hparams", None)
        if dm_hparams is not None and attribute in dm_hparams:
            holders.append(dm_hparams)
    return holders


def lightning_hasattr(module: Any, attribute: str, datamodule: Any = None) -> bool:
    """Whether ``attribute`` is on the module, in ``module.hparams``, or on the datamodule (or its hparams)."""
    return bool(_holders(module, attribute, datamodule))


def lightning_getattr(module: Any, attribute: str, datamodule: Any = None) -> Any:
    """The value of ``attribute`` from the last place that has it (Lightning's precedence)."""
    holders = _holders(module, attribute, datamodule)
    if not holders:
        raise AttributeError(_missing(attribute))
    holder = holders[-1]
    return holder[attribute] if isinstance(holder, MutableMapping) else getattr(holder, attribute)


def lightning_setattr(module: Any, attribute: str, value: Any, datamodule: Any = None) -> None:
    """Set ``attribute`` everywhere it is found (module, hparams, datamodule)."""
    holders = _holders(module, attribute, datamodule)
    if not holders:
        raise AttributeError(_missing(attribute))
    for holder in holders:
        if isinstance(holder, MutableMapping):
            holder[attribute] = value
        else:
            setattr(holder, attribute, value)


def _missing(attribute: str) -> str:
    return f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict, nor the datamodule."
