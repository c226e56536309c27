"""The environment for processes started by ``torchrun`` (TorchElastic)."""

from __future__ import annotations

import os

from fabricx.environments.base import ExternalEnvironment, int_env
from fabricx.utilities.exceptions import MisconfigurationError

_REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class TorchElasticEnvironment(ExternalEnvironment):
    """Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.

    Example:
        ```python
        # torchrun --nproc-per-node 2 train.py
        env = TorchElasticEnvironment()
        env.global_rank(), env.world_size()
        ```
    """

    @staticmethod
    def detect() -> bool:
        return "TORCHELASTIC_RUN_ID" in os.environ or all(name in os.environ for name in _REQUIRED)

    def node_rank(self) -> int:
        return int_env("GROUP_RANK", 0)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        local_world_size = os.environ.get("LOCAL_WORLD_SIZE")
        if local_world_size is not None and int(local_world_size) != num_devices:
            raise MisconfigurationError(
                f"torchrun started {local_world_size} processes per node"
                f" (LOCAL_WORLD_SIZE={local_world_size}) but fabricx was given devices={num_devices}."
                f" Set devices={local_world_size}, or start torchrun with --nproc-per-node={num_devices}."
            )
        self.check_world_size(
            num_devices,
            num_nodes,
            started="torchrun started {world_size} processes in total (WORLD_SIZE={world_size})",
            fix="Make devices equal --nproc-per-node and num_nodes equal --nnodes.",
        )
