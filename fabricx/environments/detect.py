"""Pick the cluster environment that started this process."""

from __future__ import annotations

from fabricx.environments.base import ClusterEnvironment
from fabricx.environments.local import LocalEnvironment
from fabricx.environments.lsf import LSFEnvironment
from fabricx.environments.mpi import MPIEnvironment
from fabricx.environments.slurm import SLURMEnvironment
from fabricx.environments.torchelastic import TorchElasticEnvironment

# torchrun first: it can run inside a SLURM or LSF allocation, and then its variables are the ones that hold.
_DETECTION_ORDER: tuple[type[ClusterEnvironment], ...] = (
    TorchElasticEnvironment,
    SLURMEnvironment,
    LSFEnvironment,
    MPIEnvironment,
)


def detect_cluster_environment() -> ClusterEnvironment:
    """Return the first environment whose launcher started this process, else ``LocalEnvironment``.

    Kubeflow is never detected automatically; pass ``KubeflowEnvironment()`` as a plugin.

    Example:
        ```python
        env = detect_cluster_environment()
        type(env).__name__  # "LocalEnvironment" for a plain `python train.py`
        ```
    """
    for environment_class in _DETECTION_ORDER:
        if environment_class.detect():
            return environment_class()
    return LocalEnvironment()
