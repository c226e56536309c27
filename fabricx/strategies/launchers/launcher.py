"""The launcher interface: how the processes of a job come to exist."""

from __future__ import annotations

import os
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
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, num_processes))
