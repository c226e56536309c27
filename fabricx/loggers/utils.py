"""Small helpers the loggers share: version folders, value conversion, hparams.yaml writing."""

from __future__ import annotations

import functools
import json
import math
import os
import re
from argparse import Namespace
from collections.abc import Callable, Mapping, MutableSequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, cast

import torch

from fabricx.utilities.rank_zero import rank_zero_only

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
# Words YAML 1.1 readers turn into booleans or null; they must stay quoted.
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}

T = TypeVar("T")


def next_version(directory: str | os.PathLike) -> int:
    """One more than the highest ``version_<n>`` folder in ``directory`` (0 when there is none)."""
    path = Path(directory)
    if not path.is_dir():
        return 0
    numbers = [
        int(entry.name[len("version_") :])
        for entry in path.iterdir()
        if entry.is_dir() and entry.name.startswith("version_") and entry.name[len("version_") :].isdigit()
    ]
    return max(numbers, default=-1) + 1


def version_dir_name(version: int | str) -> str:
    return version if isinstance(version, str) else f"version_{version}"


def add_prefix(metrics: Mapping[str, Any], prefix: str, separator: str) -> dict[str, Any]:
    if not prefix:
        return dict(metrics)
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


def metric_value(key: str, value: Any) -> float | int | bool:
    """A number fit for a metrics file: one-element tensors and numpy scalars become floats."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"log_metrics got a tensor of shape {tuple(value.shape)} for {key!r}; only one-element"
                " tensors can be logged. Reduce it first (for example `value.mean()`)."
            )
        return float(value.item())
    if isinstance(value, (bool, int, float)):
        return value
    if hasattr(value, "item") and getattr(value, "size", None) == 1:  # numpy scalars and 1-element arrays
        return float(value.item())
    raise TypeError(f"log_metrics got {type(value).__name__} for {key!r}; log numbers or one-element tensors.")


def params_to_dict(params: Mapping[str, Any] | Namespace) -> dict[str, Any]:
    """Hyperparameters as a plain dict; nested ``Namespace`` objects become dicts too."""
    if isinstance(params, Namespace):
        params = vars(params)
    if not isinstance(params, Mapping):
        raise TypeError(f"log_hyperparams expects a dict or an argparse.Namespace, got {type(params).__name__}.")
    return {
        str(key): params_to_dict(value) if isinstance(value, (Namespace, Mapping)) else value
        for key, value in params.items()
    }


def flatten_dict(params: Mapping[str, Any], separator: str = "/", parent: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}{separator}{key}" if parent else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_dict(value, separator, name))
        else:
            flat[name] = value
    return flat


def write_hparams_yaml(path: str | os.PathLike, params: Mapping[str, Any]) -> None:
    """Write ``params`` as block-style YAML; values that are not plain data are written as text."""
    lines = _yaml_block(params, 0) if params else ["{}"]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _yaml_block(mapping: Mapping[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            lines.append(f"{pad}{_yaml_string(str(key))}:")
            lines.extend(_yaml_block(value, indent + 2))
        else:
            lines.append(f"{pad}{_yaml_string(str(key))}: {_yaml_flow(value)}")
    return lines


def _yaml_flow(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):  # by name, as Lightning's save_hparams_to_yaml writes it
        return _yaml_string(value.name)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _yaml_float(value)
    if isinstance(value, str):
        return _yaml_string(value)
    if isinstance(value, os.PathLike):
        return _yaml_string(os.fspath(value))
    if isinstance(value, torch.Tensor):
        return _yaml_flow(value.item() if value.numel() == 1 else value.tolist())
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_yaml_string(str(k))}: {_yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset, MutableSequence)):  # a Hydra ListConfig too
        return "[" + ", ".join(_yaml_flow(item) for item in value) + "]"
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _yaml_flow(value.tolist())
    return _yaml_string(str(value))


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    # YAML 1.1 readers (PyYAML) read "1e-05" as a string: the mantissa needs a dot.
    if exponent and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def _yaml_string(text: str) -> str:
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    # JSON's string escapes are all valid in a YAML double-quoted scalar.
    return json.dumps(text, ensure_ascii=False)


class NoOpExperiment:
    """Stands in for a logger's experiment where nothing is recorded (ranks other than 0, ``DummyLogger``):
    attributes, calls and indexing give it back, so ``experiment[0].add_image(...)`` does nothing."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # no protocol (``__array__``, ``__len__``...) is faked
            raise AttributeError(name)
        return self

    def __getitem__(self, index: Any) -> NoOpExperiment:
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        pass  # ``experiment["tag"] = value``, as Neptune-style experiments take it, is dropped too

    def __call__(self, *args: Any, **kwargs: Any) -> NoOpExperiment:
        return self


def rank_zero_experiment(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """For a logger's ``experiment`` property: what ``fn`` gives on global rank 0, a `NoOpExperiment` on the
    other ranks (Lightning's decorator of the same name).

    Example:
        ```python
        @property
        @rank_zero_experiment
        def experiment(self):
            return self._writer
        ```
    """

    @functools.wraps(fn)
    def experiment(self: Any) -> T:
        return fn(self) if rank_zero_only.rank == 0 else cast(T, NoOpExperiment())

    return experiment
