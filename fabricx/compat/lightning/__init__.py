"""Run code that imports Lightning on fabricx unchanged: `lightning.pytorch` and `lightning.fabric` become fabricx.

Libraries import ``lightning.pytorch`` inside their own modules, which a user cannot edit. After `enable()`,
``import lightning.pytorch as pl``, ``from pytorch_lightning import LightningModule, Trainer`` and
``from lightning.fabric import Fabric`` give fabricx's Trainer API (`fabricx.train.TrainModule` is
``LightningModule``) and `fabricx.Fabric`. A name or module fabricx lacks raises an ``ImportError`` naming it:
Lightning's own classes and fabricx's never mix in one process, so `enable()` refuses once Lightning is imported.

Example:
    ```python
    import fabricx.compat.lightning

    fabricx.compat.lightning.enable()  # first, before anything imports Lightning
    import lightning.pytorch as pl     # fabricx's Trainer API
    ```
"""

from __future__ import annotations

import sys

from fabricx.compat.lightning.finder import AliasFinder, AliasModule, loaded_lightning_modules
from fabricx.utilities.exceptions import FabricxError

_FINDER = AliasFinder()


def enable() -> None:
    """Make Lightning's module names (``lightning``, ``lightning.pytorch``, ``pytorch_lightning``,
    ``lightning.fabric``, ``lightning_fabric``) import fabricx's modules in this process; calling it again does
    nothing. Refused with a `fabricx.utilities.exceptions.FabricxError` once Lightning itself is imported.

    Example:
        ```python
        fabricx.compat.lightning.enable()
        from lightning.pytorch import Trainer  # fabricx.train.Trainer
        ```
    """
    if _FINDER in sys.meta_path:
        return
    loaded = loaded_lightning_modules()
    if loaded:
        shown = ", ".join(loaded[:5]) + (", ..." if len(loaded) > 5 else "")
        raise FabricxError(
            f"fabricx.compat.lightning.enable() was called after Lightning was imported ({shown}): its classes and "
            "fabricx's would mix in one process. Call enable() first, at the top of your script, before anything "
            "imports Lightning."
        )
    sys.meta_path.insert(0, _FINDER)


def disable() -> None:
    """Stop serving Lightning's names and forget the alias modules (imports of Lightning then reach Lightning).

    Example:
        ```python
        fabricx.compat.lightning.disable()
        ```
    """
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name, module in list(sys.modules.items()):
        if isinstance(module, AliasModule):
            del sys.modules[name]


def is_enabled() -> bool:
    """Whether `enable()` is in effect.

    Example:
        ```python
        assert not fabricx.compat.lightning.is_enabled()
        ```
    """
    return _FINDER in sys.meta_path


__all__ = ["disable", "enable", "is_enabled"]
