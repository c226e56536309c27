from __future__ import annotations

import pytest

from fabricx.environments import TorchElasticEnvironment
from fabricx.utilities.exceptions import MisconfigurationError


@pytest.fixture
def torchrun_env(monkeypatch):
    values = {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "GROUP_RANK": "2", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "node7", "MASTER_PORT": "29400",
    }  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_not_detected_without_variables():
    assert TorchElasticEnvironment.detect() is False


def test_detected_by_run_id_alone(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert TorchElasticEnvironment.detect() is True


def test_detected_by_all_rendezvous_variables(torchrun_env, monkeypatch):
    assert TorchElasticEnvironment.detect() is True
    monkeypatch.delenv("LOCAL_RANK")
    assert TorchElasticEnvironment.detect() is False


def test_values(torchrun_env):
    env = TorchElasticEnvironment()
    assert env.creates_processes_externally is True
    assert (env.main_address, env.main_port) == ("node7", 29400)
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 5, 1, 2)
    # The launcher owns these numbers: the strategy's setters leave them alone.
    env.set_world_size(3)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 5)


def test_validate_settings(torchrun_env):
    env = TorchElasticEnvironment()
    env.validate_settings(num_devices=2, num_nodes=4)
    with pytest.raises(MisconfigurationError, match=r"LOCAL_WORLD_SIZE=2.*devices=4.*--nproc-per-node=4"):
        env.validate_settings(num_devices=4, num_nodes=2)
    with pytest.raises(MisconfigurationError, match=r"WORLD_SIZE=8.*num_nodes=1 = 2.*--nnodes"):
        env.validate_settings(num_devices=2, num_nodes=1)
