"""The import hook behind `fabricx.compat.lightning.enable`: Lightning's module names served by fabricx's modules.

Each Lightning module name maps to one fabricx module, plus the names Lightning spells differently
(``LightningModule`` is `fabricx.train.TrainModule`). An alias module looks attributes up there when they are
first read; a name fabricx lacks raises the ``AttributeError`` that ``from lightning.pytorch.x import Name``
turns into an ``ImportError`` naming it, and a Lightning module with no counterpart raises an ``ImportError``
naming the module. Nothing of Lightning's own code is ever imported while the hook is on.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

# Lightning's spellings of the Trainer API's names.
_TRAINER_NAMES = {
    "LightningModule": ("fabricx.train", "TrainModule"),
    "LightningDataModule": ("fabricx.train", "DataModule"),
    "Trainer": ("fabricx.train", "Trainer"),
    "Callback": ("fabricx.callbacks", "Callback"),
    "seed_everything": ("fabricx", "seed_everything"),
}
_FABRIC_NAMES = {"Fabric": ("fabricx", "Fabric"), "seed_everything": ("fabricx", "seed_everything")}
# Lightning keeps `TPUAccelerator` as a deprecated name of `XLAAccelerator`; templates still probe it.
_ACCELERATOR_NAMES = {"TPUAccelerator": ("fabricx.accelerators", "XLAAccelerator")}
# Libraries annotate with Lightning's private type aliases (pytorch-forecasting's base model imports these two).
_TYPE_NAMES = {
    "_PATH": ("fabricx.utilities.types", "PathLike"),
    "_MAP_LOCATION_TYPE": ("fabricx.utilities.types", "MapLocation"),
    "STEP_OUTPUT": ("fabricx.utilities.types", "StepOutput"),
}
# Libraries that write their own checkpoint files subclass this (nn-template-core): one dict, one code-free file.
_PLUGIN_NAMES = {
    "TorchCheckpointIO": ("fabricx.checkpoint.torch_checkpoint_io", "TorchCheckpointIO"),
    "AsyncCheckpointIO": ("fabricx.checkpoint.async_checkpoint_io", "AsyncCheckpointIO"),
}

#: The modules ``lightning.pytorch`` and ``lightning.fabric`` both have, under the same names.
_COMMON_MODULES: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    ".loggers": ("fabricx.loggers", {}),
    ".strategies": ("fabricx.strategies", {}),
    ".accelerators": ("fabricx.accelerators", _ACCELERATOR_NAMES),
    ".plugins": ("fabricx.precision", _PLUGIN_NAMES),
    ".plugins.precision": ("fabricx.precision", {}),
    ".utilities": ("fabricx.utilities", {}),
    ".utilities.rank_zero": ("fabricx.utilities.rank_zero", {}),
    ".utilities.seed": ("fabricx.utilities.seed", {}),
    ".utilities.types": ("fabricx.utilities.types", _TYPE_NAMES),
}
#: Lightning's module (under ``lightning.pytorch``; ``pytorch_lightning`` is the same) -> (fabricx module, renames).
TRAINER_MODULES: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    **_COMMON_MODULES,
    "": ("fabricx.train", _TRAINER_NAMES),
    ".core": ("fabricx.train", _TRAINER_NAMES),
    ".core.module": ("fabricx.train.module.module", {"LightningModule": ("fabricx.train", "TrainModule")}),
    ".core.datamodule": ("fabricx.train.data.datamodule", {"LightningDataModule": ("fabricx.train", "DataModule")}),
    # nn-template-core builds modules from the checkpoints its own I/O reads with the private `_load_state`.
    ".core.saving": (
        "fabricx.train.module.hparams_files",
        {"_load_state": ("fabricx.train.checkpoint.lightning_files", "module_from_state")},
    ),
    ".core.mixins": ("fabricx.train.module.hparams", {}),
    ".callbacks": ("fabricx.callbacks", {}),
    ".callbacks.progress": ("fabricx.callbacks", {}),
    ".callbacks.progress.tqdm_progress": ("fabricx.train.callbacks.tqdm_progress", {}),
    ".callbacks.model_summary": ("fabricx.train.callbacks.model_summary", {}),
    ".callbacks.rich_model_summary": ("fabricx.train.callbacks.model_summary", {}),
    ".callbacks.gradient_accumulation_scheduler": ("fabricx.train.callbacks.gradient_accumulation_scheduler", {}),
    ".callbacks.weight_averaging": ("fabricx.train.callbacks.weight_averaging", {}),
    ".loggers.logger": ("fabricx.loggers.base", {}),
    ".trainer": ("fabricx.train", {"Trainer": ("fabricx.train", "Trainer")}),
    ".trainer.states": ("fabricx.train.states", {}),
    ".tuner": ("fabricx.train.tuner", {}),
    ".plugins.io": ("fabricx.checkpoint.async_checkpoint_io", _PLUGIN_NAMES),
    ".utilities": (
        "fabricx.utilities",
        {name: ("fabricx.train.module.hparams", name) for name in ("AttributeDict", "is_picklable")},
    ),
    ".utilities.parsing": ("fabricx.train.module.hparams", {}),
    ".utilities.model_summary": ("fabricx.train.module.summary", {}),
    ".utilities.model_summary.model_summary": ("fabricx.train.module.summary", {}),
    ".utilities.exceptions": ("fabricx.utilities.exceptions", {}),
}
#: The same for ``lightning.fabric`` (``lightning_fabric`` is the same).
FABRIC_MODULES: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    **_COMMON_MODULES,
    "": ("fabricx", _FABRIC_NAMES),
    ".plugins.environments": ("fabricx.environments", {}),
}
#: The top-level names the hook serves, and which table each one's submodules come from.
ROOTS = {
    "lightning.pytorch": TRAINER_MODULES,
    "pytorch_lightning": TRAINER_MODULES,
    "lightning.fabric": FABRIC_MODULES,
    "lightning_fabric": FABRIC_MODULES,
}
_LIGHTNING_NAMES = {**_TRAINER_NAMES, **_FABRIC_NAMES}


def served(fullname: str) -> bool:
    """Whether ``fullname`` is one of the names the hook answers for (Lightning's, not ``lightning_utilities``)."""
    return fullname == "lightning" or fullname.startswith("lightning.") or _root_of(fullname) is not None


def _root_of(fullname: str) -> str | None:
    for root in ROOTS:
        if fullname == root or fullname.startswith(root + "."):
            return root
    return None


def target_of(fullname: str) -> tuple[str, dict[str, tuple[str, str]]]:
    """The fabricx module and the renamed names behind Lightning's module ``fullname``, or an ``ImportError``."""
    if fullname == "lightning":
        return "fabricx", _LIGHTNING_NAMES
    root = _root_of(fullname)
    table = ROOTS.get(root) if root is not None else None
    entry = table.get(fullname[len(root) :]) if table is not None and root is not None else None
    if entry is None:
        # ModuleNotFoundError: `from lightning.pytorch.x import Name` then reports "cannot import name 'Name'".
        raise ModuleNotFoundError(
            f"No module named {fullname!r} under fabricx.compat.lightning: fabricx has no counterpart of this "
            "Lightning module. Import what you need from fabricx directly, or run without "
            "fabricx.compat.lightning.enable() to use Lightning itself.",
            name=fullname,
        )
    return entry


def _has_target(fullname: str) -> bool:
    try:
        target_of(fullname)
    except ImportError:
        return False
    return True


class AliasModule(types.ModuleType):
    """Lightning's module ``name``, whose attributes are ``target``'s (with Lightning's spellings in ``renames``)."""

    def __init__(self, name: str, target: str, renames: dict[str, tuple[str, str]]) -> None:
        super().__init__(name, f"fabricx's {target} under Lightning's name {name} (fabricx.compat.lightning).")
        self.__fabricx_target__ = target
        self.__fabricx_renames__ = renames
        self.__path__: list[str] = []  # a package, so that Lightning's submodule names import through the hook

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        submodule = f"{self.__name__}.{name}"
        if _has_target(submodule):  # `lightning.pytorch` read as an attribute of `lightning`, as Lightning's import
            return importlib.import_module(submodule)
        module_name, attribute = self.__fabricx_renames__.get(name, (self.__fabricx_target__, name))
        try:
            value = getattr(importlib.import_module(module_name), attribute)
        except AttributeError:
            raise AttributeError(
                f"{self.__name__}.{name}: fabricx has no {name} (looked for in {module_name}, which "
                f"fabricx.compat.lightning serves as {self.__name__}). Use fabricx's own API for it, or run "
                "without the alias to use Lightning itself."
            ) from None
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*dir(importlib.import_module(self.__fabricx_target__)), *self.__fabricx_renames__})


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of Lightning's names with `AliasModule` objects; every other import passes by."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not served(fullname):
            return None
        target_of(fullname)  # a module without a counterpart fails here, naming itself
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        target, renames = target_of(spec.name)
        return AliasModule(spec.name, target, renames)

    def exec_module(self, module: types.ModuleType) -> None:
        # Checked where libraries compare versions (`lightning.__version__ >= "2.0"`): the Lightning version
        # whose API this alias follows.
        from fabricx.train.checkpoint.lightning_files import lightning_version

        module.__dict__.setdefault("__version__", lightning_version())


def loaded_lightning_modules() -> list[str]:
    """Lightning's own modules already imported in this process (not aliases)."""
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if served(name) and module is not None and not isinstance(module, AliasModule)
    )


__all__ = ["FABRIC_MODULES", "ROOTS", "TRAINER_MODULES", "AliasFinder", "AliasModule", "target_of"]
