"""Where a process sits in a job, read from the launcher that started it."""

from fabricx.environments.base import ClusterEnvironment, ExternalEnvironment
from fabricx.environments.detect import detect_cluster_environment
from fabricx.environments.kubeflow import KubeflowEnvironment
from fabricx.environments.local import LocalEnvironment, find_free_port
from fabricx.environments.lsf import LSFEnvironment
from fabricx.environments.mpi import MPIEnvironment
from fabricx.environments.slurm import SLURMEnvironment, expand_hostlist
from fabricx.environments.torchelastic import TorchElasticEnvironment

__all__ = [
    "ClusterEnvironment",
    "ExternalEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LocalEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "detect_cluster_environment",
    "expand_hostlist",
    "find_free_port",
]
