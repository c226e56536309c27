"""fabricx: keep your PyTorch loop; run it on any hardware, strategy and precision; resume exactly.

Example:
    ```python
    from fabricx import Fabric
    fabric = Fabric(accelerator="cpu", devices=2, precision="bf16-mixed")
    ```
"""

from __future__ import annotations

from fabricx.fabric import Fabric
from fabricx.utilities.imports import lazy_attributes
from fabricx.utilities.seed import seed_everything
from fabricx.version import __version__
from fabricx.wrappers import unwrap

# Heavier pieces load on first use so that `import fabricx` stays light.
__getattr__ = lazy_attributes(__name__, {"Trainer": "fabricx.train", "TrainModule": "fabricx.train"})


__all__ = ["Fabric", "TrainModule", "Trainer", "__version__", "seed_everything", "unwrap"]
