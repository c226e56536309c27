"""Starting processes with ``spawn`` or ``fork`` that run the function given to ``fabric.launch``."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.multiprocessing as mp

from fabricx.strategies.launchers.launcher import Launcher
from fabricx.utilities.exceptions import FabricxError

if TYPE_CHECKING:
    from fabricx.strategies.parallel import ParallelStrategy


class MultiprocessingLauncher(Launcher):
    """Runs ``function`` in ``num_processes`` new processes and returns rank 0's result.

    ``spawn`` pickles the function and its arguments (guard your script with
    ``if __name__ == "__main__":``); ``fork`` is for notebooks and is refused where it would break.

    Example::

        Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn").launch(train)
    """

    requires_function = True

    def __init__(self, strategy: ParallelStrategy, start_method: str = "spawn") -> None:
        self._strategy = strategy
        self._start_method = start_method

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._start_method in ("fork", "forkserver"):
            _check_fork_is_safe(self._start_method)
        environment = self._strategy.cluster_environment
        os.environ["MASTER_ADDR"] = environment.main_address
        os.environ["MASTER_PORT"] = str(environment.main_port)
        context = mp.get_context(self._start_method)
        results = context.SimpleQueue()
        mp.start_processes(
            _run_rank,
            args=(function, args, kwargs, results),
            nprocs=self._strategy.num_processes,
            start_method=self._start_method,
            join=True,
        )
        # Bytes, so tensors are copied rather than shared through file descriptors of dead processes.
        return pickle.loads(results.get()) if not results.empty() else None


def _run_rank(process_index: int, function: Callable, args: tuple, kwargs: dict, results: Any) -> None:
    os.environ["LOCAL_RANK"] = str(process_index)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    output = function(*args, **kwargs)
    if int(os.environ.get("NODE_RANK", 0)) == 0 and process_index == 0:
        results.put(pickle.dumps(output))


def _check_fork_is_safe(start_method: str) -> None:
    if start_method not in mp.get_all_start_methods():
        raise FabricxError(
            f"start_method={start_method!r} is not available on {sys.platform}. Use strategy='ddp_spawn'."
        )
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise FabricxError(
            "CUDA was already initialised in this process, and forked processes cannot use it. Use "
            "strategy='ddp_spawn', or create no CUDA tensors before fabric.launch()."
        )
