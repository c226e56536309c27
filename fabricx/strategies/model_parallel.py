"""Tensor parallelism (DTensor) combined with FSDP2 on a 2-D device mesh, applied by the user's function."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch.nn import Module

from fabricx.accelerators.accelerator import Accelerator
from fabricx.precision.precision import Precision
from fabricx.strategies.fsdp import DTensorStrategy
from fabricx.strategies.mesh import MeshLayout
from fabricx.utilities.exceptions import MisconfigurationError

#: Names of the mesh dimensions handed to ``parallelize_fn``.
MESH_DIM_NAMES = ("data_parallel", "tensor_parallel")


class ModelParallelStrategy(DTensorStrategy):
    """Runs ``parallelize_fn(model, device_mesh) -> model`` on a 2-D mesh of
    ``data_parallel_size x tensor_parallel_size`` ranks; the function applies tensor parallelism
    (``parallelize_module`` with ``ColwiseParallel``/``RowwiseParallel``) on ``device_mesh["tensor_parallel"]``
    and usually ``fully_shard`` on ``device_mesh["data_parallel"]``.

    Ranks of one tensor-parallel group receive the same data: the distributed sampler splits data
    over the data-parallel dimension only. Optimizers must be built over the parallelized
    parameters (``setup(model, optimizer)`` rebuilds them). Mixed precision: autocast around forward;
    pass an ``mp_policy`` to your own ``fully_shard`` calls for low-precision parameters.

    Args:
        parallelize_fn: applies the parallelism in place or returns the new module.
        data_parallel_size: ranks that split the batch (``"auto"``: the number of nodes).
        tensor_parallel_size: ranks that split each layer (``"auto"``: the devices per node).
        save_distributed_checkpoint: sharded (DCP) checkpoints when true, one consolidated state otherwise.

    Example:
        ```python
        def parallelize(model, mesh):
            plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
            parallelize_module(model, mesh["tensor_parallel"], plan)
            fully_shard(model, mesh=mesh["data_parallel"])
            return model

        fabric = Fabric(devices=4, strategy=ModelParallelStrategy(parallelize, 2, 2))
        ```
    """

    strategy_name = "model_parallel"

    def __init__(
        self,
        parallelize_fn: Callable[[Module, Any], Module],
        data_parallel_size: int | str = "auto",
        tensor_parallel_size: int | str = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = timedelta(minutes=30),
        start_method: str = "popen",
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        precision: Precision | None = None,
    ) -> None:
        parallel = (accelerator, parallel_devices, cluster_environment, precision, process_group_backend, timeout)
        super().__init__(*parallel, start_method, state_dict_type="sharded" if save_distributed_checkpoint else "full")
        if not callable(parallelize_fn):
            raise TypeError(
                f"parallelize_fn must be a function (model, device_mesh) -> model; got {type(parallelize_fn).__name__}."
            )
        for name, value in (("data_parallel_size", data_parallel_size), ("tensor_parallel_size", tensor_parallel_size)):
            if value != "auto" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise MisconfigurationError(f"{name}={value!r}; give a positive int or 'auto'.")
        self._parallelize_fn = parallelize_fn
        self._data_parallel_size = data_parallel_size
        self._tensor_parallel_size = tensor_parallel_size

    # -- layout ---------------------------------------------------------------------------------------------
    @property
    def mesh_shape(self) -> tuple[int, int]:
        """``(data_parallel_size, tensor_parallel_size)`` with ``"auto"`` resolved."""
        world = self.world_size
        dp_flag, tp_flag = self._data_parallel_size, self._tensor_parallel_size
        if dp_flag == "auto" and tp_flag == "auto":
            dp = self.num_nodes
            tp = max(1, world // dp)
        elif dp_flag == "auto":
            tp = int(tp_flag)
            dp = max(1, world // tp)
        elif tp_flag == "auto":
            dp = int(dp_flag)
            tp = max(1, world // dp)
        else:
            dp, tp = int(dp_flag), int(tp_flag)
        if dp * tp != world:
            raise MisconfigurationError(
                f"data_parallel_size={dp} x tensor_parallel_size={tp} = {dp * tp} ranks, but the job has {world} "
                f"({len(self.parallel_devices)} device(s) x {self.num_nodes} node(s)). Make the product the world size."
            )
        return int(dp), int(tp)

    def mesh_layout(self) -> MeshLayout:
        return MeshLayout(self.mesh_shape, MESH_DIM_NAMES)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        dp, tp = self.mesh_shape
        # The mesh is row-major: ranks [i*tp, (i+1)*tp) form data-parallel group i.
        return {"num_replicas": dp, "rank": self.global_rank // tp}

    # -- modules ---------------------------------------------------------------------------------------------
    def _shard(self, module: Module) -> Module:
        result = self._parallelize_fn(module, self.device_mesh)
        if not isinstance(result, Module):
            raise TypeError(
                f"parallelize_fn returned {type(result).__name__}; it must return the (parallelized) module."
            )
        return result

    def __repr__(self) -> str:
        return (
            f"ModelParallelStrategy(data_parallel_size={self._data_parallel_size!r}, "
            f"tensor_parallel_size={self._tensor_parallel_size!r}, state_dict_type={self._state_dict_type!r})"
        )


__all__ = ["MESH_DIM_NAMES", "ModelParallelStrategy"]
