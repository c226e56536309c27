"""The launcher interface: how the processes of a job come to exist."""

from __future__ import annotations

import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol


class Launcher(ABC):
    """Starts the processes of a job and runs a function in each.

    Example:
        ```python
        launcher.launch(train, fabric)
        ```
    """

    #: Whether ``launch`` needs a function (spawned processes cannot re-run the script).
    requires_function: bool = False

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the processes and run ``function(*args, **kwargs)``; return rank 0's result."""


class LaunchedStrategy(Protocol):
    """What a launcher uses of the strategy it starts processes for (a Protocol, so that launchers import no
    strategy: the strategies import their launchers).

    Example:
        ```python
        def launcher_for(strategy: LaunchedStrategy) -> Launcher: ...
        ```
    """

    #: The `fabricx.environments.ClusterEnvironment` the processes find each other through.
    cluster_environment: Any

    @property
    def num_processes(self) -> int: ...
    @property
    def global_rank(self) -> int: ...


def threads_per_process(num_processes: int) -> int:
    """Intra-op threads for each of ``num_processes`` processes sharing this machine's cores.

    ``OMP_NUM_THREADS`` wins when set; otherwise the cores are divided, so that N processes do not
    each start one thread per core and slow each other down.

    Example:
        ```python
        torch.set_num_threads(threads_per_process(4))
        ```
    """
    configured = os.environ.get(THREADS_ENV, "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, _cores() // max(1, num_processes))


THREADS_ENV = "OMP_NUM_THREADS"
_announced = False


def default_threads(num_processes: int, announce: bool = True) -> int | None:
    """The intra-op threads fabricx gives each of ``num_processes`` local processes; ``None`` when the user chose.

    The user chose when ``OMP_NUM_THREADS`` is set, the rule torchrun and Lightning follow (a
    ``torch.set_num_threads`` call inside the launched function comes later and wins as well). Otherwise the
    cores are divided, and, with ``announce``, one line on stderr says so (once per process).

    Example:
        ```python
        threads = default_threads(2)  # 1 on a 2-core machine; None under OMP_NUM_THREADS=4
        ```
    """
    global _announced
    if THREADS_ENV in os.environ:
        return None
    threads = threads_per_process(num_processes)
    if announce and not _announced:
        _announced = True
        plural = "s" if threads > 1 else ""
        sys.stderr.write(
            f"fabricx: {num_processes} processes share {_cores()} CPU cores: {threads} intra-op thread{plural} "
            f"each (set {THREADS_ENV} to choose).\n"
        )
        sys.stderr.flush()
    return threads


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
