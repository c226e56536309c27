"""Starting processes with ``spawn`` or ``fork`` that run the function given to ``fabric.launch``."""

from __future__ import annotations

import functools
import itertools
import os
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp
from lightning_utilities.core.apply_func import apply_to_collection
from torch import nn
from torch.multiprocessing.spawn import ProcessExitedException, start_processes
from torch.optim import Optimizer

from fabricx.strategies.launchers.launcher import LaunchedStrategy, Launcher, default_threads
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.preemption import REQUEUE_EXIT_CODE
from fabricx.utilities.process_group import note_rank_failed, release_process_group
from fabricx.utilities.rng import capture_rng_states, restore_rng_states

_POLL_SECONDS = 0.05


class MultiprocessingLauncher(Launcher):
    """Runs ``function`` in ``num_processes`` new processes and returns global rank 0's result.

    ``spawn`` pickles the function and its arguments (define the function at module level and guard
    your script with ``if __name__ == "__main__":``). ``fork`` is for notebooks; it is refused where
    the platform has no fork or CUDA is already initialised in this process. Forked processes use one
    intra-op thread each, because a thread pool the parent already started would hang them.

    Spawned processes start from this process's random generators and deterministic-algorithm settings
    (as Lightning's launcher does; forked ones inherit them), so ``seed_everything`` before the launch
    makes every rank's draws repeat.

    If any process raises, the others are stopped and the error, with that process's traceback,
    is raised here.

    Example:
        ```python
        Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn").launch(train)
        ```
    """

    requires_function = True

    def __init__(self, strategy: LaunchedStrategy, start_method: str = "spawn") -> None:
        if start_method not in mp.get_all_start_methods():
            raise FabricxError(
                f"start_method={start_method!r} is not available on {sys.platform} (available: "
                f"{mp.get_all_start_methods()}). Use strategy='ddp_spawn'."
            )
        self._strategy = strategy
        self._start_method = start_method

    @property
    def start_method(self) -> str:
        return self._start_method

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._start_method == "fork":
            _check_fork_is_safe()
        environment = self._strategy.cluster_environment
        os.environ["MASTER_ADDR"] = environment.main_address
        os.environ["MASTER_PORT"] = str(environment.main_port)
        nprocs = self._strategy.num_processes
        # A forked child inherits the parent's OpenMP pool state but not its threads: more than one
        # intra-op thread would wait forever for them.
        threads = 1 if self._start_method == "fork" else default_threads(nprocs, environment.node_rank() == 0)
        results = mp.get_context(self._start_method).SimpleQueue()
        inherited = None if self._start_method == "fork" else _ProcessGlobals.capture()
        try:
            context = start_processes(
                _run_rank,
                args=(self._strategy, function, args, kwargs, results, threads, inherited),
                nprocs=nprocs,
                start_method=self._start_method,
                join=False,
            )
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            if "pickle" not in str(error).lower():
                raise
            raise FabricxError(
                f"start_method={self._start_method!r} sends the function given to fabric.launch() and its "
                f"arguments to new processes by pickling them, which failed: {error}. Define the function at "
                "module level (not a lambda or a nested function) and pass picklable arguments, or use "
                "strategy='ddp' to re-run the script instead."
            ) from error
        assert context is not None  # join=False always returns the processes' context
        output: bytes | None = None
        try:
            # Read while waiting: a large result would fill the pipe and block rank 0 before it exits.
            while not context.join(timeout=_POLL_SECONDS):
                if output is None and not results.empty():
                    output = results.get()
        except BaseException as error:
            processes = [process for process in context.processes if process is not None]
            for process in processes:
                if process.is_alive():
                    process.terminate()
            for process in processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
            if isinstance(error, ProcessExitedException) and error.exit_code == REQUEUE_EXIT_CODE:
                # The ranks left through fabric.exit_for_requeue(): hand the code on to the scheduler.
                raise SystemExit(REQUEUE_EXIT_CODE) from None
            raise
        finally:
            # A port picked for this launch is stale afterwards; the next launch picks a fresh one.
            environment.teardown()
        if output is None and not results.empty():
            output = results.get()
        return pickle.loads(output) if output is not None else None


