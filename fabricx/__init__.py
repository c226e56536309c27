"""fabricx: keep your PyTorch loop; run it on any hardware, strategy and precision; resume exactly.

Example:
    ```python
    from fabricx import Fabric
    fabric = Fabric(accelerator="cpu", devices=2, precision="bf16-mixed")
    ```
"""

from __future__ import annotations

import importlib
from typing import Any

from fabricx.fabric import Fabric
from fabricx.utilities.seed import seed_everything
from fabricx.version import __version__
from fabricx.wrappers import unwrap

# Heavier pieces load on first use so that `import fabricx` stays light.
_LAZY = {
    "Trainer": "fabricx.train",
    "TrainModule": "fabricx.train",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fabricx' has no attribute {name!r}")


__all__ = ["Fabric", "TrainModule", "Trainer", "__version__", "seed_everything", "unwrap"]
