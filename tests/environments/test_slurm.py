from __future__ import annotations

import pytest

from fabricx.environments import SLURMEnvironment, expand_hostlist
from fabricx.utilities.exceptions import MisconfigurationError


@pytest.fixture
def srun_env(monkeypatch):
    # What `sbatch --nodes=2 --ntasks-per-node=4` + `srun python train.py` gives task 6.
    values = {
        "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "1234567", "SLURM_NTASKS": "8", "SLURM_PROCID": "6",
        "SLURM_LOCALID": "2", "SLURM_NODEID": "1", "SLURM_NODELIST": "gpu[017-018]",
        "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_ID": "0",
    }  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node1", ["node1"]),
        ("node1,node2", ["node1", "node2"]),
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("rack[1-2]-n[3,5]", ["rack1-n3", "rack1-n5", "rack2-n3", "rack2-n5"]),
        ("a[1],b[2-3],c", ["a1", "b2", "b3", "c"]),
        ("host-1.cluster.org", ["host-1.cluster.org"]),
    ],
)
def test_expand_hostlist(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["node[01-03", "node01]", "a[1]b]"])
def test_expand_hostlist_rejects_unbalanced_brackets(nodelist):
    with pytest.raises(ValueError, match="brackets"):
        expand_hostlist(nodelist)


def test_values_under_srun(srun_env):
    env = SLURMEnvironment()
    assert SLURMEnvironment.detect() is True
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 6, 2, 1)
    assert env.main_address == "gpu017"
    assert env.main_port == 10000 + 4567
    env.set_world_size(1)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 6)


def test_missing_variable_is_reported_by_name(srun_env, monkeypatch):
    monkeypatch.delenv("SLURM_PROCID")
    with pytest.raises(MisconfigurationError, match="SLURM_PROCID is not set"):
        SLURMEnvironment().global_rank()


def test_master_variables_override(srun_env, monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.1.1.1")
    monkeypatch.setenv("MASTER_PORT", "23456")
    env = SLURMEnvironment()
    assert (env.main_address, env.main_port) == ("10.1.1.1", 23456)


def test_job_nodelist_and_default_port_fallbacks(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "cn[5-6]")
    env = SLURMEnvironment()
    assert env.main_address == "cn5"
    assert env.main_port == 12910


@pytest.mark.parametrize(
    ("variables", "detected"),
    [
        ({}, False),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train"}, True),
        # An interactive allocation without an srun step: fabricx launches its own processes.
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "bash"}, False),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "interactive"}, False),
        # `srun -n 2 python train.py` inside that allocation.
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "interactive", "SLURM_STEP_ID": "3"}, True),
        # `srun --pty bash`, then `python train.py`: one shell task is not a launch.
        (
            {
                "SLURM_NTASKS": "1",
                "SLURM_JOB_NAME": "bash",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_NUM_TASKS": "1",
            },
            False,
        ),
    ],
)
def test_detect(monkeypatch, variables, detected):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert SLURMEnvironment.detect() is detected


def test_validate_settings_accepts_matching_allocation(srun_env):
    SLURMEnvironment().validate_settings(num_devices=4, num_nodes=2)


def test_validate_settings_names_what_to_change(srun_env, monkeypatch):
    env = SLURMEnvironment()
    with pytest.raises(MisconfigurationError, match=r"--ntasks-per-node=4.*devices=2.*Set devices=4"):
        env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(MisconfigurationError, match=r"2 nodes.*num_nodes=4.*Set num_nodes=2"):
        env.validate_settings(num_devices=4, num_nodes=4)
    # Without the per-node and node-count hints only the total can be compared.
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE")
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    with pytest.raises(MisconfigurationError, match=r"SLURM_NTASKS=8.*= 6 processes.*--ntasks-per-node=3"):
        env.validate_settings(num_devices=3, num_nodes=2)
