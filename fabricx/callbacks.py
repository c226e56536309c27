"""Callbacks for :class:`fabricx.train.Trainer` (importable as ``fabricx.callbacks``).

Example::

    from fabricx.callbacks import EarlyStopping, ModelCheckpoint
"""

from fabricx.train.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    RichModelSummary,
    RichProgressBar,
    ThroughputMonitor,
)

__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "RichModelSummary",
    "RichProgressBar",
    "ThroughputMonitor",
]
