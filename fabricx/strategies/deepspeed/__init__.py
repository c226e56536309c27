"""DeepSpeed ZeRO as a strategy: `strategy` (the Strategy), `config` (the DeepSpeed config it builds),
`window` (gradient accumulation inside the engine) and `async_save` (engine files written in the background)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.strategies.deepspeed.strategy import DeepSpeedStrategy


def __getattr__(name: str) -> Any:
    # The package's modules import each other; naming the strategy here loads it on first use only.
    if name == "DeepSpeedStrategy":
        from fabricx.strategies.deepspeed.strategy import DeepSpeedStrategy

        return DeepSpeedStrategy
    raise AttributeError(f"module 'fabricx.strategies.deepspeed' has no attribute {name!r}")


__all__ = ["DeepSpeedStrategy"]
