"""The interface every cluster environment implements: where this process sits in the job."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

from fabricx.utilities.exceptions import MisconfigurationError


class ClusterEnvironment(ABC):
    """Reads rank, world size and the rendezvous address from whatever launched this process.

    A strategy is handed one of these; it never reads launcher variables itself.

    Example:
        ```python
        env = detect_cluster_environment()
        env.validate_settings(num_devices=2, num_nodes=1)
        print(env.global_rank(), env.world_size(), env.main_address, env.main_port)
        ```
    """

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """True when a launcher outside fabricx started every process of the job."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Host name or IP address of the process with global rank 0."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """Port on the main address used for the process-group rendezvous."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether the current process was started by this environment's launcher."""

    @abstractmethod
    def world_size(self) -> int:
        """Number of processes in the job."""

    def set_world_size(self, size: int) -> None:
        """Record the world size chosen by the strategy. Launchers that fix the layout (torchrun, SLURM,
        LSF, MPI, Kubeflow) ignore it; ``validate_settings`` reports a mismatch instead."""

    @abstractmethod
    def global_rank(self) -> int:
        """Rank of this process among all processes of the job."""

    def set_global_rank(self, rank: int) -> None:
        """Record the global rank chosen by the strategy (ignored where the launcher fixes it)."""

    @abstractmethod
    def local_rank(self) -> int:
        """Rank of this process among the processes on its node."""

    @abstractmethod
    def node_rank(self) -> int:
        """Index of this process's node among the nodes of the job."""

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Raise ``MisconfigurationError`` when the requested layout differs from what was allocated."""

    def teardown(self) -> None:
        """Undo any process-wide changes this environment made."""


class ExternalEnvironment(ClusterEnvironment):
    """A job whose launcher (torchrun, SLURM, LSF, MPI, Kubeflow) started every process itself.

    Ranks come from the environment variables the class names; ``MASTER_ADDR``/``MASTER_PORT`` win over
    the launcher's own address and port (`launcher_main_address`, `launcher_main_port`).

    Example:
        ```python
        class MyLauncherEnvironment(ExternalEnvironment):
            world_size_variable = "MY_SIZE"
            global_rank_variable = "MY_RANK"
            local_rank_variable = "MY_LOCAL_RANK"

            @staticmethod
            def detect() -> bool:
                return "MY_JOB_ID" in os.environ

            def node_rank(self) -> int:
                return int_env("MY_NODE_RANK")
        ```
    """

    world_size_variable = "WORLD_SIZE"
    global_rank_variable = "RANK"
    local_rank_variable = "LOCAL_RANK"

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        if "MASTER_ADDR" in os.environ:
            return os.environ["MASTER_ADDR"]
        return self.launcher_main_address()

    @property
    def main_port(self) -> int:
        if "MASTER_PORT" in os.environ:
            return int_env("MASTER_PORT")
        return self.launcher_main_port()

    def launcher_main_address(self) -> str:
        """Rank 0's host when ``MASTER_ADDR`` is unset; by default the launcher must set it."""
        raise _missing("MASTER_ADDR")

    def launcher_main_port(self) -> int:
        """The rendezvous port when ``MASTER_PORT`` is unset; by default the launcher must set it."""
        raise _missing("MASTER_PORT")

    def world_size(self) -> int:
        return int_env(self.world_size_variable)

    def global_rank(self) -> int:
        return int_env(self.global_rank_variable)

    def local_rank(self) -> int:
        return int_env(self.local_rank_variable)

    def check_world_size(self, num_devices: int, num_nodes: int, started: str, fix: str) -> None:
        """Refuse a launch whose process count is not ``devices x num_nodes``; `started` says what the
        launcher started (``{world_size}`` filled in), `fix` what to change."""
        world_size = self.world_size()
        if world_size != num_devices * num_nodes:
            started, fix = started.format(world_size=world_size), fix.format(world_size=world_size)
            raise MisconfigurationError(
                f"{started} but fabricx was given devices={num_devices} x num_nodes={num_nodes} ="
                f" {num_devices * num_nodes} processes. {fix}"
            )


def _missing(name: str) -> MisconfigurationError:
    return MisconfigurationError(
        f"The environment variable {name} is not set, but the launcher that started this process"
        " should have set it. Start the script through that launcher, or set the variable."
    )


def int_env(name: str, default: int | None = None) -> int:
    """The integer in environment variable `name` (or `default` when unset), with one clear message
    for a missing or non-numeric value, shared by the cluster environments.

    Example:
        ```python
        world_size = int_env("SLURM_NTASKS")
        ```
    """
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise _missing(name)
        return default
    try:
        return int(value)
    except ValueError:
        raise MisconfigurationError(f"The environment variable {name}={value!r} is not an integer.") from None


def port_from_job_id(job_id: str | None, default: int) -> int:
    """A rendezvous port derived from a scheduler's job id, so jobs sharing a node get different ports
    (as long as their ids differ in the last four digits); `default` when the id has no digits.

    Example:
        ```python
        port_from_job_id("1234567", 12910)  # 14567
        ```
    """
    digits = "".join(ch for ch in (job_id or "") if ch.isdigit())
    if not digits:
        return default
    return 10000 + int(digits[-4:])
