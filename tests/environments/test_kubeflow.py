from __future__ import annotations

import pytest

from fabricx.environments import KubeflowEnvironment
from fabricx.utilities.exceptions import MisconfigurationError


@pytest.fixture
def pytorchjob_env(monkeypatch):
    values = {
        "KUBERNETES_PORT": "tcp://10.96.0.1:443", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
        "WORLD_SIZE": "3", "RANK": "2",
    }  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_never_detected_automatically(pytorchjob_env):
    assert KubeflowEnvironment.detect() is False
    assert KubeflowEnvironment.detect_env() is True


def test_detect_env_needs_every_variable(pytorchjob_env, monkeypatch):
    monkeypatch.delenv("KUBERNETES_PORT")
    assert KubeflowEnvironment.detect_env() is False


def test_values_are_per_pod(pytorchjob_env):
    env = KubeflowEnvironment()
    assert env.creates_processes_externally is True
    assert (env.main_address, env.main_port) == ("job-master-0", 23456)
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (3, 2, 0, 2)


def test_validate_settings(pytorchjob_env):
    env = KubeflowEnvironment()
    env.validate_settings(num_devices=1, num_nodes=3)
    with pytest.raises(MisconfigurationError, match=r"one process per pod.*devices=2.*Set devices=1"):
        env.validate_settings(num_devices=2, num_nodes=3)
    with pytest.raises(MisconfigurationError, match=r"3 pods \(WORLD_SIZE=3\).*num_nodes=2.*Set num_nodes=3"):
        env.validate_settings(num_devices=1, num_nodes=2)
