"""``DummyLogger``: a logger that records nothing, standing in for the user's under ``fast_dev_run``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fabricx.loggers.base import Logger
from fabricx.loggers.utils import NoOpExperiment as DummyExperiment


class DummyLogger(Logger):
    """A logger that records nothing, so code such as ``self.logger.experiment.add_image(...)`` still runs.

    The Trainer puts one in place of the given loggers under ``fast_dev_run``, as Lightning does.

    Example:
        ```python
        trainer = Trainer(fast_dev_run=True)
        assert isinstance(trainer.logger, DummyLogger)
        ```
    """

    def __init__(self) -> None:
        super().__init__()
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
        return self._experiment

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str | None:
        return None

    def __getitem__(self, idx: int) -> DummyLogger:
        # self.logger[0].experiment.add_image(...) keeps working
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Any other method a logger may have: called, it does nothing."""
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> None:
            return None

        return method


__all__ = ["DummyExperiment", "DummyLogger"]
