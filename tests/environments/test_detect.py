from __future__ import annotations

import sys
import types

import pytest

from fabricx.environments import (
    LocalEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
    detect_cluster_environment,
)

_TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "a", "MASTER_PORT": "1"}
_SLURM = {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train"}
_LSF = {"LSB_JOBID": "1", "LSB_HOSTS": "b c", "JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "2",
        "JSM_NAMESPACE_LOCAL_RANK": "0"}  # fmt: skip
_KUBEFLOW = {
    "KUBERNETES_PORT": "tcp://x:443",
    "MASTER_ADDR": "m",
    "MASTER_PORT": "2",
    "WORLD_SIZE": "2",
    "RANK": "1",
}


@pytest.fixture(autouse=True)
def no_mpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # no MPI unless a test installs a stand-in


def _fake_mpi(monkeypatch, size: int) -> None:
    comm = types.SimpleNamespace(Get_size=lambda: size, Get_rank=lambda: 0)
    package = types.ModuleType("mpi4py")
    package.MPI = types.SimpleNamespace(COMM_WORLD=comm)
    monkeypatch.setitem(sys.modules, "mpi4py", package)


@pytest.mark.parametrize(
    ("variables", "mpi_size", "expected"),
    [
        ({}, None, LocalEnvironment),
        ({**_SLURM, **_LSF, **_TORCHRUN}, 2, TorchElasticEnvironment),  # torchrun inside an allocation
        ({**_SLURM, **_LSF}, 2, SLURMEnvironment),
        (_LSF, 2, LSFEnvironment),
        ({}, 2, MPIEnvironment),
        ({}, 1, LocalEnvironment),  # mpi4py installed, but not started by mpirun
        (_KUBEFLOW, None, LocalEnvironment),  # Kubeflow is only used when passed explicitly
    ],
)
def test_detection_order(monkeypatch, variables, mpi_size, expected):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    if mpi_size is not None:
        _fake_mpi(monkeypatch, mpi_size)
    assert type(detect_cluster_environment()) is expected
