"""What the Trainer is doing: ``trainer.state`` (its status, the entry point that runs, and the stage inside it).

Example:
    ```python
    trainer.fit(model)
    assert trainer.state.fn == TrainerFn.FITTING and trainer.state.finished
    ```
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_utilities.core.enums import StrEnum


class TrainerStatus(StrEnum):
    """Whether a Trainer entry point has started, runs, ended, or was interrupted (``KeyboardInterrupt``)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(StrEnum):
    """The entry point that runs: ``fit``, ``validate``, ``test`` or ``predict`` (compares equal to those strings)."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(StrEnum):
    """The loop that runs inside an entry point (``fit`` runs sanity checking, training and validation)."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        """``"val"`` for validation and sanity checking, else the stage's value."""
        if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
            return "val"
        return self.value


def is_stage(stage: object, expected: RunningStage) -> bool:
    """Whether ``stage`` (``trainer.state.stage``) is ``expected``: by identity for a `RunningStage` (their values
    differ, and StrEnum's ``==`` lower-cases both sides on every call: this runs in every ``self.log``), by ``==``
    for anything else (a string set by hand).

    Example:
        ```python
        is_stage(trainer.state.stage, RunningStage.PREDICTING)
        ```
    """
    if type(stage) is RunningStage:
        return stage is expected
    return stage == expected


@dataclass
class TrainerState:
    """``trainer.state``: ``status`` (a TrainerStatus), ``fn`` (a TrainerFn or None), ``stage`` (a RunningStage).

    For code written against earlier fabricx versions, comparing it with a string compares ``fn``
    (``trainer.state == "fit"`` while fitting).
    """

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.fn is not None and self.fn == other
        if not isinstance(other, TrainerState):
            return NotImplemented
        return (self.status, self.fn, self.stage) == (other.status, other.fn, other.stage)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq


__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus", "is_stage"]
