"""Capturing and restoring every random number generator of a process."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def capture_rng_states(cuda: bool = True) -> dict[str, Any]:
    """The state of Python's ``random``, NumPy's global generator, torch's CPU and (``cuda``) CUDA generators.

    Example:
        ```python
        states = capture_rng_states(cuda=False)  # building a loader iterator draws on no CUDA generator
        ```
    """
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Restore what `capture_rng_states()` returned (entries it lacks are left alone)."""
    if "python" in states:
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in states:
        np.random.set_state(tuple(states["numpy"]))
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def set_generator_states(generators: Sequence[torch.Generator], states: Sequence[Any], strict: bool = True) -> None:
    """Set each of ``generators`` to the state at the same place in ``states``."""
    for generator, state in zip(generators, states, strict=strict):
        generator.set_state(state)


def capture_loader_rng(generators: Sequence[torch.Generator]) -> dict[str, Any]:
    """What a data loader replays a pass from: the global random state (no CUDA: building a loader's iterator
    draws on none) and the states of the loader's own ``generators``."""
    return {"rng": capture_rng_states(cuda=False), "generators": [g.get_state() for g in generators]}


def restore_loader_rng(state: dict[str, Any], generators: Sequence[torch.Generator], strict: bool = True) -> None:
    """Restore what `capture_loader_rng()` returned."""
    restore_rng_states(state["rng"])
    set_generator_states(generators, state["generators"], strict=strict)


class RNGStates:
    """Checkpointable handle on this process's random generators (one per rank)."""

    _fabricx_per_rank = True

    def state_dict(self) -> dict[str, Any]:
        return capture_rng_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        restore_rng_states(state_dict)
