"""The batch-size search behind ``Tuner.scale_batch_size``: double until out of memory, then (binsearch) bisect."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fabricx.utilities.memory import is_out_of_memory, release_accelerator_memory
from fabricx.utilities.rank_zero import rank_zero_log_info

log = logging.getLogger(__name__)

#: Runs a few steps at the batch size now set; returns the dataset length it saw (None when unsized).
Trial = Callable[[], "int | None"]


@dataclass
class BatchSizeSearch:
    """Lightning's power/binsearch rules over a ``trial`` function and a ``get``/``set`` pair for the batch size."""

    trial: Trial
    get: Callable[[], int]
    set_: Callable[[int], None]
    max_trials: int
    max_val: int
    _dataset_length: int | None = field(default=None, init=False)

    def adjust(self, factor: float = 1.0, value: int | None = None, desc: str | None = None) -> tuple[int, bool]:
        """Set the batch size to ``value`` (or ``factor`` times it), capped by the dataset and ``max_val``."""
        batch_size = self.get()
        if self._dataset_length is not None and batch_size >= self._dataset_length:
            rank_zero_log_info(
                log,
                f"The batch size {batch_size} is greater or equal than the length of your dataset:"
                f" {self._dataset_length}.",
            )
            return batch_size, False
        new_size = value if value is not None else int(batch_size * factor)
        if new_size > self.max_val:
            if desc:
                limit = self.max_val
                rank_zero_log_info(log, f"Batch size {new_size} exceeds max_val limit {limit}, capping at {limit}")
            new_size = self.max_val
        if desc:
            rank_zero_log_info(log, f"Batch size {batch_size} {desc}, trying batch size {new_size}")
        self.set_(new_size)
        return new_size, new_size != batch_size

    def _run(self) -> None:
        release_accelerator_memory()
        self._dataset_length = self.trial()

    def _fits(self, new_size: int) -> bool | None:
        """Run a trial at ``new_size``: whether it fit in memory; ``None`` (no trial) once it reaches ``max_val``."""
        if new_size >= self.max_val:
            rank_zero_log_info(log, f"Reached the maximum batch size limit of {self.max_val}. Stopping search.")
            return None
        try:
            self._run()
        except RuntimeError as exception:
            if not is_out_of_memory(exception):
                raise
            release_accelerator_memory()
            return False
        return True

    def power(self, new_size: int) -> int:
        any_success = False
        for trial in range(self.max_trials):
            fits = self._fits(new_size)
            if fits is None:
                break
            if not fits:
                new_size, _ = self.adjust(factor=0.5, desc="failed")
                if any_success:
                    break
                continue
            if trial + 1 >= self.max_trials:
                break
            new_size, changed = self.adjust(factor=2.0, desc="succeeded")
            if not changed:
                break
            any_success = True
        return new_size

    def binsearch(self, new_size: int, margin: float) -> int:
        low, high = 1, None
        count = 0
        while True:
            fits = self._fits(new_size)
            if fits is None:
                break
            if not fits:
                high = new_size
                new_size, _ = self.adjust(value=(high + low) // 2, desc="failed")
                if high - low <= 1:
                    break
                continue
            count += 1
            if count >= self.max_trials:
                break
            low = new_size
            if high:
                if high - low <= 1:
                    break
                new_size, changed = self.adjust(value=(high + low) // 2, desc="succeeded")
            else:
                new_size, changed = self.adjust(factor=2.0, desc="succeeded")
            if not changed:
                break
        if margin > 0:
            reduced = max(1, int(new_size * (1 - margin)))
            if reduced != new_size:
                message = f"Applying margin of {margin:.1%}, reducing batch size from {new_size} to {reduced}"
                rank_zero_log_info(log, message)
                new_size = reduced
                self.set_(new_size)
        return new_size


def dataset_length(loader: Any) -> int | None:
    """The number of samples behind a loader (the longest, for several); ``None`` when unsized."""
    if loader is None:
        return None
    if isinstance(loader, dict):
        loader = list(loader.values())
    if isinstance(loader, (list, tuple)):
        lengths = [dataset_length(item) for item in loader]
        sized = [n for n in lengths if n is not None]
        return max(sized) if sized else None
    dataset = getattr(loader, "dataset", None)
    try:
        return len(dataset) if dataset is not None else None  # type: ignore[arg-type]
    except TypeError:
        return None
