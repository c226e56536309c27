from __future__ import annotations

import os
import socket

import pytest

from fabricx.environments import LocalEnvironment, find_free_port
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_only


def test_find_free_port_can_be_bound():
    port = find_free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_defaults_for_plain_python_script():
    env = LocalEnvironment()
    assert LocalEnvironment.detect() is True
    assert env.creates_processes_externally is False
    assert env.main_address == "127.0.0.1"
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (1, 0, 0, 0)


def test_main_port_is_picked_once_and_exported_for_children(monkeypatch):
    env = LocalEnvironment()
    port = env.main_port
    assert os.environ["MASTER_PORT"] == str(port)
    # A second environment (as in a launched child) reads the exported port instead of picking anew.
    assert LocalEnvironment().main_port == port
    assert env.main_port == port
    env.teardown()
    assert "MASTER_PORT" not in os.environ


def test_teardown_keeps_a_port_the_user_set(monkeypatch):
    monkeypatch.setenv("MASTER_PORT", "29501")
    env = LocalEnvironment()
    assert env.main_port == 29501
    env.teardown()
    assert os.environ["MASTER_PORT"] == "29501"


def test_reads_launcher_variables(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.5")
    monkeypatch.setenv("MASTER_PORT", "1234")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("NODE_RANK", "2")
    env = LocalEnvironment()
    assert env.creates_processes_externally is True
    assert (env.main_address, env.main_port, env.local_rank(), env.node_rank()) == ("10.0.0.5", 1234, 3, 2)


def test_setters_store_values_and_inform_rank_zero_helpers(monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    env = LocalEnvironment()
    env.set_world_size(4)
    env.set_global_rank(3)
    assert (env.world_size(), env.global_rank()) == (4, 3)
    assert rank_zero_only.rank == 3


def test_non_integer_variable_is_reported_by_name(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "zero")
    with pytest.raises(MisconfigurationError, match="LOCAL_RANK='zero' is not an integer"):
        LocalEnvironment().local_rank()
