"""Callbacks for `fabricx.train.Trainer`, under Lightning's names (`lightning.pytorch.callbacks`).

`EarlyStoppingReason` lives where Lightning keeps it, in `fabricx.train.callbacks.early_stopping`.

Example:

```python
from fabricx.callbacks import EarlyStopping, ModelCheckpoint
```
"""

from fabricx.train import callbacks as _callbacks
from fabricx.train.callbacks import *  # noqa: F403 (the same names, under Lightning's module path)
from fabricx.train.tuner.finder_callback import LearningRateFinder

__all__ = ["LearningRateFinder"]
__all__ += _callbacks.__all__
