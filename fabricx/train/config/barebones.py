"""``Trainer(barebones=True)``: every feature that costs speed off, to measure the Trainer's own overhead.

As in Lightning, a feature that barebones turns off may not be switched on explicitly at the same time
(that is a ``ValueError`` naming the argument), and ``self.log`` only warns.
"""

from __future__ import annotations

import os
from typing import Any

from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_info

#: (argument, why barebones turns it off) in the order Lightning checks them.
_REASONS = {
    "enable_checkpointing": "Checkpointing can impact raw speed",
    "logger": "Logging can impact raw speed",
    "enable_progress_bar": "The progress bar can impact raw speed",
    "log_every_n_steps": "Logging can impact raw speed",
    "enable_model_summary": "Model summary can impact raw speed",
    "num_sanity_val_steps": "Sanity checking can impact raw speed",
    "fast_dev_run": "Development run is not meant for raw speed evaluation",
    "detect_anomaly": "Anomaly detection can impact raw speed",
    "profiler": "Profiling can impact raw speed",
}

_DEACTIVATED = (
    " - Checkpointing: `Trainer(enable_checkpointing=True)`",
    " - Progress bar: `Trainer(enable_progress_bar=True)`",
    " - Model summary: `Trainer(enable_model_summary=True)`",
    " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`, `LightningModule.log(...)`, "
    "`LightningModule.log_dict(...)`",
    " - Sanity checking: `Trainer(num_sanity_val_steps>0)`",
    " - Development run: `Trainer(fast_dev_run=True)`",
    " - Anomaly detection: `Trainer(detect_anomaly=True)`",
    " - Profiling: `Trainer(profiler=...)`",
)

LOG_WARNING = (
    "You are trying to `self.log()` but `Trainer(barebones=True)` is configured. Logging can impact raw speed so "
    "it is disabled under this setting; the value is dropped. Build the Trainer without barebones=True to log."
)


def _switched_on(name: str, value: Any) -> bool:
    if name in ("logger", "profiler"):
        return value is not None and value is not False
    if name in ("log_every_n_steps", "num_sanity_val_steps", "fast_dev_run"):
        return value is not None and value is not False and value != 0
    return bool(value)


def barebones_flags(**given: Any) -> dict[str, Any]:
    """Check the arguments barebones turns off; return their barebones values.

    ``given`` holds the Trainer arguments named in ``_REASONS`` (as the caller passed them).

    Example:
        ```python
        barebones_flags(enable_checkpointing=None, logger=None, profiler=None)
        # {"enable_checkpointing": False, "logger": False, ...}
        ```
    """
    for name, reason in _REASONS.items():
        value = given.get(name)
        if _switched_on(name, value):
            raise MisconfigurationError(
                f"`Trainer(barebones=True, {name}={value!r})` was passed. {reason} so it is disabled in barebones "
                f"mode. Drop {name}= or barebones=True."
            )
    rank_zero_info(
        "You are running in `Trainer(barebones=True)` mode. All features that may impact raw speed have been "
        "disabled to facilitate analyzing the Trainer overhead. Specifically, the following features are "
        f"deactivated:{os.linesep}{os.linesep.join(_DEACTIVATED)}"
    )
    return {
        "enable_checkpointing": False,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }


__all__ = ["LOG_WARNING", "barebones_flags"]
