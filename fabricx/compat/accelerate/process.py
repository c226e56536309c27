"""Accelerate's process-state objects (``PartialState``, ``AcceleratorState``): where this process is,
how many there are, and helpers that run on some of them. Plain values, so they pickle."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from fabricx.compat.accelerate.config import DistributedType

if TYPE_CHECKING:
    from fabricx.fabric import Fabric

__all__ = ["AcceleratorState", "PartialState", "distributed_type_of", "only_on"]

_SHARED: dict[str, Any] = {}


def externally_launched() -> bool:
    """Whether torchrun / ``fabricx run`` started this process as one of several."""
    from fabricx.environments.torchelastic import TorchElasticEnvironment

    return "FABRICX_DEVICES" in os.environ or TorchElasticEnvironment.detect()


def distributed_type_of(strategy_name: str, num_processes: int, device: torch.device) -> DistributedType:
    """Accelerate's name for a run of ``num_processes`` processes with a fabricx strategy on ``device``."""
    if strategy_name.startswith("fsdp"):
        return DistributedType.FSDP
    if strategy_name.startswith("deepspeed"):
        return DistributedType.DEEPSPEED
    if num_processes == 1:
        return DistributedType.NO
    if device.type == "cuda":
        return DistributedType.MULTI_GPU
    if device.type == "xla":
        return DistributedType.XLA
    return DistributedType.MULTI_MPS if device.type == "mps" else DistributedType.MULTI_CPU


def _skipped(*args: Any, **kwargs: Any) -> None:
    """What a process-selecting decorator gives on the processes it leaves out: a call that does nothing."""
    return None


