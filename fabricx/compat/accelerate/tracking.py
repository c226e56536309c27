"""``log_with=`` for the Accelerate adapter: Accelerate's tracker names mapped onto fabricx loggers."""

from __future__ import annotations

import os
from typing import Any

from fabricx.utilities.exceptions import MisconfigurationError

__all__ = ["build_trackers", "normalize_log_with"]

_SUPPORTED = ("csv", "tensorboard", "mlflow", "wandb")
# The package each of Accelerate's trackers needs; "all" takes those whose package is installed, as Accelerate
# does. "csv" is fabricx's own tracker: asked for by name only, so "all" writes what Accelerate's writes.
_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}


def normalize_log_with(log_with: Any) -> list[Any]:
    """``None``, ``"csv"``, ``"tensorboard"``, ``"mlflow"``, ``"wandb"``, ``"all"``, a fabricx ``Logger``, or a
    list of them."""
    import importlib.util

    from fabricx.loggers.base import Logger

    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, list | tuple) else [log_with]
    result: list[Any] = []
    for item in items:
        if isinstance(item, Logger):
            result.append(item)
            continue
        name = str(getattr(item, "value", item)).lower()
        if name == "all":
            installed = [n for n in _PACKAGES if importlib.util.find_spec(_PACKAGES[n])]
            result.extend(n for n in installed if n not in result)
        elif name in _SUPPORTED:
            if name not in result:
                result.append(name)
        else:
            raise MisconfigurationError(
                f"log_with={item!r} is not available in fabricx. Use one of {[*_SUPPORTED, 'all']} or pass "
                "a fabricx.loggers.Logger instance."
            )
    return result


def build_trackers(
    names: list[Any], logging_dir: str | os.PathLike[str] | None, project_name: str, init_kwargs: dict[str, Any]
) -> list[Any]:
    """Create the loggers for ``init_trackers(project_name, ...)``; ``init_kwargs`` maps a tracker name
    to extra constructor arguments (``{"tensorboard": {"flush_secs": 5}}``, ``{"wandb": {"offline": True}}``,
    ``{"mlflow": {"run_name": "first", "tags": {...}}}``).

    ``mlflow`` records into the experiment ``project_name`` in a SQLite store under the logging folder
    (``MLFLOW_TRACKING_URI`` or a ``tracking_uri`` init argument wins); ``wandb`` into the project
    ``project_name``, writing its files where wandb itself does (``WANDB_DIR``, else the working directory),
    as Accelerate's tracker."""
    trackers = []
    for item in names:
        if not isinstance(item, str):
            trackers.append(item)
            continue
        kwargs = dict(init_kwargs.get(item, {}))
        if item == "mlflow":
            from fabricx.loggers.mlflow import MLFlowLogger

            kwargs.setdefault("save_dir", os.fspath(logging_dir) if logging_dir is not None else "./mlruns")
            trackers.append(MLFlowLogger(experiment_name=project_name, **kwargs))
            continue
        if item == "wandb":
            from fabricx.loggers.wandb import WandbLogger

            # As Accelerate's tracker: wandb's own folder (WANDB_DIR, else the working directory).
            kwargs.setdefault("save_dir", os.environ.get("WANDB_DIR", "."))
            trackers.append(WandbLogger(project=project_name, **kwargs))
            continue
        if logging_dir is None:
            raise MisconfigurationError(
                f"log_with={item!r} writes files but no folder was given. Pass project_dir=... or "
                "project_config=ProjectConfiguration(project_dir=..., logging_dir=...) to the Accelerator."
            )
        if item == "csv":
            from fabricx.loggers.csv_logs import CSVLogger

            trackers.append(CSVLogger(logging_dir, name=project_name, **kwargs))
        else:
            # Accelerate's own layout and records (fabricx's TensorBoardLogger adds version folders and hp_metric).
            from fabricx.compat.accelerate.tensorboard import TensorBoardTracker

            trackers.append(TensorBoardTracker(project_name, logging_dir, **kwargs))
    return trackers
