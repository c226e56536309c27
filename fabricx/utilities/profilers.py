"""Profilers with Lightning's names: where the time of a run goes, by named action or by operator.

* `SimpleProfiler` times named actions (``with profiler.profile("training_step"):``) and prints a
  table of calls, mean and total time.
* `AdvancedProfiler` runs `cProfile` inside each action and prints the top functions.
* `PyTorchProfiler` records operators with `torch.profiler`, writes a Chrome trace per rank
  and prints torch's operator table.

Every profiler writes its report to ``{dirpath}/{filename}-rank{r}.txt`` when given a ``dirpath`` and prints
it on global rank 0 otherwise.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import io
import os
import pstats
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from fabricx.utilities.rank_zero import rank_zero_only


class Profiler:
    """Base class: ``profile(action)`` is a context that measures one occurrence of ``action``.

    Example:
        ```python
        profiler = SimpleProfiler()
        with profiler.profile("load_batch"):
            batch = next(iterator)
        print(profiler.summary())
        ```
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Generator[None, None, None]:
        self.start(action_name)
        try:
            yield
        finally:
            self.stop(action_name)

    def start(self, action_name: str) -> None:
        """Start measuring ``action_name``."""

    def stop(self, action_name: str) -> None:
        """Stop measuring ``action_name``."""

    def summary(self) -> str:
        """The report as text."""
        return ""

    def describe(self) -> None:
        """Write the report (to ``dirpath`` per rank, or print it on rank 0)."""
        report = self.summary()
        if not report:
            return
        if self.dirpath is not None:
            Path(self.dirpath).mkdir(parents=True, exist_ok=True)
            name = f"{self.filename or type(self).__name__.lower()}-rank{rank_zero_only.rank}.txt"
            Path(self.dirpath, name).write_text(report + "\n", encoding="utf-8")
        else:
            rank_zero_only(print)(report)

    def teardown(self) -> None:
        """Release what the profiler holds (called when the run ends)."""


class PassThroughProfiler(Profiler):
    """Measures nothing (the default)."""


class SimpleProfiler(Profiler):
    """Wall-clock time of each named action: calls, mean, total and share of the profiled time.

    Example:
        ```python
        trainer = Trainer(profiler="simple")  # the table is printed when fit() ends
        ```
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None) -> None:
        super().__init__(dirpath, filename)
        self._started: dict[str, float] = {}
        #: Each action's measured durations in seconds, one per occurrence (Lightning's name).
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self._created = time.perf_counter()

    @property
    def recorded(self) -> dict[str, list[float]]:
        """The older name of `recorded_durations` (the same dict)."""
        return self.recorded_durations

    def start(self, action_name: str) -> None:
        if action_name in self._started:
            raise ValueError(f"Profiling of {action_name!r} was started already; stop it before starting it again.")
        self._started[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        start = self._started.pop(action_name, None)
        if start is None:
            raise ValueError(f"Profiling of {action_name!r} was never started; call start() first.")
        self.recorded_durations[action_name].append(time.perf_counter() - start)

    def summary(self) -> str:
        if not self.recorded_durations:
            return ""
        total_run = time.perf_counter() - self._created
        rows = sorted(self.recorded_durations.items(), key=lambda item: sum(item[1]), reverse=True)
        width = max(len("Action"), *(len(name) for name, _ in rows))
        lines = [
            "Profiler report (SimpleProfiler)",
            f"{'Action':<{width}}  {'Calls':>7}  {'Mean (s)':>10}  {'Total (s)':>10}  {'% of run':>8}",
        ]
        for name, durations in rows:
            total = sum(durations)
            lines.append(
                f"{name:<{width}}  {len(durations):>7}  {total / len(durations):>10.5f}  {total:>10.4f}  "
                f"{100 * total / total_run:>7.1f}%"
            )
        return "\n".join(lines)


class AdvancedProfiler(Profiler):
    """`cProfile` statistics of the functions called inside each named action.

    Args:
        line_count_restriction: How many functions (or which share, if below 1) of each action to show.

    Example:
        ```python
        trainer = Trainer(profiler="advanced")
        ```
    """

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        line_count_restriction: float = 20,
    ) -> None:
        super().__init__(dirpath, filename)
        self._line_count = line_count_restriction
        self.profiled_actions: dict[str, cProfile.Profile] = {}

    def start(self, action_name: str) -> None:
        profile = self.profiled_actions.setdefault(action_name, cProfile.Profile())
        profile.enable()

    def stop(self, action_name: str) -> None:
        profile = self.profiled_actions.get(action_name)
        if profile is None:
            raise ValueError(f"Profiling of {action_name!r} was never started; call start() first.")
        profile.disable()

    def summary(self) -> str:
        parts = []
        for name, profile in self.profiled_actions.items():
            stream = io.StringIO()
            pstats.Stats(profile, stream=stream).strip_dirs().sort_stats("cumulative").print_stats(self._line_count)
            parts.append(f"Profile of {name}:\n{stream.getvalue()}")
        return "\n".join(parts)


class PyTorchProfiler(Profiler):
    """Operator-level profile with `torch.profiler`: a Chrome trace per rank and an operator table.

    Actions named ``training_step``/``validation_step``/... are recorded as ranges in the trace.

    Args:
        dirpath: Where ``{filename}-rank{r}.pt.trace.json`` and the table are written (default: ``profiles``
            under the Trainer's ``default_root_dir``; ``./profiles`` outside a Trainer).
        row_limit: Rows of the operator table.
        sort_by_key: The table's sort column (``"cpu_time_total"``, ``"cuda_time_total"``, ...).
        **profiler_kwargs: Passed to ``torch.profiler.profile`` (``record_shapes``, ``profile_memory``, ...).

    Example:
        ```python
        profiler = PyTorchProfiler(dirpath="profiles", record_shapes=True)
        trainer = Trainer(profiler=profiler)
        ```
    """

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath if dirpath is not None else "profiles", filename or "pytorch")
        #: Whether the folder was chosen by the user (a Trainer moves an unchosen one under its root dir).
        self.dirpath_given = dirpath is not None
        self._row_limit = row_limit
        self._sort_by = sort_by_key
        self._kwargs = profiler_kwargs
        self._profiler: Any = None
        self._ranges: dict[str, Any] = {}
        self.trace_path: str | None = None
        self._table = ""

    def _ensure_started(self) -> None:
        if self._profiler is not None:
            return
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._kwargs.setdefault("activities", activities)
        self._profiler = profile(**self._kwargs)
        self._profiler.__enter__()

    def start(self, action_name: str) -> None:
        import torch

        self._ensure_started()
        record = torch.autograd.profiler.record_function(f"[{action_name}]")
        record.__enter__()
        self._ranges[action_name] = record

    def stop(self, action_name: str) -> None:
        record = self._ranges.pop(action_name, None)
        if record is None:
            raise ValueError(f"Profiling of {action_name!r} was never started; call start() first.")
        record.__exit__(None, None, None)

    def _finish(self) -> None:
        if self._profiler is None:
            return
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        Path(self.dirpath or ".").mkdir(parents=True, exist_ok=True)
        self.trace_path = os.path.join(self.dirpath or ".", f"{self.filename}-rank{rank_zero_only.rank}.pt.trace.json")
        profiler.export_chrome_trace(self.trace_path)
        sort_by = self._sort_by or (
            "cuda_time_total" if "CUDA" in str(self._kwargs["activities"]) else "cpu_time_total"
        )
        self._table = profiler.key_averages().table(sort_by=sort_by, row_limit=self._row_limit)

    def summary(self) -> str:
        self._finish()
        return self._table

    def teardown(self) -> None:
        self._finish()


def profiled(profiler: Profiler | None, action: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` measured as ``action`` on each call; ``function`` itself when nothing is profiled.

    Example:
        ```python
        step = profiled(SimpleProfiler(), "training_step", module.training_step)
        ```
    """
    if profiler is None or isinstance(profiler, PassThroughProfiler):
        return function

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with profiler.profile(action):
            return function(*args, **kwargs)

    return call


_BY_NAME = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}


