"""The environment for processes started by ``mpirun``/``mpiexec``, read through mpi4py."""

from __future__ import annotations

import socket
from typing import Any

from fabricx.environments.base import ExternalEnvironment
from fabricx.environments.local import find_free_port
from fabricx.utilities.imports import lazy_import


def _import_mpi() -> Any | None:
    # Imported on demand: loading mpi4py.MPI initialises the MPI library, which costs time.
    try:
        package = lazy_import("mpi4py")
        # `from mpi4py import MPI` semantics: an attribute set on the package, else its submodule.
        found = getattr(package, "MPI", None)
        return found if found is not None else lazy_import("mpi4py.MPI")
    except ImportError:
        return None


class MPIEnvironment(ExternalEnvironment):
    """Ranks from ``MPI.COMM_WORLD``; local and node rank from grouping the ranks by host name.

    Needs ``mpi4py`` (``pip install mpi4py``). The main address is rank 0's host name and the
    port a free port found on rank 0, both broadcast to every rank; ``MASTER_ADDR`` and
    ``MASTER_PORT`` override them.

    Example:
        ```python
        # mpirun -np 4 python train.py
        env = MPIEnvironment()
        env.local_rank(), env.node_rank()
        ```
    """

    def __init__(self) -> None:
        mpi = _import_mpi()
        if mpi is None:
            raise ModuleNotFoundError(
                "MPIEnvironment needs the `mpi4py` package, which is not installed. Install it with"
                " `pip install mpi4py`, or pick another cluster environment."
            )
        self._comm = mpi.COMM_WORLD
        self._layout: tuple[int, int] | None = None
        self._main_address: str | None = None
        self._main_port: int | None = None

    def launcher_main_address(self) -> str:
        if self._main_address is None:
            self._main_address = str(self._comm.bcast(socket.gethostname(), root=0))
        return self._main_address

    def launcher_main_port(self) -> int:
        if self._main_port is None:
            # Only rank 0 can tell which port is free on its own host.
            port = find_free_port() if self._comm.Get_rank() == 0 else None
            self._main_port = int(self._comm.bcast(port, root=0))
        return self._main_port

    @staticmethod
    def detect() -> bool:
        mpi = _import_mpi()
        return mpi is not None and mpi.COMM_WORLD.Get_size() > 1

    def world_size(self) -> int:
        return int(self._comm.Get_size())

    def global_rank(self) -> int:
        return int(self._comm.Get_rank())

    def local_rank(self) -> int:
        return self._local_and_node_rank()[0]

    def node_rank(self) -> int:
        return self._local_and_node_rank()[1]

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        self.check_world_size(
            num_devices,
            num_nodes,
            started="mpirun started {world_size} processes",
            fix=f"Start mpirun with -np {num_devices * num_nodes}, or change devices and num_nodes to match.",
        )

    def _local_and_node_rank(self) -> tuple[int, int]:
        if self._layout is None:
            hosts: list[str] = list(self._comm.allgather(socket.gethostname()))
            rank = self.global_rank()
            here = hosts[rank]
            # Nodes are numbered in order of their lowest rank, so rank 0 is always on node 0.
            node_order = list(dict.fromkeys(hosts))
            self._layout = (hosts[:rank].count(here), node_order.index(here))
        return self._layout