def _run_rank(
    process_index: int,
    strategy: LaunchedStrategy,
    function: Callable,
    args: tuple,
    kwargs: dict,
    results: Any,
    threads: int | None,
    inherited: _ProcessGlobals | None,
) -> None:
    os.environ["LOCAL_RANK"] = str(process_index)
    if inherited is not None:
        inherited.restore()
    if threads is not None:  # None: the user's OMP_NUM_THREADS, which this process started with
        torch.set_num_threads(threads)
    function, args, kwargs = _own_module_memory((function, args, kwargs))
    try:
        output = function(*args, **kwargs)
    except Exception as error:
        note_rank_failed()  # the exit must not wait for peers that may be blocked waiting for this rank
        if _lost_a_peer(error):
            # This rank failed only because another one died first: give that rank's own error a moment to
            # reach the parent, which reports the first failure it sees.
            time.sleep(_PEER_FAILURE_GRACE_SECONDS)
        raise
    if strategy.global_rank == 0:
        # Bytes, so tensors are copied rather than shared through memory of a process about to exit.
        results.put(pickle.dumps(output))
    # Every rank waits for the others, then the group goes and gloo's threads settle, before this
    # process finalizes (see fabricx.utilities.process_group).
    release_process_group()


@dataclass(frozen=True)
class _ProcessGlobals:
    """What a spawned process takes over from the launching one: without the random generators' states a
    fresh process draws from unseeded Python and NumPy generators, whatever ``seed_everything`` did."""

    rng_states: dict[str, Any]
    deterministic: bool
    deterministic_warn_only: bool
    cudnn_benchmark: bool

    @classmethod
    def capture(cls) -> _ProcessGlobals:
        return cls(
            capture_rng_states(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark,
        )

    def restore(self) -> None:
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        restore_rng_states(self.rng_states)


_PEER_FAILURE_GRACE_SECONDS = 3.0
_PEER_LOST_MESSAGES = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing")


def _lost_a_peer(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _PEER_LOST_MESSAGES)


def _own_module_memory(payload: Any) -> Any:
    """Give this process its own copy of every module and optimizer tensor that arrived in shared memory.

    ``spawn`` sends CPU tensors to the children through shared memory, so a model built in the parent
    and passed to ``fabric.launch(train, model)`` would be one set of weights updated by every rank
    (each optimizer step applied once per process). Parameters, buffers and optimizer state are copied
    in place (``.data`` is replaced, so the ``Parameter`` objects an optimizer holds stay the same);
    tensors passed on their own stay shared, since sharing them on purpose is how torch returns results
    from spawned processes. Modules inside a ``functools.partial`` given as the function count too.
    """
    function, args, kwargs = payload
    targets: list[Any] = [args, kwargs]
    for candidate in (function, *args):
        if isinstance(candidate, functools.partial):
            targets += [candidate.args, candidate.keywords]
    seen: set[int] = set()
    for target in targets:
        apply_to_collection(target, (nn.Module, Optimizer), _own_tensors, seen, allow_frozen=True)
    return payload


@torch.no_grad()
def _own_tensors(obj: nn.Module | Optimizer, seen: set[int]) -> nn.Module | Optimizer:
    if isinstance(obj, nn.Module):
        tensors: Any = itertools.chain(obj.parameters(), obj.buffers())
    else:
        tensors = (value for state in obj.state.values() for value in state.values() if isinstance(value, torch.Tensor))
    for tensor in tensors:
        if id(tensor) not in seen and tensor.is_shared() and tensor.device.type == "cpu":
            seen.add(id(tensor))
            tensor.data = tensor.data.clone()
    return obj


def _check_fork_is_safe() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise FabricxError(
            "CUDA was already initialised in this process, and forked processes cannot use it. Use "
            "strategy='ddp_spawn', or create no CUDA tensors (and call no torch.cuda functions) before "
            "fabric.launch()."
        )
