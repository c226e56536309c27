"""The environment for a Kubeflow ``PyTorchJob``: one training process per pod."""

from __future__ import annotations

import os

from fabricx.environments.base import ExternalEnvironment, int_env
from fabricx.utilities.exceptions import MisconfigurationError

_REQUIRED = ("KUBERNETES_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


class KubeflowEnvironment(ExternalEnvironment):
    """Reads ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` set by the PyTorchJob operator.

    The operator counts pods, so each pod is a node holding one process: ``local_rank`` is 0 and
    ``node_rank`` equals ``RANK``. It is never picked automatically (the same variables appear
    in other setups); pass it as a plugin, using `detect_env()` to decide if you like.

    Example:
        ```python
        plugins = [KubeflowEnvironment()] if KubeflowEnvironment.detect_env() else []
        fabric = Fabric(devices=1, num_nodes=4, plugins=plugins)
        ```
    """

    @staticmethod
    def detect() -> bool:
        # Only chosen explicitly; see detect_env().
        return False

    @staticmethod
    def detect_env() -> bool:
        """Whether the variables a PyTorchJob sets are all present."""
        return all(name in os.environ for name in _REQUIRED)

    def local_rank(self) -> int:
        return 0

    def node_rank(self) -> int:
        return int_env("RANK")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        if num_devices != 1:
            raise MisconfigurationError(
                f"KubeflowEnvironment runs one process per pod, but fabricx was given devices={num_devices}."
                " Set devices=1 and give each pod one device, or run torchrun inside each pod instead."
            )
        self.check_world_size(
            num_devices,
            num_nodes,
            started="The PyTorchJob has {world_size} pods (WORLD_SIZE={world_size})",
            fix="Set num_nodes={world_size}, or change the job's replica count.",
        )
