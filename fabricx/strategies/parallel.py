"""Shared machinery of every multi-process strategy: process group, ranks, collectives."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from fabricx.accelerators.accelerator import Accelerator
from fabricx.precision.precision import Precision
from fabricx.strategies.strategy import Strategy, check_reduce_op
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.process_group import register_release_at_exit, release_process_group
from fabricx.utilities.rank_zero import set_global_rank

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def _reduce_op(reduce_op: Any) -> tuple[Any, bool]:
    """The c10d operation for ``reduce_op`` and whether the sum must then be divided by the world size."""
    if isinstance(reduce_op, dist.ReduceOp | dist.ReduceOp.RedOpType):
        return reduce_op, False
    check_reduce_op(reduce_op)
    if reduce_op in ("mean", "avg"):
        return dist.ReduceOp.SUM, True  # gloo has no AVG: a sum divided in place
    return _REDUCE_OPS[reduce_op], False


_START_METHODS = ("popen", "spawn", "fork", "forkserver")
_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")


# Process groups this process has created so far (a later one needs fresh store keys).
_GROUPS_CREATED = 0


class _TensorHeader:
    """What a non-source rank needs to receive a broadcast tensor: its shape and dtype."""

    __slots__ = ("dtype", "shape")

    def __init__(self, tensor: Tensor) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype

    def __getstate__(self) -> tuple:
        return self.shape, self.dtype

    def __setstate__(self, state: tuple) -> None:
        self.shape, self.dtype = state


class ParallelStrategy(Strategy):
    """Base of strategies that run one process per device: process-group set-up, ranks from the
    cluster environment, collectives over ``torch.distributed``, the launcher choice.

    Example:
        ```python
        class MyStrategy(ParallelStrategy):
            def setup_module(self, module): ...
        ```
    """

    is_parallel = True

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = timedelta(minutes=30),
        start_method: str = "popen",
    ) -> None:
        super().__init__(accelerator=accelerator, precision=precision)
        if start_method not in _START_METHODS:
            raise MisconfigurationError(
                f"start_method={start_method!r} is not supported; choose one of {list(_START_METHODS)}."
            )
        self.parallel_devices = parallel_devices or []
        self.cluster_environment = cluster_environment
        self.num_nodes = 1
        if process_group_backend == "auto":
            process_group_backend = None
        if process_group_backend is not None and process_group_backend not in _BACKENDS:
            raise MisconfigurationError(
                f"process_group_backend={process_group_backend!r} is not a torch.distributed backend. Use "
                f"'auto' (gloo on CPU, nccl on CUDA) or one of {list(_BACKENDS)}."
            )
        self._process_group_backend = process_group_backend
        if timeout is not None and not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=float(timeout))
        self._timeout = timeout
        self._start_method = start_method

    def configure(self, parallel_devices: list[torch.device], num_nodes: int, cluster_environment: Any) -> None:
        """Receive the layout chosen by the connector and pick a launcher."""
        from fabricx.environments.detect import detect_cluster_environment

        self.parallel_devices = parallel_devices
        self.num_nodes = num_nodes
        if cluster_environment is not None:
            self.cluster_environment = cluster_environment
        if self.cluster_environment is None:
            self.cluster_environment = detect_cluster_environment()
        self.cluster_environment.validate_settings(len(parallel_devices), num_nodes)
        self._configure_launcher()

    def _configure_launcher(self) -> None:
        from fabricx.strategies.launchers.multiprocessing import MultiprocessingLauncher
        from fabricx.strategies.launchers.subprocess_script import SubprocessScriptLauncher

        if self.cluster_environment.creates_processes_externally:
            self._launcher = None
        elif self._start_method == "popen":
            self._launcher = SubprocessScriptLauncher(self.cluster_environment, self.num_processes, self.num_nodes)
        else:
            self._launcher = MultiprocessingLauncher(self, start_method=self._start_method)

    # -- where this process is --------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        return len(self.parallel_devices) if self.parallel_devices else 1

    @property
    def _layout_is_ours(self) -> bool:
        # fabricx's own launcher: ranks follow from devices x nodes. Other launchers dictate them.
        from fabricx.environments.local import LocalEnvironment

        return self.cluster_environment is None or isinstance(self.cluster_environment, LocalEnvironment)

    @property
    def world_size(self) -> int:
        if self._layout_is_ours:
            return self.num_processes * self.num_nodes
        return self.cluster_environment.world_size()

    @property
    def global_rank(self) -> int:
        if self._layout_is_ours:
            return self.node_rank * self.num_processes + self.local_rank
        return self.cluster_environment.global_rank()

    @property
    def local_rank(self) -> int:
        env = self.cluster_environment
        return env.local_rank() if env is not None else 0

    @property
    def node_rank(self) -> int:
        env = self.cluster_environment
        return env.node_rank() if env is not None else 0

    @property
    def root_device(self) -> torch.device:
        if not self.parallel_devices:
            return torch.device("cpu")
        return self.parallel_devices[self.local_rank % len(self.parallel_devices)]

    @property
    def is_distributed(self) -> bool:
        return True

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def process_group_backend(self) -> str:
        """The ``torch.distributed`` backend: the one given, else nccl on CUDA and gloo elsewhere."""
        if self._process_group_backend is not None:
            return self._process_group_backend
        return "nccl" if self.root_device.type == "cuda" else "gloo"

    @property
    def timeout(self) -> timedelta | None:
        """How long a collective waits for the other ranks before the job fails."""
        return self._timeout

    # -- process group ---------------------------------------------------------------------------------
    def setup_environment(self) -> None:
        super().setup_environment()
        self._init_process_group()

    def _init_process_group(self) -> None:
        env = self.cluster_environment
        env.set_world_size(self.world_size)
        env.set_global_rank(self.global_rank)
        set_global_rank(self.global_rank)
        if dist.is_initialized():
            # Joining a group made elsewhere (a second Fabric, the user's own init): it must be ours in shape.
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.global_rank:
                raise MisconfigurationError(
                    f"A process group with world size {dist.get_world_size()} (this process: rank "
                    f"{dist.get_rank()}) already exists, but this strategy expects world size "
                    f"{self.world_size} and rank {self.global_rank}. Give Fabric the same devices and "
                    "num_nodes as that group, "
                    "or destroy it first (torch.distributed.destroy_process_group())."
                )
            return
        if self.process_group_backend == "nccl" and self.root_device.type != "cuda":
            raise MisconfigurationError(
                f"process_group_backend='nccl' needs CUDA devices, but this process runs on "
                f"{self.root_device}. Use process_group_backend='gloo' (or 'auto') on CPU."
            )
        os.environ["MASTER_ADDR"] = env.main_address
        os.environ["MASTER_PORT"] = str(env.main_port)
        kwargs: dict[str, Any] = {}
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        if self.root_device.type == "cuda":
            kwargs["device_id"] = self.root_device
        global _GROUPS_CREATED
        if _GROUPS_CREATED:
            # A second group in this process (e.g. a new Fabric after end_training()): torchrun's store still
            # holds the first group's keys, so this group's keys get a prefix of their own.
            from torch.distributed.distributed_c10d import PrefixStore
            from torch.distributed.rendezvous import rendezvous

            store, _, _ = next(rendezvous("env://", rank=self.global_rank, world_size=self.world_size))
            kwargs["store"] = PrefixStore(f"fabricx_group_{_GROUPS_CREATED}", store)
        dist.init_process_group(self.process_group_backend, rank=self.global_rank, world_size=self.world_size, **kwargs)
        _GROUPS_CREATED += 1
        # A group fabricx created is also released by fabricx before the interpreter exits.
        register_release_at_exit()

    def teardown(self) -> None:
        super().teardown()
        release_process_group(wait_for_peers=False)
        if self.cluster_environment is not None:
            self.cluster_environment.teardown()

    # -- collectives -------------------------------------------------------------------------------------
    def barrier(self, name: str | None = None) -> None:
        if not dist.is_initialized():
            return
        if self.process_group_backend == "nccl":
            dist.barrier(device_ids=[self.root_device.index])
        else:
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send ``obj`` from rank ``src`` to every rank. A tensor arrives on this rank's device with
        the source's shape and dtype, whatever the other ranks passed in; anything else is pickled.
        """
        if not dist.is_initialized():
            return obj
        source = dist.get_rank() == src
        # Only the source's argument counts, so the others learn first whether a tensor follows.
        holder = [_TensorHeader(obj) if isinstance(obj, Tensor) else obj] if source else [None]
        dist.broadcast_object_list(holder, src=src, device=self._object_device())
        received = holder[0]
        if not isinstance(received, _TensorHeader):
            return received
        if source:
            tensor = obj.detach().to(self.root_device, memory_format=torch.contiguous_format, copy=True)
        else:
            tensor = torch.empty(received.shape, dtype=received.dtype, device=self.root_device)
        dist.broadcast(tensor, src=src)
        return tensor

    def _object_device(self) -> torch.device | None:
        return self.root_device if self.process_group_backend == "nccl" else None

    def all_reduce(self, tensor: Tensor, group: Any = None, reduce_op: Any = "mean") -> Tensor:
        """Reduce a tensor over ranks in place and return it, as Lightning Fabric does: ``"mean"`` (or
        ``"avg"``), ``"sum"``, ``"min"``, ``"max"``, or a ``torch.distributed.ReduceOp``.

        The result is written into ``tensor`` (its dtype kept: a mean of integers is truncated, as in
        Lightning), so code that ignores the return value still sees the reduced value.
        """
        if not dist.is_initialized():
            return tensor
        op, divide = _reduce_op(reduce_op)
        target = tensor.detach()
        # NCCL reads only CUDA memory: reduce a copy on the device, then write it back into the input.
        result = self._to_comm_device(target)
        dist.all_reduce(result, op=op, group=group)
        if divide:
            if torch.is_floating_point(result) or torch.is_complex(result):
                result.div_(dist.get_world_size(group))
            else:
                result.copy_(result / dist.get_world_size(group))
        if result is not target:
            target.copy_(result)
        return tensor

    def _to_comm_device(self, tensor: Tensor) -> Tensor:
        # NCCL reads only CUDA memory; gloo takes tensors where they are.
        tensor = tensor.detach()
        if self.process_group_backend == "nccl" and tensor.device != self.root_device:
            tensor = tensor.to(self.root_device)
        return tensor

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor | list[Tensor]:
        """Gather from every rank. Equal shapes give a tensor stacked along a new first dimension;
        shapes that differ across ranks (same number of dimensions) give a list with each rank's tensor.
        ``sync_grads=True`` lets gradients flow back through an equal-shape gather.
        """
        if not dist.is_initialized():
            return tensor  # one process: no new dimension, as Lightning Fabric
        world = dist.get_world_size(group)
        tensor = (tensor if sync_grads else self._to_comm_device(tensor)).contiguous()
        shape = torch.tensor(list(tensor.shape) or [1], device=self.root_device, dtype=torch.long)
        ndim = torch.tensor([tensor.dim()], device=self.root_device)
        ndims = [torch.zeros_like(ndim) for _ in range(world)]
        dist.all_gather(ndims, ndim, group=group)
        if len({int(n) for n in ndims}) != 1:
            raise ValueError(
                "all_gather got tensors with different numbers of dimensions across ranks "
                f"({[int(n) for n in ndims]}). Give every rank a tensor with the same number of dimensions."
            )
        shapes = [torch.zeros_like(shape) for _ in range(world)]
        dist.all_gather(shapes, shape, group=group)
        if all(torch.equal(s, shape) for s in shapes):
            if sync_grads:
                from torch.distributed.nn.functional import all_gather as differentiable_all_gather

                return torch.stack(differentiable_all_gather(tensor, group=group or dist.group.WORLD))
            gathered = [torch.empty_like(tensor) for _ in range(world)]
            dist.all_gather(gathered, tensor, group=group)
            return torch.stack(gathered)
        # Unequal shapes: pad every dimension to the largest, gather, trim each back (no gradient flows).
        max_shape = torch.stack(shapes).max(dim=0).values.tolist()
        padded = tensor.new_zeros(max_shape)
        padded[tuple(slice(0, n) for n in tensor.shape)] = tensor.detach()
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=group)
        return [g[tuple(slice(0, int(n)) for n in s)] for g, s in zip(gathered, shapes, strict=True)]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(devices={len(self.parallel_devices)}, num_nodes={self.num_nodes}, "
            f"start_method={self._start_method!r})"
        )
