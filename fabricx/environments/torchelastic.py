"""The environment for processes started by ``torchrun`` (TorchElastic)."""

from __future__ import annotations

import os

from fabricx.environments.base import ClusterEnvironment, int_env
from fabricx.utilities.exceptions import MisconfigurationError

_REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class TorchElasticEnvironment(ClusterEnvironment):
    """Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.

    Example:
        ```python
        # torchrun --nproc-per-node 2 train.py
        env = TorchElasticEnvironment()
        env.global_rank(), env.world_size()
        ```
    """

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ["MASTER_ADDR"]

    @property
    def main_port(self) -> int:
        return int_env("MASTER_PORT")

    @staticmethod
    def detect() -> bool:
        return "TORCHELASTIC_RUN_ID" in os.environ or all(name in os.environ for name in _REQUIRED)

    def world_size(self) -> int:
        return int_env("WORLD_SIZE")

    def global_rank(self) -> int:
        return int_env("RANK")

    def local_rank(self) -> int:
        return int_env("LOCAL_RANK")

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
        world_size = self.world_size()
        if world_size != num_devices * num_nodes:
            raise MisconfigurationError(
                f"torchrun started {world_size} processes in total (WORLD_SIZE={world_size}) but fabricx was"
                f" given devices={num_devices} x num_nodes={num_nodes} = {num_devices * num_nodes}. Make"
                f" devices equal --nproc-per-node and num_nodes equal --nnodes."
            )
