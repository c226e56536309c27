"""What the `Checkpointer` needs from its host (a strategy), as a Protocol: checkpoint/ imports no strategy.

A strategy is a host: it says where this process is, synchronises the ranks and turns live objects into state
and back (gathering shards where it has them). Two optional capabilities are read where present: `checkpoint_io`
(where files go) and `checkpoint_storage()` (the entries it stores its own way, an `EntryStorage`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer


class RankHost(Protocol):
    """Where this process is in the job, and a broadcast from one rank to all (a single-file save needs no more).

    Example:
        ```python
        def owner(host: RankHost) -> bool:
            return host.global_rank == 0
        ```
    """

    @property
    def global_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def broadcast(self, obj: Any, src: int = 0) -> Any: ...


class CheckpointHost(RankHost, Protocol):
    """Everything `fabric.save`/`fabric.load`'s pipeline asks of a strategy.

    Example:
        ```python
        Checkpointer(fabric.strategy).save("ckpt/step_10", state)  # any Strategy is a CheckpointHost
        ```
    """

    @property
    def is_global_zero(self) -> bool: ...

    def barrier(self, name: str | None = None) -> None: ...

    def get_module_state_dict(self, module: Module) -> dict[str, Any]: ...

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> Any: ...

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]: ...

    def load_optimizer_state(self, optimizer: Optimizer, state_dict: dict[str, Any]) -> None: ...
