"""The environment for processes started by IBM LSF's ``jsrun``."""

from __future__ import annotations

import os
import socket

from fabricx.environments.base import ExternalEnvironment, port_from_job_id
from fabricx.utilities.exceptions import MisconfigurationError

_DEFAULT_PORT = 12910


class LSFEnvironment(ExternalEnvironment):
    """Reads ``JSM_NAMESPACE_RANK``/``SIZE``/``LOCAL_RANK`` and the job's hosts.

    Hosts come from the file named by ``LSB_DJOB_RANKFILE`` (one line per slot) or from
    ``LSB_HOSTS``. LSF lists the launch (batch) host first; it runs no training process, so
    it is skipped. The main address is the first compute host and the node rank is this
    host's position among the compute hosts. ``MASTER_ADDR``/``MASTER_PORT`` override.

    Example:
        ```python
        # bsub -nnodes 2 ... ; jsrun -n 2 -a 4 python train.py
        env = LSFEnvironment()
        env.node_rank()
        ```
    """

    world_size_variable = "JSM_NAMESPACE_SIZE"
    global_rank_variable = "JSM_NAMESPACE_RANK"
    local_rank_variable = "JSM_NAMESPACE_LOCAL_RANK"

    def __init__(self) -> None:
        self._hosts: list[str] | None = None

    def launcher_main_address(self) -> str:
        return self.compute_hosts()[0]

    def launcher_main_port(self) -> int:
        return port_from_job_id(os.environ.get("LSB_JOBID"), _DEFAULT_PORT)

    @staticmethod
    def detect() -> bool:
        required = ("LSB_JOBID", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK")
        has_hosts = "LSB_DJOB_RANKFILE" in os.environ or "LSB_HOSTS" in os.environ
        return has_hosts and all(name in os.environ for name in required)

    def node_rank(self) -> int:
        hosts = self.compute_hosts()
        here = socket.gethostname()
        for index, host in enumerate(hosts):
            if _same_host(host, here):
                return index
        raise MisconfigurationError(
            f"This host ({here!r}) is not among the LSF compute hosts {hosts}; cannot work out its node rank."
            " Check LSB_DJOB_RANKFILE / LSB_HOSTS, or launch with jsrun."
        )

    def compute_hosts(self) -> list[str]:
        """The job's distinct compute hosts in LSF's order, without the launch host."""
        if self._hosts is None:
            slots = _read_host_slots()
            # The first slot is the launch host; a one-host list has nothing else to offer.
            rest = slots[1:] or slots
            self._hosts = list(dict.fromkeys(rest))
        return self._hosts

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        hosts = self.compute_hosts()
        if len(hosts) != num_nodes:
            raise MisconfigurationError(
                f"LSF gave this job {len(hosts)} compute hosts ({', '.join(hosts)}) but fabricx was given"
                f" num_nodes={num_nodes}. Set num_nodes={len(hosts)}, or request {num_nodes} nodes from bsub."
            )
        self.check_world_size(
            num_devices,
            num_nodes,
            started="jsrun started {world_size} processes (JSM_NAMESPACE_SIZE={world_size})",
            fix=f"Make jsrun start {num_devices} processes per host, or set"
            f" devices={self.world_size() // max(num_nodes, 1)}.",
        )


def _read_host_slots() -> list[str]:
    rankfile = os.environ.get("LSB_DJOB_RANKFILE")
    if rankfile:
        try:
            with open(rankfile) as handle:
                slots = [line.strip() for line in handle if line.strip()]
        except OSError as err:
            raise MisconfigurationError(
                f"Cannot read the LSF rank file LSB_DJOB_RANKFILE={rankfile!r}: {err}."
            ) from err
    else:
        slots = os.environ.get("LSB_HOSTS", "").split()
    if not slots:
        raise MisconfigurationError(
            "LSF lists no hosts for this job: LSB_DJOB_RANKFILE is empty or missing and LSB_HOSTS is empty."
        )
    return slots


def _same_host(listed: str, here: str) -> bool:
    # Rank files may hold short names while gethostname() returns a fully qualified one, or the reverse.
    return listed == here or listed.split(".")[0] == here.split(".")[0]
