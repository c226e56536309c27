"""Gradient accumulation: `state` (where a window stands, shared explicitly, changed only by its transitions),
`policies` (where windows end: Fabric's epoch windows, Accelerate's running count), `window` (the context of one
micro-batch of `fabric.accumulate`) and `entries` (what a checkpoint saved inside a window holds)."""

from fabricx.accumulation.state import AccumulationState
from fabricx.accumulation.window import AccumulationWindow

__all__ = ["AccumulationState", "AccumulationWindow"]
