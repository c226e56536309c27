"""TPU cores found through torch_xla (imported only when asked for), for ``fabricx env``; not trained on."""

from __future__ import annotations

import functools
import importlib
import importlib.util

from fabricx.accelerators.accelerator import Accelerator


class XLAAccelerator(Accelerator):
    """Finds TPU cores through ``torch_xla``; ``fabricx env`` reports them.

    fabricx does not train on TPUs (it has no XLA strategy): ``Fabric(accelerator="tpu")``, an instance of
    this class and ``fabricx run --accelerator tpu`` are refused, and ``"auto"`` never picks a TPU.

    Example:
        ```python
        XLAAccelerator.is_available()  # False without torch_xla and a TPU runtime
        ```
    """

    name = "tpu"
    device_type = "xla"

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def is_available() -> bool:
        if importlib.util.find_spec("torch_xla") is None:
            return False
        try:
            xr = importlib.import_module("torch_xla.runtime")  # optional: only on TPU machines
            return xr.device_type() in ("TPU", "NEURON", "CUDA") and xr.global_runtime_device_count() > 0
        except Exception:  # a broken runtime is the same as no TPU
            return False

    @staticmethod
    def auto_device_count() -> int:
        if not XLAAccelerator.is_available():
            return 0
        xr = importlib.import_module("torch_xla.runtime")
        return xr.addressable_runtime_device_count()
