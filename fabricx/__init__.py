"""fabricx: keep your PyTorch loop; run it on any hardware, strategy and precision; resume exactly.

Example::

    from fabricx import Fabric
    fabric = Fabric(accelerator="cpu", devices=2, precision="bf16-mixed")
"""

from fabricx.fabric import Fabric
from fabricx.utilities.seed import seed_everything
from fabricx.wrappers import unwrap

__version__ = "0.1.0"

__all__ = ["Fabric", "__version__", "seed_everything", "unwrap"]
