"""Hyper-parameters in YAML files (and Lightning's older CSV tags), as ``lightning.pytorch.core.saving`` writes
and reads them.

``load_from_checkpoint(path, hparams_file=...)`` reads one. Reading never builds Python objects from the file
(``yaml.safe_load``, ``ast.literal_eval``).
"""

from __future__ import annotations

import ast
import csv
import os
from argparse import Namespace
from collections.abc import Mapping, MutableSequence
from enum import Enum
from pathlib import Path
from typing import Any

#: Values a YAML file holds as they are.
_SCALARS = (bool, int, float, str, type(None))


def save_hparams_to_yaml(
    config_yaml: str | os.PathLike, hparams: Mapping[str, Any] | Namespace, use_omegaconf: bool = True
) -> None:
    """Write ``hparams`` (a dict, an `AttributeDict`, a ``Namespace`` or an OmegaConf config) to ``config_yaml``.

    An OmegaConf config is written with its interpolations resolved and an ``Enum`` as its name, as Lightning
    writes them; a value YAML cannot hold (a ``torch.dtype``, an object) is skipped with Lightning's warning.
    ``use_omegaconf`` is accepted for Lightning's signature.

    Example:
        ```python
        save_hparams_to_yaml("run/hparams.yaml", {"lr": 0.1, "layers": [64, 32]})
        ```
    """
    from fabricx.loggers.utils import write_hparams_yaml
    from fabricx.utilities.rank_zero import rank_zero_warn

    kept: dict[str, Any] = {}
    for key, value in _entries(config_yaml, hparams).items():
        try:
            kept[str(key)] = _yaml_value(value)
        except (TypeError, ValueError):
            rank_zero_warn(f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.")
    write_hparams_yaml(config_yaml, kept)


def _yaml_value(value: Any) -> Any:
    """``value`` as plain YAML data (an ``Enum`` as its name, configs' values resolved), or ``TypeError``."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(key): _yaml_value(value[key]) for key in value}
    if isinstance(value, (list, tuple, MutableSequence)):
        return [_yaml_value(item) for item in value]
    raise TypeError(f"{type(value).__name__} has no YAML form")


def load_hparams_from_yaml(config_yaml: str | os.PathLike, use_omegaconf: bool = True) -> Any:
    """The hyper-parameters in ``config_yaml``: a dict, or an OmegaConf ``DictConfig`` where OmegaConf is installed
    and ``use_omegaconf`` (as Lightning's); a missing file gives ``{}`` with Lightning's warning.

    Example:
        ```python
        load_hparams_from_yaml("run/hparams.yaml", use_omegaconf=False)  # {"lr": 0.1, "layers": [64, 32]}
        ```
    """
    from fabricx.utilities.rank_zero import rank_zero_warn

    if not Path(config_yaml).exists():
        rank_zero_warn(f"Missing Tags: {os.fspath(config_yaml)}.", category=RuntimeWarning)
        return {}
    import yaml

    hparams = yaml.safe_load(Path(config_yaml).read_text(encoding="utf-8"))
    return as_config(hparams) if use_omegaconf else hparams


def as_config(value: Any) -> Any:
    """A plain dict or list as an OmegaConf config; as it is without OmegaConf, for other values, or for data
    OmegaConf does not take (as Lightning gives it then).

    Example:
        ```python
        as_config({"lr": 0.1})  # DictConfig({"lr": 0.1}) where OmegaConf is installed
        ```
    """
    if not isinstance(value, (dict, list)):
        return value
    try:
        from omegaconf import OmegaConf
    except ImportError:
        return value
    try:
        return OmegaConf.create(value)
    except Exception:  # OmegaConf's own errors for a value it does not take
        return value


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike, hparams: Mapping[str, Any] | Namespace) -> None:
    """Write ``hparams`` as Lightning's older ``meta_tags.csv``: a ``key,value`` header, then one row per entry.

    Example:
        ```python
        save_hparams_to_tags_csv("run/meta_tags.csv", {"lr": 0.1})
        ```
    """
    entries = _entries(tags_csv, hparams)
    with open(tags_csv, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["key", "value"])
        writer.writerows([key, value] for key, value in entries.items())


def _entries(path: str | os.PathLike, hparams: Mapping[str, Any] | Namespace) -> Mapping[str, Any]:
    """What a save writes to ``path``: ``hparams`` as a mapping; Lightning's errors for a missing folder or another
    type."""
    folder = os.path.dirname(os.fspath(path))
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}.")
    if isinstance(hparams, Namespace):
        return vars(hparams)
    if not isinstance(hparams, Mapping):
        raise TypeError(f"hparams must be dictionary, got {type(hparams).__name__}.")
    return hparams


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike) -> dict[str, Any]:
    """The hyper-parameters of a ``meta_tags.csv``, each value read as a Python literal where it is one (else text);
    a missing file gives ``{}`` with Lightning's warning.

    Example:
        ```python
        load_hparams_from_tags_csv("run/meta_tags.csv")  # {"lr": 0.1}
        ```
    """
    from fabricx.utilities.rank_zero import rank_zero_warn

    if not Path(tags_csv).exists():
        rank_zero_warn(f"Missing Tags: {os.fspath(tags_csv)}.", category=RuntimeWarning)
        return {}
    with open(tags_csv, newline="") as handle:
        return {row[0]: _literal(row[1]) for row in list(csv.reader(handle))[1:]}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


__all__ = [
    "as_config",
    "load_hparams_from_tags_csv",
    "load_hparams_from_yaml",
    "save_hparams_to_tags_csv",
    "save_hparams_to_yaml",
]
