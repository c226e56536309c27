from __future__ import annotations

import socket
import sys
import types

import pytest

from fabricx.environments import MPIEnvironment
from fabricx.utilities.exceptions import MisconfigurationError


class FakeComm:
    """Stands in for ``MPI.COMM_WORLD`` as seen by one rank; mpi4py and mpirun are not installed here."""

    def __init__(self, rank: int, hosts: list[str], root_values: dict[str, object] | None = None) -> None:
        self.rank, self.hosts, self.root_values = rank, hosts, root_values or {}
        self.bcast_calls = 0

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return len(self.hosts)

    def allgather(self, value):
        assert value == self.hosts[self.rank]
        return list(self.hosts)

    def bcast(self, value, root=0):
        assert root == 0
        self.bcast_calls += 1
        if self.rank == 0:
            return value
        # What rank 0 would have sent, keyed by the type of value asked for.
        return self.root_values["port" if value is None else "address"]


def install_fake_mpi(monkeypatch, comm: FakeComm) -> None:
    package = types.ModuleType("mpi4py")
    package.MPI = types.SimpleNamespace(COMM_WORLD=comm)
    monkeypatch.setitem(sys.modules, "mpi4py", package)


@pytest.fixture(autouse=True)
def no_master_variables(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)


def test_without_mpi4py(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `import mpi4py` fail
    assert MPIEnvironment.detect() is False
    with pytest.raises(ModuleNotFoundError, match="pip install mpi4py"):
        MPIEnvironment()


def test_detect_needs_more_than_one_process(monkeypatch):
    install_fake_mpi(monkeypatch, FakeComm(0, [socket.gethostname()]))
    assert MPIEnvironment.detect() is False
    install_fake_mpi(monkeypatch, FakeComm(0, [socket.gethostname(), "other"]))
    assert MPIEnvironment.detect() is True


def test_ranks_grouped_by_host(monkeypatch):
    here = socket.gethostname()
    # Ranks 0,1,4 on nodeA; 2,3 here. Rank 3 is the second process here, on the second node.
    comm = FakeComm(3, ["nodeA", "nodeA", here, here, "nodeA"], {"address": "nodeA", "port": 31000})
    install_fake_mpi(monkeypatch, comm)
    env = MPIEnvironment()
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (5, 3, 1, 1)
    assert (env.main_address, env.main_port) == ("nodeA", 31000)
    # Both are broadcast once and cached: later reads cost no collective.
    calls = comm.bcast_calls
    assert (env.main_address, env.main_port) == ("nodeA", 31000)
    assert comm.bcast_calls == calls == 2


def test_rank_zero_supplies_address_and_a_free_port(monkeypatch):
    here = socket.gethostname()
    install_fake_mpi(monkeypatch, FakeComm(0, [here, "nodeB"]))
    env = MPIEnvironment()
    assert (env.local_rank(), env.node_rank()) == (0, 0)
    assert env.main_address == here
    port = env.main_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_master_variables_override_and_validate(monkeypatch):
    install_fake_mpi(monkeypatch, FakeComm(1, ["nodeA", socket.gethostname()]))
    monkeypatch.setenv("MASTER_ADDR", "10.3.3.3")
    monkeypatch.setenv("MASTER_PORT", "5555")
    env = MPIEnvironment()
    assert (env.main_address, env.main_port) == ("10.3.3.3", 5555)
    env.validate_settings(num_devices=1, num_nodes=2)
    with pytest.raises(MisconfigurationError, match=r"mpirun started 2 processes.*= 4.*-np 4"):
        env.validate_settings(num_devices=2, num_nodes=2)
