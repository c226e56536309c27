"""Checkpoints a Lightning user can open, and Lightning ``.ckpt`` files read into a TrainModule.

A Lightning ``.ckpt`` is one ``torch.save`` dict: ``state_dict`` (the module's weights),
``hyper_parameters``, ``epoch``, ``global_step``, ``optimizer_states``, ``lr_schedulers``, ``callbacks``
and whatever ``on_save_checkpoint`` added. ``trainer.save_checkpoint("x.ckpt")`` writes that shape
(loadable with ``torch.load(path, weights_only=True)``); ``load_from_checkpoint`` reads it, and
fabricx checkpoint folders too.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fabricx.utilities.exceptions import FabricxError

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer

_PLAIN = (bool, int, float, str, type(None))


def plain_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters a weights-only file can hold (numbers, strings, lists/dicts of them).

    Others (a module passed to ``__init__``, ...) are left out: pass them again to
    ``load_from_checkpoint(path, name=value)``, or ``save_hyperparameters(ignore=[...])`` them.
    """

    def plain(value: Any) -> bool:
        if isinstance(value, _PLAIN):
            return True
        if isinstance(value, (list, tuple)):
            return all(plain(v) for v in value)
        if isinstance(value, Mapping):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        return False

    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in hparams.items() if plain(v)}


def _lightning_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("lightning", "pytorch-lightning"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "2.5.0"


def save_lightning_checkpoint(trainer: Trainer, path: str, extras: dict[str, Any], weights_only: bool) -> None:
    """Write ``path`` as one Lightning-shaped file (from global rank zero; sharded weights are gathered)."""
    from fabricx.checkpoint.format import write_single_file

    module, model = trainer.lightning_module, trainer.model
    assert module is not None and model is not None, "a checkpoint is written for a set-up module"
    state = trainer.strategy.get_module_state_dict(model._forward_module)
    checkpoint: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "pytorch-lightning_version": _lightning_version(),
        "state_dict": {k: v.detach().cpu() for k, v in state.items() if isinstance(v, torch.Tensor)},
        "hyper_parameters": plain_hparams(module.hparams),
    }
    if not weights_only:
        checkpoint["optimizer_states"] = [opt.state_dict() for opt in trainer.optimizers]
        checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs]
    for key, value in extras.items():
        checkpoint.setdefault(key, value)
    if trainer.is_global_zero:
        write_single_file(path, checkpoint)
    if trainer.world_size > 1:
        trainer.fabric.barrier()


def is_lightning_file(path: str | os.PathLike) -> bool:
    """A regular file (Lightning writes ``.ckpt`` files; fabricx writes folders)."""
    return Path(path).is_file()


def _read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(weights, hyper_parameters, whole checkpoint)`` from a Lightning file or a fabricx folder."""
    from fabricx.checkpoint.format import read_checkpoint

    loaded = read_checkpoint(path)
    state = loaded.shared
    if loaded.legacy:
        if "state_dict" not in state:
            raise FabricxError(
                f"{path} is a single-file checkpoint without 'state_dict' (keys: {sorted(state)[:10]}); "
                "load_from_checkpoint reads Lightning .ckpt files and fabricx checkpoint folders."
            )
        return dict(state["state_dict"]), dict(state.get("hyper_parameters") or {}), state
    weights = state.get("module")
    if not isinstance(weights, Mapping):
        raise FabricxError(
            f"{path} holds no full module state (it is sharded, or not a Trainer checkpoint). Consolidate it "
            "first with `fabricx consolidate`, or load it with trainer.fit(model, ckpt_path=...)."
        )
    hparams = dict((state.get("hparams") or {}).get("hyper_parameters") or {})
    extra = dict(state.get("extra") or {})
    return dict(weights), hparams, extra


def load_lightning_weights(module: torch.nn.Module, path: str | os.PathLike) -> None:
    """Load the weights of a Lightning ``.ckpt`` file into ``module`` and call its ``on_load_checkpoint``."""
    weights, _, checkpoint = _read(path)
    module.load_state_dict(weights)
    hook = getattr(module, "on_load_checkpoint", None)
    if callable(hook):
        hook(checkpoint)


def load_module_from_checkpoint(
    cls: type,
    path: str | os.PathLike,
    map_location: Any,
    hparams_file: str | os.PathLike | None,
    strict: bool | None,
    overrides: dict[str, Any],
) -> Any:
    """Build ``cls`` from the checkpoint's hyper-parameters (updated with ``overrides``) and load its weights."""
    weights, hparams, checkpoint = _read(path)
    if hparams_file is not None:
        hparams.update(_read_hparams_file(hparams_file))
    hparams.update(overrides)
    parameters = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    arguments = hparams if takes_any else {k: v for k, v in hparams.items() if k in parameters}
    module = cls(**arguments)
    hook = getattr(module, "on_load_checkpoint", None)
    if callable(hook):
        hook(checkpoint)
    module.load_state_dict(weights, strict=True if strict is None else strict)
    if map_location is not None and not callable(map_location) and not isinstance(map_location, Mapping):
        module.to(map_location)
    return module


def _read_hparams_file(path: str | os.PathLike) -> dict[str, Any]:
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return dict(yaml.safe_load(text) or {})
    raise FabricxError(f"hparams_file={os.fspath(path)!r}: only .yaml files are read.")


class HParamsState:
    """The module's plain hyper-parameters inside a fabricx checkpoint (for ``load_from_checkpoint``)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        module = self.trainer.lightning_module
        hparams = getattr(module, "hparams", None) or {}
        return {"hyper_parameters": plain_hparams(hparams)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore: the module was built by the user."""


__all__ = ["is_lightning_file", "load_lightning_weights", "load_module_from_checkpoint", "save_lightning_checkpoint"]
