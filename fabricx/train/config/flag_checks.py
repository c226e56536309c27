"""Lightning's Trainer flags, checked and turned into what the fabricx Trainer runs with."""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch

from fabricx.utilities.exceptions import MisconfigurationError


def merge_alias(ours: str, our_value: Any, our_default: Any, theirs: str, their_value: Any, their_default: Any) -> Any:
    """One value from a fabricx flag and its Lightning spelling; both set differently is an error."""
    our_set = our_value is not our_default and our_value != our_default
    their_set = their_value is not their_default and their_value != their_default
    if our_set and their_set and our_value != their_value:
        raise MisconfigurationError(
            f"Trainer got {ours}={our_value!r} and {theirs}={their_value!r}, which name the same setting; pass one."
        )
    return their_value if their_set else our_value


def fast_dev_run_batches(fast_dev_run: Any) -> int:
    """How many batches ``fast_dev_run`` asks for (0: off)."""
    if fast_dev_run is False or fast_dev_run is None:
        return 0
    if fast_dev_run is True:
        return 1
    if isinstance(fast_dev_run, int) and fast_dev_run >= 0:
        return fast_dev_run
    raise MisconfigurationError(
        f"fast_dev_run={fast_dev_run!r} is not a valid configuration. It should be >= 0: give True, False or an "
        "int (batches)."
    )


def max_time_seconds(max_time: Any) -> float | None:
    """``"DD:HH:MM:SS"``, a ``timedelta`` or a dict of ``timedelta`` arguments, as seconds."""
    if max_time is None:
        return None
    return interval_seconds("max_time", max_time)


def interval_seconds(name: str, value: Any) -> float:
    """A duration flag (``max_time``, a time-based ``val_check_interval``) as seconds."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        try:
            return datetime.timedelta(**value).total_seconds()
        except TypeError as error:
            raise MisconfigurationError(
                f"{name}={value!r}: {error}. Give timedelta arguments such as {{'hours': 12}}."
            ) from error
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) == 4 and all(p.strip().isdigit() for p in parts):
            days, hours, minutes, seconds = (int(p) for p in parts)
            return datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()
    raise MisconfigurationError(
        f"{name}={value!r}; give 'DD:HH:MM:SS' (e.g. '00:12:00:00'), a datetime.timedelta, or a dict such "
        "as {'hours': 12}."
    )


def check_determinism(deterministic: Any) -> None:
    """Refuse a ``deterministic`` flag other than ``None``, ``True``, ``False`` and ``"warn"``."""
    if deterministic not in (None, True, False, "warn"):
        raise MisconfigurationError(f"deterministic={deterministic!r}; allowed are None, True, False and 'warn'.")


def apply_determinism(deterministic: Any, benchmark: bool | None) -> None:
    """``deterministic=True|"warn"`` -> ``torch.use_deterministic_algorithms``; ``benchmark`` -> cuDNN."""
    check_determinism(deterministic)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
        # cuBLAS needs a fixed workspace to be deterministic.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    elif deterministic is False:
        torch.use_deterministic_algorithms(False)
    if benchmark is not None:
        torch.backends.cudnn.benchmark = bool(benchmark)
    elif deterministic:
        torch.backends.cudnn.benchmark = False


def refuse_unsupported(**flags: Any) -> None:
    """Lightning flags without a fabricx equivalent: refused when set to anything but their default."""
    if flags.get("model_registry") is not None:
        raise MisconfigurationError(
            "Trainer(model_registry=...) uploads to Lightning's model registry, which fabricx does not support. "
            "Remove the argument and upload the saved checkpoint yourself."
        )


def check_reload_every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MisconfigurationError(
            f"`reload_dataloaders_every_n_epochs` should be an int >= 0, got {value!r} (0: never reload)."
        )
    return value


def _invalid_limit(name: str, value: Any) -> str:
    return (
        f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int: give a "
        "number of batches (int >= 0) or a fraction of the loader (float)."
    )


def invalid_limit(name: str, value: Any) -> str:
    """Lightning's message for a batch limit outside ``[0.0, 1.0]`` that is not an int >= 0."""
    return _invalid_limit(name, value)


def check_loop_limit(name: str, value: Any) -> None:
    """``max_epochs``/``max_steps``: an int >= -1 (``-1``: no limit), as Lightning requires."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise MisconfigurationError(
            f"`{name}` must be a non-negative integer or -1. You passed in {value!r} (-1 means no limit)."
        )


def fit_max_epochs(max_epochs: int | None, max_steps: int, max_time: float | None, callbacks: list[Any]) -> int:
    """The epoch limit ``fit`` runs with: ``max_epochs``, else 1000 (with Lightning's warning) when nothing
    else ends training, else ``-1`` (``max_steps``, ``max_time`` or a ``Timer`` callback ends it)."""
    if max_epochs is not None:
        return max_epochs
    from fabricx.train.callbacks.timer import Timer

    timer = any(isinstance(callback, Timer) for callback in callbacks)
    if max_steps == -1 and max_time is None and not timer:
        from fabricx.utilities.rank_zero import rank_zero_warn
        from fabricx.utilities.warnings import PossibleUserWarning

        rank_zero_warn(
            "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set "
            "`max_epochs=-1`.",
            category=PossibleUserWarning,
        )
        return 1000
    return -1


def check_val_every_n_epoch(value: Any) -> None:
    """``None`` (validate only at ``val_check_interval``) or an int >= 1."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise MisconfigurationError(
            f"`check_val_every_n_epoch` should be an integer, found {value!r}. Give an int >= 1 or None."
        )
    if value < 1:
        raise MisconfigurationError(f"`check_val_every_n_epoch` should be an integer >= 1, found {value!r}.")


def check_gradient_clipping(value: Any, algorithm: str | None) -> None:
    """A clip value that is a number >= 0 (or ``None``) and an algorithm ``"norm"``/``"value"`` (or ``None``)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"`gradient_clip_val` should be an int or a float. Got {value!r}; give a number >= 0 or None.")
    if value is not None and value < 0:
        raise MisconfigurationError(f"`gradient_clip_val`={value!r}; give a number >= 0 or None.")
    if algorithm is not None and algorithm.lower() not in ("norm", "value"):
        raise MisconfigurationError(
            f"`gradient_clip_algorithm` {algorithm} is invalid. Allowed algorithms: ['value', 'norm']."
        )


def check_overfit(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise MisconfigurationError(_invalid_limit("overfit_batches", value))
    if isinstance(value, float) and value > 1.0:
        raise MisconfigurationError(_invalid_limit("overfit_batches", value))
    return value


__all__ = [
    "apply_determinism",
    "check_determinism",
    "check_gradient_clipping",
    "check_loop_limit",
    "check_overfit",
    "check_reload_every",
    "check_val_every_n_epoch",
    "fast_dev_run_batches",
    "fit_max_epochs",
    "interval_seconds",
    "max_time_seconds",
    "merge_alias",
    "refuse_unsupported",
]
