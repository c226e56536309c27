"""Lightning's loop progress counters: how many batches, epochs, steps were ready, started, processed, completed.

Each `ProgressCounters` holds a `total` (over the whole fit) and a `current` (this epoch, or this evaluation pass)
tracker; their state dicts are the ones under `loops` in a Lightning checkpoint, so a Lightning file and a
fabricx file read the same. `reset_on_restart()` sets what was counted as begun back to what completed, as
Lightning does when a run restarts from a checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class ReadyCompletedTracker:
    """`ready` (about to begin) and `completed` (done) counts."""

    ready: int = 0
    completed: int = 0

    # The counts are found through `fields()`, never `self.__dict__`: reading an instance's `__dict__` turns its
    # attributes into a plain dict for good, and every `+= 1` of the per-batch counting gets about twice as slow.
    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        for name, value in state_dict.items():
            setattr(self, name, value)

    def reset(self) -> None:
        for count in fields(self):
            setattr(self, count.name, 0)

    def reset_on_restart(self) -> None:
        for count in fields(self):
            if count.name != "completed":
                setattr(self, count.name, self.completed)

    def increment_by(self, n: int) -> None:
        for count in fields(self):
            setattr(self, count.name, getattr(self, count.name) + n)


@dataclass
class StartedTracker(ReadyCompletedTracker):
    """Adds `started` (between ready and completed)."""

    started: int = 0


@dataclass
class ProcessedTracker(StartedTracker):
    """Adds `processed` (the work is done; the hooks after it may still run)."""

    processed: int = 0


class _ProgressParts:
    """Progress made of the progress parts named in `_PARTS`: each reset goes to every part, and the state dict
    nests the parts' state dicts under their names, as Lightning's checkpoint does."""

    _PARTS: tuple[str, ...] = ()

    def _parts(self) -> list[Any]:
        return [getattr(self, name) for name in self._PARTS]

    def reset(self) -> None:
        for part in self._parts():
            part.reset()

    def reset_on_run(self) -> None:
        for part in self._parts():
            part.reset_on_run()

    def reset_on_restart(self) -> None:
        for part in self._parts():
            part.reset_on_restart()

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict() for name in self._PARTS}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name in self._PARTS:
            getattr(self, name).load_state_dict(state_dict[name])


@dataclass
class ProgressCounters(_ProgressParts):
    """`total` and `current` trackers, incremented together.

    Example:
        ```python
        trainer.fit_loop.epoch_progress.current.completed  # epochs done
        ```
    """

    _PARTS = ("total", "current")
    total: ReadyCompletedTracker = field(default_factory=ProcessedTracker)
    current: ReadyCompletedTracker = field(default_factory=ProcessedTracker)

    # Called several times per training batch: plain attribute arithmetic, no lookups by name.
    def increment_ready(self) -> None:
        self.total.ready += 1
        self.current.ready += 1

    def increment_ready_and_started(self) -> None:
        """`increment_ready` then `increment_started`, where nothing runs between them."""
        total, current = self.total, self.current
        total.ready += 1
        current.ready += 1
        total.started += 1  # type: ignore[attr-defined]
        current.started += 1  # type: ignore[attr-defined]

    def increment_started(self) -> None:
        self.total.started += 1  # type: ignore[attr-defined]
        self.current.started += 1  # type: ignore[attr-defined]

    def increment_processed(self) -> None:
        self.total.processed += 1  # type: ignore[attr-defined]
        self.current.processed += 1  # type: ignore[attr-defined]

    def increment_completed(self) -> None:
        self.total.completed += 1
        self.current.completed += 1

    def increment_by(self, n: int) -> None:
        self.total.increment_by(n)
        self.current.increment_by(n)

    # A new run or a restart touches this epoch's (or pass's) counts only; the fit's totals go on.
    def reset_on_run(self) -> None:
        self.current.reset()

    def reset_on_restart(self) -> None:
        self.current.reset_on_restart()


@dataclass
class BatchProgress(ProgressCounters):
    """Batch counters and whether the current batch is the last of its pass."""

    is_last_batch: bool = False

    def reset(self) -> None:
        super().reset()
        self.is_last_batch = False

    def reset_on_run(self) -> None:
        super().reset_on_run()
        self.is_last_batch = False

    def increment_by(self, n: int, is_last_batch: bool = False) -> None:
        super().increment_by(n)
        self.is_last_batch = is_last_batch

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "is_last_batch": self.is_last_batch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.is_last_batch = bool(state_dict.get("is_last_batch", False))  # Lightning's predict loop has none


@dataclass
class SchedulerProgress(ProgressCounters):
    """Learning-rate scheduler steps (ready and completed only)."""

    total: ReadyCompletedTracker = field(default_factory=ReadyCompletedTracker)
    current: ReadyCompletedTracker = field(default_factory=ReadyCompletedTracker)


def ready_completed_progress() -> ProgressCounters:
    """Counts of something that is only begun and done (an optimizer step)."""
    return ProgressCounters(total=ReadyCompletedTracker(), current=ReadyCompletedTracker())


@dataclass
class OptimizerProgress(_ProgressParts):
    """`step` (ready, completed) and `zero_grad` (ready, started, completed) counts of the optimizer."""

    _PARTS = ("step", "zero_grad")
    step: ProgressCounters = field(default_factory=ready_completed_progress)
    zero_grad: ProgressCounters = field(
        default_factory=lambda: ProgressCounters(total=StartedTracker(), current=StartedTracker())
    )


@dataclass
class OptimizationProgress(_ProgressParts):
    """The automatic optimization's counters (`optimizer_steps`: optimizer steps over the fit)."""

    _PARTS = ("optimizer",)
    optimizer: OptimizerProgress = field(default_factory=OptimizerProgress)

    @property
    def optimizer_steps(self) -> int:
        return self.optimizer.step.total.completed


__all__ = [
    "BatchProgress",
    "OptimizationProgress",
    "OptimizerProgress",
    "ProcessedTracker",
    "ProgressCounters",
    "ReadyCompletedTracker",
    "SchedulerProgress",
    "StartedTracker",
    "ready_completed_progress",
]
