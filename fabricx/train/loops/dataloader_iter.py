"""``dataloader_iter`` steps: a ``training_step``/``validation_step``/``test_step``/``predict_step`` that takes
``dataloader_iter`` fetches its own batches, as in Lightning.

The loop hands the step a `DataLoaderIter` instead of a batch. The batch hooks around the step see the last
batch fetched (``None``, index 0 before the first), and the pass ends once the loop knows the data is used up
(its length reached, or a step's ``next()`` found nothing left).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from fabricx.utilities.rank_zero import rank_zero_warn

Fetched = tuple[Any, int, int]  # (batch, batch_idx, dataloader_idx)


def takes_dataloader_iter(method: Any, name: str) -> bool:
    """Whether the step `method` (named `name`) has a parameter called ``dataloader_iter`` (warned about once
    per pass, as Lightning warns: the signature is experimental there).

    Example:
        ```python
        takes_dataloader_iter(module.training_step, "training_step")
        ```
    """
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    if "dataloader_iter" not in parameters:
        return False
    rank_zero_warn(
        f"Found `dataloader_iter` argument in the `{name}`. Note that the support for this signature is experimental "
        "and the behavior is subject to change."
    )
    return True


class DataLoaderIter(Iterator[Fetched]):
    """What a ``dataloader_iter`` step is given: ``next()`` returns ``(batch, batch_idx, dataloader_idx)``.

    `batch`, `batch_idx` and `dataloader_idx` are those of the last batch fetched; `done` says whether the pass
    has nothing left (`length` batches fetched, or the data ran out).

    Example:
        ```python
        class Model(TrainModule):
            def training_step(self, dataloader_iter):
                batch, batch_idx, dataloader_idx = next(dataloader_iter)
                return self.layer(batch).sum()
        ```
    """

    def __init__(self, batches: Iterator[Fetched], length: float, fetched: int = 0) -> None:
        self._batches = batches
        self.length = length
        self.fetched = fetched
        self.batch: Any = None
        self.batch_idx = 0
        self.dataloader_idx = 0
        self._exhausted = False

    @property
    def done(self) -> bool:
        return self._exhausted or self.fetched >= self.length

    def __iter__(self) -> DataLoaderIter:
        return self

    def __next__(self) -> Fetched:
        if self.done:
            raise StopIteration
        try:
            fetched = next(self._batches)
        except StopIteration:
            self._exhausted = True
            raise
        self.fetched += 1
        self.batch, self.batch_idx, self.dataloader_idx = fetched
        return fetched


__all__ = ["DataLoaderIter", "takes_dataloader_iter"]