def resolve_profiler(profiler: Profiler | str | None, root_dir: str | os.PathLike | None = None) -> Profiler:
    """A profiler object from Lightning's ``profiler=`` values: ``None``, ``"simple"``, ``"advanced"``,
    ``"pytorch"`` or a `Profiler`.

    With ``root_dir`` (the Trainer's ``default_root_dir``), a PyTorch profiler whose folder was not chosen
    writes its trace to ``root_dir/profiles``, as Lightning's writes under the run's directory.

    Example:
        ```python
        resolve_profiler("simple")  # SimpleProfiler()
        ```
    """
    if profiler is None:
        return PassThroughProfiler()
    if isinstance(profiler, str) and profiler.lower() in _BY_NAME:
        profiler = _BY_NAME[profiler.lower()]()
    if isinstance(profiler, Profiler):
        if isinstance(profiler, PyTorchProfiler) and not profiler.dirpath_given and root_dir is not None:
            profiler.dirpath = os.path.join(os.fspath(root_dir), "profiles")
        return profiler
    raise ValueError(
        f"profiler={profiler!r} is not a profiler; use one of {sorted(_BY_NAME)}, None, or a "
        "fabricx.utilities.profilers.Profiler instance."
    )


@contextlib.contextmanager
def profile_run(
    dirpath: str | os.PathLike = "profiles", row_limit: int = 20, **profiler_kwargs: Any
) -> Generator[PyTorchProfiler, None, None]:
    """A context over `torch.profiler` for a Fabric loop: writes a Chrome trace per rank and prints
    the operator table on rank 0 at the end.

    Example:
        ```python
        with fabric.profile("profiles") as profiler:
            for batch in loader:
                with profiler.profile("step"):
                    ...
        ```
    """
    profiler = PyTorchProfiler(dirpath=dirpath, row_limit=row_limit, **profiler_kwargs)
    profiler._ensure_started()
    try:
        yield profiler
    finally:
        profiler.describe()  # the table into dirpath, per rank
        rank_zero_only(print)(profiler.summary())
