"""What a resume-matrix run records: each batch's sample ids and loss, and the state it ends with."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


class Trace:
    """The batches of one run, in order: (global step, epoch, sample ids, loss)."""

    def __init__(self, path: Path | None = None) -> None:
        self.entries: list[tuple[int, int, list[int], torch.Tensor]] = []
        self.start_step = 0
        self._path = path  # a run that will be killed writes its trace as it goes

    def add(self, step: int, epoch: int, ids: torch.Tensor, loss: torch.Tensor) -> None:
        self.entries.append((step, epoch, ids.tolist(), loss.detach().clone()))
        if self._path is not None:
            self.flush()

    def flush(self) -> None:
        if self._path is not None:
            torch.save(self.entries, self._path)


def _full(value: Any) -> Any:
    full_tensor = getattr(value, "full_tensor", None)  # an FSDP2 DTensor
    value = full_tensor() if callable(full_tensor) else value
    if isinstance(value, torch.Tensor):
        return value.detach().clone().cpu()
    if isinstance(value, dict):
        return {k: _full(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_full(v) for v in value)
    return value


def final_state(state: dict[str, Any], precision: Any = None) -> dict[str, Any]:
    """Weights, optimizer state, scheduler state, the precision plugin's state (a grad scaler's) and the random
    generators at the end of a run."""
    model, optimizer = state["model"], state["optimizer"]
    weights = {name: _full(p) for name, p in model.named_parameters()}
    try:
        optimizer_state = _full(optimizer.state_dict()["state"])
    except Exception as error:  # DeepSpeed's partitioned optimizer: its trajectory shows in the weights
        optimizer_state = f"not compared: {type(error).__name__}"
    if not isinstance(optimizer_state, dict) or "deepspeed" in type(optimizer).__module__.lower():
        optimizer_state = "not compared"
    scheduler = state.get("scheduler")
    return {
        "weights": weights,
        "optimizer": optimizer_state,
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "step": state["step"],
        "precision": _full(precision.state_dict()) if precision is not None else {},
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state()[1].copy(),
            "python": random.getstate()[1],
        },
    }
