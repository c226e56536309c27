from __future__ import annotations

import socket

import pytest

from fabricx.environments import LSFEnvironment
from fabricx.utilities.exceptions import MisconfigurationError


@pytest.fixture
def jsrun_env(monkeypatch, tmp_path):
    # Two compute hosts with two slots each; this machine is the second one; "batch1" launched the job.
    here = socket.gethostname()
    rankfile = tmp_path / "rankfile"
    rankfile.write_text(f"batch1\ncompute3\ncompute3\n{here}\n{here}\n")
    values = {
        "LSB_JOBID": "98765", "LSB_DJOB_RANKFILE": str(rankfile), "JSM_NAMESPACE_RANK": "3",
        "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_LOCAL_RANK": "1",
    }  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return rankfile


def test_detect(jsrun_env, monkeypatch):
    assert LSFEnvironment.detect() is True
    monkeypatch.delenv("LSB_DJOB_RANKFILE")
    assert LSFEnvironment.detect() is False
    monkeypatch.setenv("LSB_HOSTS", "batch1 compute3")
    assert LSFEnvironment.detect() is True
    monkeypatch.delenv("JSM_NAMESPACE_SIZE")
    assert LSFEnvironment.detect() is False


def test_values_from_rankfile(jsrun_env):
    env = LSFEnvironment()
    assert env.creates_processes_externally is True
    assert env.compute_hosts() == ["compute3", socket.gethostname()]
    assert env.main_address == "compute3"
    assert env.main_port == 10000 + 8765
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (4, 3, 1, 1)


def test_hosts_from_lsb_hosts(jsrun_env, monkeypatch):
    monkeypatch.delenv("LSB_DJOB_RANKFILE")
    monkeypatch.setenv("LSB_HOSTS", f"login2 {socket.gethostname()} {socket.gethostname()} other9 other9")
    env = LSFEnvironment()
    assert env.main_address == socket.gethostname()
    assert env.node_rank() == 0


def test_single_host_list_is_used_as_is(jsrun_env, monkeypatch):
    monkeypatch.delenv("LSB_DJOB_RANKFILE")
    monkeypatch.setenv("LSB_HOSTS", "solo")
    assert LSFEnvironment().main_address == "solo"


def test_master_variables_override(jsrun_env, monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.2.2.2")
    monkeypatch.setenv("MASTER_PORT", "4242")
    env = LSFEnvironment()
    assert (env.main_address, env.main_port) == ("10.2.2.2", 4242)


def test_unknown_host_and_unreadable_rankfile_are_explained(jsrun_env, monkeypatch, tmp_path):
    jsrun_env.write_text("batch1\ncompute3\ncompute4\n")
    with pytest.raises(
        MisconfigurationError, match=r"not among the LSF compute hosts \['compute3', 'compute4'\]"
    ):
        LSFEnvironment().node_rank()
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(tmp_path / "missing"))
    with pytest.raises(MisconfigurationError, match="Cannot read the LSF rank file"):
        _ = LSFEnvironment().main_address


def test_validate_settings(jsrun_env):
    env = LSFEnvironment()
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(
        MisconfigurationError, match=r"2 compute hosts \(compute3, .*num_nodes=1.*num_nodes=2"
    ):
        env.validate_settings(num_devices=4, num_nodes=1)
    with pytest.raises(MisconfigurationError, match=r"JSM_NAMESPACE_SIZE=4.*= 6.*devices=2"):
        env.validate_settings(num_devices=3, num_nodes=2)
