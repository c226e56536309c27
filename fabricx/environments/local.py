"""The environment for fabricx's own launcher and for a plain ``python script.py``."""

from __future__ import annotations

import os
import socket

from fabricx.environments.base import ClusterEnvironment, int_env
from fabricx.utilities.rank_zero import set_global_rank


def find_free_port() -> int:
    """Ask the operating system for a TCP port nobody listens on right now.

    Another program may take it before it is used, so use it soon.

    Example:
        ```python
        os.environ["MASTER_PORT"] = str(find_free_port())
        ```
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


class LocalEnvironment(ClusterEnvironment):
    """One machine (or nodes started by hand): ranks come from fabricx's strategy and launcher.

    Reads ``MASTER_ADDR`` (default ``127.0.0.1``), ``MASTER_PORT`` (a free port is picked and
    exported when unset, so child processes inherit it), ``LOCAL_RANK`` and ``NODE_RANK``.

    Example:
        ```python
        env = LocalEnvironment()
        env.set_world_size(2)
        env.set_global_rank(0)
        ```
    """

    def __init__(self) -> None:
        self._world_size = 1
        self._global_rank = 0
        self._exported_port: str | None = None

    @property
    def creates_processes_externally(self) -> bool:
        # LOCAL_RANK is only present when some launcher (ours, or a person) already started the processes.
        return "LOCAL_RANK" in os.environ

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        if "MASTER_PORT" not in os.environ:
            # Exported so that every process launched from here rendezvous on the same port.
            self._exported_port = str(find_free_port())
            os.environ["MASTER_PORT"] = self._exported_port
        return int_env("MASTER_PORT")

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._world_size

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank
        set_global_rank(rank)

    def local_rank(self) -> int:
        return int_env("LOCAL_RANK", 0)

    def node_rank(self) -> int:
        return int_env("NODE_RANK", int_env("GROUP_RANK", 0))

    def teardown(self) -> None:
        # A port we picked is stale after the job; a later run in this process must pick a fresh one.
        if self._exported_port is not None and os.environ.get("MASTER_PORT") == self._exported_port:
            del os.environ["MASTER_PORT"]
        self._exported_port = None
