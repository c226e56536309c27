"""torch.distributed.checkpoint's private entry points for reading a checkpoint without a state dict.

Reading a sharded checkpoint back as full tensors (to consolidate it, or to load it into another
layout) needs an empty state dict filled from the metadata: torch does that with the private
``_EmptyStateDictLoadPlanner`` and ``_load_state_dict`` (``dcp_to_torch_save`` uses them the same
way). They are imported here only.
"""

from __future__ import annotations

from typing import Any


def empty_state_dict_planner_class() -> type:
    """torch's load planner that builds the state dict from the checkpoint's metadata.

    Example:
        ```python
        planner = empty_state_dict_planner_class()(keys={"model"})
        ```
    """
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner

    return _EmptyStateDictLoadPlanner


def load_state_dict_without_process_group(state: dict[str, Any], reader: Any, planner: Any) -> None:
    """Fill ``state`` from ``reader`` in this process alone (no process group needed).

    Example:
        ```python
        load_state_dict_without_process_group(state, FileSystemReader(path), planner)
        ```
    """
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    _load_state_dict(state, storage_reader=reader, planner=planner, no_dist=True)