def only_on(selected: bool, use_distributed: bool, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` itself on a ``selected`` process, a call that does nothing and returns ``None`` elsewhere.

    As in Accelerate, a one-process run (``use_distributed`` false) is selected whatever was asked:
    ``on_process(f, process_index=1)`` runs ``f`` when there is only process 0, so a script written for
    several processes still does its per-process work when run alone.

    Example:
        ```python
        only_on(state.process_index == 1, state.use_distributed, print)("on process 1, or when alone")
        ```
    """
    return function if selected or not use_distributed else _skipped


class ProcessSelection:
    """Which process this is, and decorators that run a function on chosen processes only: what
    `PartialState` and the `Accelerator` share. Hosts provide ``num_processes``, ``process_index`` and
    ``local_process_index``.
    """

    num_processes: int
    process_index: int
    local_process_index: int

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine (on the local main process).

        Example:
            ```python
            accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")
            ```
        """
        if self.is_local_main_process:
            print(*args, **kwargs)

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on the main process only.

        Example:
            ```python
            @accelerator.on_main_process
            def report(text): print(text)
            ```
        """
        return only_on(self.is_main_process, self.use_distributed, function)

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on each machine's main process only.

        Example:
            ```python
            @accelerator.on_local_main_process
            def report(text): print(text)
            ```
        """
        return only_on(self.is_local_main_process, self.use_distributed, function)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on the last process only.

        Example:
            ```python
            @accelerator.on_last_process
            def report(text): print(text)
            ```
        """
        return only_on(self.is_last_process, self.use_distributed, function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        """Decorator: run ``function`` on process ``process_index`` only (a one-process run runs it whatever the
        index, as Accelerate does).

        Example:
            ```python
            accelerator.on_process(print, process_index=1)("on process 1, or when alone")
            ```
        """
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return only_on(self.process_index == process_index, self.use_distributed, function)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` on local process ``local_process_index`` of each machine only (a one-process
        run runs it whatever the index, as Accelerate does).

        Example:
            ```python
            accelerator.on_local_process(print, local_process_index=0)("once per machine")
            ```
        """
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return only_on(self.local_process_index == local_process_index, self.use_distributed, function)


def launched_fabric(who: str, cpu: bool = False, **flags: Any) -> Fabric:
    """A launched Fabric on this process's devices: every process torchrun / ``fabricx run`` started, else one
    device. It never starts processes itself; ``who`` names what needed several in the error saying so."""
    from fabricx.fabric import Fabric

    fabric = Fabric(accelerator="cpu" if cpu else "auto", **_launched_devices(), **flags)
    if fabric.strategy.launcher is not None:
        from fabricx.utilities.exceptions import FabricxError

        raise FabricxError(
            f"{who} needs several processes but none were started for it. Start the script with "
            "`fabricx run --devices N script.py` or `torchrun --nproc-per-node N script.py`."
        )
    fabric.launch()
    return fabric


def _launched_devices() -> dict[str, Any]:
    """The processes this one belongs to, as Accelerate counts them: every process torchrun started (its
    ``LOCAL_WORLD_SIZE`` on each of ``WORLD_SIZE / LOCAL_WORLD_SIZE`` machines, on the CPU too, where "auto"
    devices would be one), the flags of ``fabricx run``, else one device."""
    if "FABRICX_DEVICES" in os.environ:
        return {"devices": "auto"}  # `fabricx run` set the devices and machines in the environment
    if not externally_launched():
        return {"devices": 1}
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return {"devices": per_node, "num_nodes": max(1, world // per_node)}


def _process_fabric(cpu: bool = False) -> Fabric:
    """One Fabric per process for state objects created without an Accelerator (starts the process group)."""
    if "fabric" not in _SHARED:
        _SHARED["fabric"] = launched_fabric("This script", cpu=cpu)
    return _SHARED["fabric"]


class PartialState(ProcessSelection):
    """Where this process is: ``num_processes``, ``process_index``, ``local_process_index``, ``device``,
    ``distributed_type``, and helpers (``print``, ``wait_for_everyone``, ``on_main_process``, ...).

    Created alone it starts the process group (as the Accelerator does); ``accelerator.state`` is one.

    Example:
        ```python
        state = PartialState()
        state.print(f"{state.num_processes} processes")
        ```
    """

    _shared: dict[str, Any] = {}

    def __init__(self, cpu: bool = False, _from: Any = None, **kwargs: Any) -> None:
        # One state per process, shared by every instance (as Accelerate's is).
        self.__dict__ = PartialState._shared
        if self._shared:
            return
        fabric = _from if _from is not None else _process_fabric(cpu)
        self.num_processes: int = fabric.world_size
        self.process_index: int = fabric.global_rank
        self.local_process_index: int = fabric.local_rank
        self.device: torch.device = fabric.device
        self.distributed_type: DistributedType = distributed_type_of(
            getattr(fabric.strategy, "strategy_name", ""), fabric.world_size, fabric.device
        )
        self.backend: str | None = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        self.debug: bool = os.environ.get("ACCELERATE_DEBUG_MODE", "").lower() in ("1", "true", "yes")
        self.fork_launched = False

    # -- who -------------------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return True

    # -- together ----------------------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Wait until every process gets here."""
        if self.num_processes > 1 and dist.is_initialized():
            dist.barrier()

    def destroy_process_group(self, group: Any = None) -> None:
        """End the process group (every process must call it)."""
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Run the block on the main process first, then on the others."""
        return self._first_where(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Run the block on each machine's main process first, then on the others."""
        return self._first_where(self.is_local_main_process)

    @contextlib.contextmanager
    def _first_where(self, first: bool) -> Generator[None, None, None]:
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Generator[Any, None, None]:
        """Give each process its contiguous part of a list, tuple, tensor or dict of them."""
        from fabricx.compat.accelerate.splitting import split_for_process

        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)


class AcceleratorState(PartialState):
    """`PartialState` plus the Accelerator's settings (``mixed_precision``).

    Example:
        ```python
        AcceleratorState().mixed_precision  # "no"
        ```
    """

    _shared: dict[str, Any] = {}

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, _from: Any = None, **kwargs: Any) -> None:
        partial = PartialState(cpu=cpu, _from=_from)
        self.__dict__ = AcceleratorState._shared
        self.__dict__.update(vars(partial))
        if mixed_precision is None:
            mixed_precision = self.__dict__.get("mixed_precision") or os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        self.mixed_precision: str = str(mixed_precision).lower()

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """Accelerate's singleton reset; fabricx's states are plain objects, so nothing to do."""

    def __repr__(self) -> str:
        return super().__repr__() + f"Mixed precision type: {self.mixed_precision}\n"
