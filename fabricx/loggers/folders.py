"""Where a file-writing logger puts its run: ``{save_dir}/{name}/version_{n}``, for both call styles.

Lightning Fabric's loggers take ``root_dir`` and report it back as ``root_dir``; Lightning's Trainer
loggers take ``save_dir`` and report ``root_dir`` as ``save_dir/name``. fabricx has one class for
both: given ``save_dir=``, ``root_dir`` means what it means in ``lightning.pytorch``; given the folder
positionally or as ``root_dir=``, what it means in ``lightning.fabric``. ``save_dir`` and ``log_dir``
are the same in both.
"""

from __future__ import annotations

import os
from typing import Any

from fabricx.loggers.utils import next_version, version_dir_name


class VersionedFolder:
    """Mixin holding the folder fields; loggers call `_set_folders()` from ``__init__``."""

    _root_dir: str
    _save_dir: str
    _name: str
    _version: int | str
    _root_includes_name: bool

    def _set_folders(
        self, cls_name: str, root_dir: Any, save_dir: Any, name: str | None, version: int | str | None
    ) -> None:
        if root_dir is not None and save_dir is not None:
            raise TypeError(f"{cls_name} got both `root_dir` and `save_dir`; give one (they mean the same folder).")
        if root_dir is None and save_dir is None:
            raise TypeError(
                f"{cls_name} needs the folder to write to: {cls_name}(save_dir) or {cls_name}(root_dir=...)."
            )
        self._root_includes_name = save_dir is not None
        folder: Any = save_dir if save_dir is not None else root_dir
        self._root_dir = os.fspath(folder)
        self._save_dir = self._root_dir
        self._name = name or ""
        # Chosen now, before any rank writes, so every process agrees on the folder.
        self._version = next_version(os.path.join(self._root_dir, self._name)) if version is None else version

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        return self._version

    @property
    def save_dir(self) -> str:
        """The folder given to the constructor, holding every experiment."""
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``save_dir/name`` when built with ``save_dir=`` (as in Lightning's Trainer loggers), else ``save_dir``."""
        return os.path.join(self._save_dir, self.name or "") if self._root_includes_name else self._root_dir

    def _version_dir(self) -> str:
        # Read through the properties, so that a subclass overriding `name` or `version` moves the folder.
        version = self.version
        return os.path.join(self._save_dir, self.name or "", version_dir_name(version if version is not None else 0))
