"""DeepSpeed ZeRO as a strategy: `strategy` (the Strategy), `config` (the DeepSpeed config it builds),
`window` (gradient accumulation inside the engine) and `async_save` (engine files written in the background)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabricx.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from fabricx.strategies.deepspeed.strategy import DeepSpeedStrategy

# The package's modules import each other; naming the strategy here loads it on first use only.
__getattr__ = lazy_attributes(__name__, {"DeepSpeedStrategy": "fabricx.strategies.deepspeed.strategy"})


__all__ = ["DeepSpeedStrategy"]
