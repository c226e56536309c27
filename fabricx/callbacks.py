"""Callbacks for `fabricx.train.Trainer`, under Lightning's names (`lightning.pytorch.callbacks`).

`EarlyStoppingReason` lives where Lightning keeps it, in `fabricx.train.callbacks.early_stopping`.

Example:

```python
from fabricx.callbacks import EarlyStopping, ModelCheckpoint
```
"""

from fabricx.train.callbacks import (
    BackboneFinetuning,
    BaseFinetuning,
    BasePredictionWriter,
    Callback,
    DeviceStatsMonitor,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    OnExceptionCheckpoint,
    RichModelSummary,
    RichProgressBar,
    StochasticWeightAveraging,
    ThroughputMonitor,
    Timer,
    TQDMProgressBar,
)
from fabricx.train.tuner.finder_callback import LearningRateFinder

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "Callback",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "OnExceptionCheckpoint",
    "RichModelSummary",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
]
