"""Fully sharded data parallel on PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) and DTensor."""

from __future__ import annotations

import contextlib
import weakref
from abc import abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.accelerators.accelerator import Accelerator
from fabricx.checkpoint.contents import EntryStorage, unwrap_object
from fabricx.checkpoint.sharded import META_KEY as SHARDED_META_KEY
from fabricx.precision.precision import Precision
from fabricx.strategies.mesh import MeshLayout
from fabricx.strategies.parallel import ParallelStrategy
from fabricx.strategies.strategy import local_tensor, optimizer_parameters
from fabricx.utilities.exceptions import CheckpointError, FabricxError, MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: ``sharding_strategy`` names (Lightning's, from FSDP1) -> (hybrid mesh?, reshard after forward?).
SHARDING_STRATEGIES: dict[str, tuple[bool, bool]] = {
    "FULL_SHARD": (False, True),
    "SHARD_GRAD_OP": (False, False),
    "NO_SHARD": (True, False),
    "HYBRID_SHARD": (True, True),
    "_HYBRID_SHARD_ZERO2": (True, False),
}
STATE_DICT_TYPES = ("sharded", "full")
# FSDP1 constructor options that have no FSDP2 counterpart; accepted (for drop-in scripts) and ignored.
_FSDP1_ONLY = frozenset(
    {"use_orig_params", "limit_all_gathers", "sync_module_states", "forward_prefetch", "backward_prefetch"}
)


class DTensorStrategy(ParallelStrategy):
    """What FSDP2 and tensor parallelism share: parameters become DTensors when the module is set up.

    Optimizers must be built over the sharded parameters (``setup(model, opt)`` rebuilds them),
    gradient clipping reduces over the shards, and checkpoints are sharded (DCP) or full.
    """

    requires_optimizer_after_module = True
    shards_parameters = True

    def __init__(self, *parallel: Any, state_dict_type: str = "sharded") -> None:
        # `parallel`: ParallelStrategy's arguments, in its order (each subclass spells them out for its users).
        super().__init__(*parallel)
        if state_dict_type not in STATE_DICT_TYPES:
            raise MisconfigurationError(
                f"state_dict_type={state_dict_type!r}; choose 'sharded' (every rank writes its shards, "
                "torch.distributed.checkpoint) or 'full' (one consolidated state written by rank 0)."
            )
        self._state_dict_type = state_dict_type
        self._device_mesh: Any = None
        self._init_registries()

    def _init_registries(self) -> None:
        # Live sharded modules, the module each set-up optimizer belongs to, each module's FSDP units.
        self._modules: weakref.WeakSet[Module] = weakref.WeakSet()
        self._optimizer_modules: weakref.WeakKeyDictionary[Optimizer, Module] = weakref.WeakKeyDictionary()
        self._sync_modules: weakref.WeakKeyDictionary[Module, list[Module]] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        # Sent to spawned processes before anything is set up; meshes and weak registries stay behind.
        state = dict(self.__dict__)
        for key in ("_modules", "_optimizer_modules", "_sync_modules", "_device_mesh"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._device_mesh = None
        self._init_registries()

    @property
    def state_dict_type(self) -> str:
        return self._state_dict_type

    # -- layout -----------------------------------------------------------------------------------------
    @abstractmethod
    def mesh_layout(self) -> MeshLayout | DeviceMesh:
        """The mesh this strategy lays parameters on: a layout to build, or a mesh the user built.

        Raises `MisconfigurationError` for a layout the job's ranks cannot form, so `configure` refuses it
        once in the launching process rather than inside every rank."""

    def configure(self, parallel_devices: list[torch.device], num_nodes: int, cluster_environment: Any) -> None:
        super().configure(parallel_devices, num_nodes, cluster_environment)
        self.mesh_layout()

    def setup_environment(self) -> None:
        super().setup_environment()
        layout = self.mesh_layout()
        self._device_mesh = layout.build(self.root_device.type) if isinstance(layout, MeshLayout) else layout

    @property
    def device_mesh(self) -> Any:
        """The ``DeviceMesh`` parameters are laid out on (exists once the processes are launched)."""
        if self._device_mesh is None:
            raise FabricxError(
                f"{type(self).__name__}.device_mesh exists once the processes run: call fabric.launch() first."
            )
        return self._device_mesh

    # -- precision --------------------------------------------------------------------------------------
    def build_precision(self, name: str, device_type: str) -> Precision:
        if name in ("16-mixed", "bf16-mixed"):
            from fabricx.precision.fsdp import FSDPPrecision

            return FSDPPrecision(name, device="cuda" if device_type == "cuda" else device_type)
        return super().build_precision(name, device_type)

    def validate_precision(self, precision: Precision) -> None:
        from fabricx.precision.amp import MixedPrecision
        from fabricx.precision.fsdp import FSDPPrecision

        if isinstance(precision, MixedPrecision) and not isinstance(precision, FSDPPrecision):
            raise MisconfigurationError(
                f"{type(self).__name__} got the precision plugin {type(precision).__name__}({precision.precision!r}), "
                "whose grad scaler and dtypes do not know about sharded parameters. Pass "
                f"precision={precision.precision!r} as a flag, or plugins=FSDPPrecision({precision.precision!r})."
            )

    # -- modules and optimizers -------------------------------------------------------------------------
    @abstractmethod
    def _shard(self, module: Module) -> Module:
        """Apply this strategy's sharding (FSDP2, or the user's parallelize function) to ``module``."""

    def setup_module(self, module: Module) -> Module:
        module = self._shard(module)
        self._modules.add(module)
        self._sync_modules[module] = _fsdp_modules(module)
        return module

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        self._optimizer_modules[optimizer] = self._module_of(optimizer)
        return optimizer

    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        names = {id(p): name for name, p in module.named_parameters()}
        for optimizer in optimizers:
            _check_rebuildable(optimizer, names, type(self).__name__)
        module = self.setup_module(module)
        params = dict(module.named_parameters())
        current = {id(p) for p in params.values()}
        outputs = []
        for optimizer in optimizers:
            if not all(id(p) in current for p in optimizer_parameters(optimizer)):  # not yet over the shards
                _rebuild_optimizer(optimizer, names, params, type(self).__name__)
            outputs.append(self.setup_optimizer(optimizer))
        return module, outputs, scheduler

    def _module_of(self, optimizer: Optimizer) -> Module:
        wanted = {id(p) for p in optimizer_parameters(optimizer)}
        for module in list(self._modules):
            if wanted <= {id(p) for p in module.parameters()}:
                return module
        raise FabricxError(
            f"The optimizer {type(optimizer).__name__} holds parameters that are not the sharded parameters of "
            f"a model set up with {type(self).__name__}; it was probably created before the model was sharded. "
            "Create it afterwards: `model = fabric.setup_module(model)`, then "
            "`optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters()))`, or pass both to "
            "`fabric.setup(model, optimizer)` so the optimizer is rebuilt over the sharded parameters."
        )

    # -- backward ---------------------------------------------------------------------------------------
    def no_backward_sync(self, module: Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        if not enabled:
            return contextlib.nullcontext()
        fsdp_modules = self._sync_modules.get(module)
        return _gradient_sync_off(_fsdp_modules(module) if fsdp_modules is None else fsdp_modules)

    def _clip_grad_norm(self, *args: Any) -> Tensor:
        return clip_grad_norm_(*args)  # over the shards, each mesh's norm counted once

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float) -> None:
        self.precision.unscale_gradients(optimizer)
        with torch.no_grad():
            for param in optimizer_parameters(optimizer):
                if param.grad is not None:
                    local_tensor(param.grad).clamp_(min=-clip_val, max=clip_val)

    # -- state dicts (full form, so they load into unsharded objects too) ---------------------------------
    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        if not _is_sharded(module):
            return super().get_module_state_dict(module)
        from fabricx.checkpoint.sharded import get_model_state

        return get_model_state(module, full=True)

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        if not _is_sharded(module):
            return super().load_module_state_dict(module, state_dict, strict=strict)
        from fabricx.checkpoint.sharded import set_model_state

        return set_model_state(module, state_dict, full=True, strict=strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        module = self._optimizer_modules.get(optimizer)
        if module is None:
            return super().get_optimizer_state(optimizer)
        from fabricx.checkpoint.sharded import get_optimizer_state

        return get_optimizer_state(module, optimizer, full=True)

    def load_optimizer_state(self, optimizer: Optimizer, state_dict: dict[str, Any]) -> None:
        module = self._optimizer_modules.get(optimizer)
        if module is None:
            return super().load_optimizer_state(optimizer, state_dict)
        from fabricx.checkpoint.sharded import set_optimizer_state

        set_optimizer_state(module, optimizer, state_dict, full=True)
        return None

    def get_gradient_state(self, module: Module) -> dict[str, Any]:
        """Sharded gradients (``param.grad``) plus, inside a window without gradient sync, each FSDP2
        parameter's unsharded accumulated gradient, which lives outside ``param.grad``."""
        from fabricx._compat.torch_internals import unsharded_accumulated_grad

        sharded = super().get_gradient_state(module)
        unsharded = {}
        for name, fsdp_param in _fsdp_params(module):
            grad = unsharded_accumulated_grad(fsdp_param)
            if grad is not None:
                unsharded[name] = local_tensor(grad).detach()
        if not sharded and not unsharded:
            return {}
        return {"sharded": sharded, "unsharded": unsharded}

    def load_gradient_state(self, module: Module, state: dict[str, Any]) -> None:
        super().load_gradient_state(module, state.get("sharded") or {})
        unsharded = state.get("unsharded") or {}
        for name, fsdp_param in _fsdp_params(module):
            saved = unsharded.get(name)
            # FSDP2 adds the next backward's gradient to this buffer and reduce-scatters the sum at the boundary
            # (saved in the dtype it had: the reduce dtype under mixed precision, else the parameter's).
            fsdp_param.unsharded_accumulated_grad = (
                None if saved is None else saved.to(device=fsdp_param.sharded_param.device)
            )

    # -- checkpoints --------------------------------------------------------------------------------------
    def checkpoint_storage(self) -> Any:
        """Sharded modules and their optimizers go to a DCP folder, every rank writing its own shards
        (``state_dict_type="sharded"``); with ``"full"`` everything takes the shared layout."""
        if self._state_dict_type == "full":
            return None
        return _ShardedEntries(self)


class _ShardedEntries(EntryStorage):
    """DTensor shards of sharded modules and of their optimizers, written with torch.distributed.checkpoint."""

    meta_key = SHARDED_META_KEY

    def __init__(self, strategy: DTensorStrategy) -> None:
        self.strategy = strategy

    def _kind(self, obj: Any) -> str | None:
        target = unwrap_object(obj)
        if isinstance(target, Module) and _is_sharded(target):
            return "model"
        if isinstance(target, Optimizer) and target in self.strategy._optimizer_modules:
            return "optimizer"
        return None

    def claims(self, key: str, obj: Any) -> bool:
        return self._kind(obj) is not None

    def record(self, entries: dict[str, Any]) -> dict[str, Any]:
        from fabricx.checkpoint.sharded import sharded_record

        return sharded_record({key: kind for key, obj in entries.items() if (kind := self._kind(obj)) is not None})

    def save(self, staging: Any, entries: dict[str, Any], filter: Any) -> dict[str, Any]:
        from fabricx.checkpoint.sharded import REST_KEY, write_sharded

        return {REST_KEY: write_sharded(staging, self._sharded(entries, filter))}

    def save_async(self, staging: Any, entries: dict[str, Any], filter: Any, group: Any) -> Any:
        """Like `save()`, but the shards are staged now and written in the background (DCP async_save)."""
        from fabricx.checkpoint.sharded import write_sharded_async

        return write_sharded_async(staging, self._sharded(entries, filter), group)

    def sharded_state_dicts(self, entries: dict[str, Any], filter: Any) -> dict[str, dict[str, Any]]:
        return self._sharded(entries, filter)

    def _sharded(self, entries: dict[str, Any], filter: Any) -> dict[str, Any]:
        """The live (sharded) state of each claimed entry, a model's filtered by ``filter``."""
        sharded = {}
        for key, obj in entries.items():
            value = self._live_state(obj)
            if filter and key in filter and self._kind(obj) == "model":
                value = {name: item for name, item in value.items() if filter[key](name, item)}
            sharded[key] = value
        return sharded

    def _live_state(self, obj: Any) -> dict[str, Any]:
        from fabricx.checkpoint.sharded import get_model_state, get_optimizer_state

        target = unwrap_object(obj)
        if self._kind(obj) == "model":
            return get_model_state(target, full=False)
        return get_optimizer_state(self.strategy._optimizer_modules[target], target, full=False)

    def load(self, loaded: Any, entries: dict[str, Any], strict: bool) -> None:
        from fabricx.checkpoint.sharded import (
            REST_KEY,
            load_sharded,
            set_model_state,
            set_optimizer_state,
            sharded_info,
        )

        info = sharded_info(loaded.meta)
        assert info is not None
        kinds = {key: info["entries"][key] for key in entries}
        for key, obj in entries.items():
            if self._kind(obj) != kinds[key]:
                what = "a model" if kinds[key] == "model" else "an optimizer set up with this strategy"
                raise CheckpointError(
                    f"The checkpoint {loaded.path} holds sharded {kinds[key]} state under {key!r}, but "
                    f"state[{key!r}] is {type(unwrap_object(obj)).__name__}; load it into {what}."
                )
        targets = {key: self._live_state(obj) for key, obj in entries.items()}
        directory = loaded.path / info["directory"]
        restored = load_sharded(directory, targets, loaded.shared.get(REST_KEY, {}), kinds, strict)
        for key, obj in entries.items():
            target = unwrap_object(obj)
            if kinds[key] == "model":
                set_model_state(target, restored[key], full=False, strict=strict)
            else:
                set_optimizer_state(self.strategy._optimizer_modules[target], target, restored[key], full=False)


class FSDPStrategy(DTensorStrategy):
    """Fully sharded data parallel with FSDP2: parameters, gradients and optimizer state are split
    across ranks and gathered per sharded submodule for forward and backward.

    Args:
        auto_wrap_policy: which submodules become their own FSDP unit (gathered and freed one at a
            time): a set of module classes, or a callable ``policy(module) -> bool``. The root module
            is always sharded.
        sharding_strategy: ``"FULL_SHARD"`` (free gathered parameters after forward),
            ``"SHARD_GRAD_OP"`` (keep them until backward: only gradients and optimizer state stay
            sharded), ``"HYBRID_SHARD"`` / ``"_HYBRID_SHARD_ZERO2"`` (shard within groups, replicate
            across them, on a 2-D mesh), ``"NO_SHARD"`` (replicate everything).
        device_mesh: for hybrid sharding, ``(replicate_groups, shard_group_size)`` or a 2-D ``DeviceMesh``;
            defaults to ``(num_nodes, devices_per_node)``.
        reshard_after_forward: overrides what ``sharding_strategy`` implies.
        cpu_offload: keep sharded parameters, gradients and optimizer state in CPU memory.
        mixed_precision: a ``torch.distributed.fsdp.MixedPrecisionPolicy``; by default derived from the
            precision flag (``"bf16-mixed"``: bf16 parameters for compute, float32 gradient reduction).
        activation_checkpointing_policy: module classes (or ``policy(module) -> bool``) whose
            activations are recomputed in backward instead of stored.
        state_dict_type: ``"sharded"`` (each rank writes its shards with torch.distributed.checkpoint)
            or ``"full"`` (rank 0 writes consolidated safetensors).
        **kwargs: passed to ``fully_shard`` (e.g. ``shard_placement_fn``, ``ignored_params``).

    Example:
        ```python
        strategy = FSDPStrategy(
            auto_wrap_policy={Block}, activation_checkpointing_policy={Block}
        )
        fabric = Fabric(accelerator="cuda", devices=8, strategy=strategy,
                        precision="bf16-mixed")
        ```
    """

    strategy_name = "fsdp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = timedelta(minutes=30),
        start_method: str = "popen",
        auto_wrap_policy: Iterable[type[Module]] | Callable[[Module], bool] | None = None,
        sharding_strategy: str = "FULL_SHARD",
        device_mesh: tuple[int, int] | Any = None,
        reshard_after_forward: bool | int | None = None,
        cpu_offload: bool = False,
        mixed_precision: Any = None,
        activation_checkpointing_policy: Iterable[type[Module]] | Callable[[Module], bool] | None = None,
        state_dict_type: str = "sharded",
        **kwargs: Any,
    ) -> None:
        parallel = (accelerator, parallel_devices, cluster_environment, precision, process_group_backend, timeout)
        super().__init__(*parallel, start_method, state_dict_type=state_dict_type)
        name = getattr(sharding_strategy, "name", sharding_strategy)  # FSDP1's ShardingStrategy enum too
        if not isinstance(name, str) or name.upper() not in SHARDING_STRATEGIES:
            raise MisconfigurationError(
                f"sharding_strategy={sharding_strategy!r} is not supported; choose one of {list(SHARDING_STRATEGIES)}."
            )
        self.sharding_strategy = name.upper()
        hybrid, reshard = SHARDING_STRATEGIES[self.sharding_strategy]
        if device_mesh is not None and not hybrid and self.sharding_strategy == "FULL_SHARD":
            hybrid = True  # a 2-D mesh asks for hybrid sharding
        self._hybrid = hybrid
        self._reshard_after_forward = reshard if reshard_after_forward is None else reshard_after_forward
        self._mesh_spec = _check_mesh_spec(device_mesh)
        # FSDP1's CPUOffload(offload_params=...) from a Lightning script means the same as the bool.
        self.cpu_offload = bool(getattr(cpu_offload, "offload_params", cpu_offload))
        self._mixed_precision = _as_mp_policy(mixed_precision)
        self._wrap_policy = _as_policy(auto_wrap_policy, "auto_wrap_policy")
        self._checkpoint_policy = _as_policy(activation_checkpointing_policy, "activation_checkpointing_policy")
        ignored = sorted(set(kwargs) & _FSDP1_ONLY)
        if ignored:
            rank_zero_warn(f"FSDPStrategy ignores {ignored}: they configure legacy FSDP1; fabricx runs FSDP2.")
        self._fully_shard_kwargs = {k: v for k, v in kwargs.items() if k not in _FSDP1_ONLY}
        _check_fully_shard_kwargs(self._fully_shard_kwargs)

    # -- environment ----------------------------------------------------------------------------------------
    def mesh_layout(self) -> MeshLayout | DeviceMesh:
        if self._mesh_spec is not None and not isinstance(self._mesh_spec, tuple):
            return self._mesh_spec  # a DeviceMesh built by the user
        shape = self._mesh_shape()
        return MeshLayout(shape, ("replicate", "shard") if len(shape) == 2 else None)

    def _mesh_shape(self) -> tuple[int, ...]:
        spec = self._mesh_spec
        if spec is not None and not isinstance(spec, tuple):
            return tuple(spec.shape)  # a DeviceMesh built by the user
        if not self._hybrid:
            return (self.world_size,)
        if self.sharding_strategy == "NO_SHARD":
            return (self.world_size, 1)
        shape = spec if spec is not None else (self.num_nodes, self.world_size // self.num_nodes)
        if shape[0] * shape[1] != self.world_size:
            raise MisconfigurationError(
                f"device_mesh={shape} has {shape[0] * shape[1]} ranks but the job has {self.world_size}. Give "
                "(replicate_groups, shard_group_size) whose product is the world size."
            )
        return shape

    # -- sharding -------------------------------------------------------------------------------------------
    def _shard(self, module: Module) -> Module:
        from torch.distributed.fsdp import fully_shard

        if _fsdp_modules(module):
            rank_zero_warn(
                "The model already has fully_shard applied; FSDPStrategy uses it as it is (its auto_wrap_policy, "
                "mixed precision and offload settings are not applied)."
            )
            return module
        if self._checkpoint_policy is not None:
            from fabricx._compat.activation_checkpoint import composable_checkpoint

            checkpoint = composable_checkpoint()
            for submodule in [m for m in module.modules() if self._checkpoint_policy(m)]:
                checkpoint(submodule)
        kwargs = self._shard_kwargs()
        if self._wrap_policy is not None:
            # Children before parents: a parent's unit must not take over its children's parameters.
            for submodule in reversed(list(module.modules())):
                if submodule is not module and self._wrap_policy(submodule):
                    fully_shard(submodule, **kwargs)
        fully_shard(module, **kwargs)
        return module

    def _shard_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"mesh": self.device_mesh, "reshard_after_forward": self._reshard_after_forward}
        policy = self._mixed_precision
        if policy is None:
            from fabricx.precision.fsdp import FSDPPrecision

            if isinstance(self.precision, FSDPPrecision):
                policy = self.precision.mixed_precision_policy()
        if policy is not None:
            kwargs["mp_policy"] = policy
        if self.cpu_offload:
            from torch.distributed.fsdp import CPUOffloadPolicy

            # Pinned memory needs an accelerator; on a CPU-only machine it is refused.
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self.root_device.type != "cpu")
        kwargs.update(self._fully_shard_kwargs)
        return kwargs

    @property
    def _materialize_device(self) -> torch.device:
        return torch.device("cpu") if self.cpu_offload else self.root_device

    def __repr__(self) -> str:
        return (
            f"FSDPStrategy(sharding_strategy={self.sharding_strategy!r}, cpu_offload={self.cpu_offload}, "
            f"state_dict_type={self._state_dict_type!r}, devices={len(self.parallel_devices)}, "
            f"num_nodes={self.num_nodes})"
        )


# ------------------------------------------------------------------------------------------------ helpers


def _as_policy(policy: Any, what: str) -> Callable[[Module], bool] | None:
    if policy is None:
        return None
    classes = getattr(policy, "_module_classes", None)  # torch's ModuleWrapPolicy, for drop-in scripts
    if classes is not None:
        policy = classes
    if isinstance(policy, type) and issubclass(policy, Module):
        policy = {policy}
    if isinstance(policy, set | frozenset | list | tuple):
        classes = tuple(policy)
        if not all(isinstance(c, type) and issubclass(c, Module) for c in classes):
            raise MisconfigurationError(f"{what}={policy!r} must hold torch.nn.Module subclasses.")
        return _ClassPolicy(classes)
    if callable(policy):
        return cast("Callable[[Module], bool]", policy)
    raise MisconfigurationError(
        f"{what}={policy!r}; give a set of module classes or a callable policy(module) -> bool."
    )


def _as_mp_policy(policy: Any) -> Any:
    if policy is None:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if isinstance(policy, MixedPrecisionPolicy):
        return policy
    if hasattr(policy, "param_dtype") and hasattr(policy, "reduce_dtype"):
        # FSDP1's MixedPrecision config (Lightning scripts): the same two dtypes; buffers stay as they are.
        return MixedPrecisionPolicy(param_dtype=policy.param_dtype, reduce_dtype=policy.reduce_dtype)
    raise MisconfigurationError(
        f"mixed_precision={policy!r}; give a torch.distributed.fsdp.MixedPrecisionPolicy (or leave it None and "
        "use the precision flag, e.g. precision='bf16-mixed')."
    )


class _ClassPolicy:
    """``policy(module) -> bool`` for a set of module classes (picklable, for spawned processes)."""

    def __init__(self, classes: tuple[type[Module], ...]) -> None:
        self.classes = classes

    def __call__(self, module: Module) -> bool:
        return isinstance(module, self.classes)


def _check_mesh_spec(spec: Any) -> Any:
    if spec is None or hasattr(spec, "mesh"):  # None or a DeviceMesh
        if spec is not None and spec.ndim != 2:
            raise MisconfigurationError(f"device_mesh must be 2-D (replicate, shard); got {spec.ndim} dimension(s).")
        return spec
    if (
        isinstance(spec, tuple | list)
        and len(spec) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in spec)
    ):
        return tuple(spec)
    raise MisconfigurationError(
        f"device_mesh={spec!r}; give (replicate_groups, shard_group_size) as two positive ints, or a 2-D DeviceMesh."
    )


def _check_fully_shard_kwargs(kwargs: dict[str, Any]) -> None:
    import inspect

    from torch.distributed.fsdp import fully_shard

    allowed = set(inspect.signature(fully_shard).parameters) - {"module", "mesh", "reshard_after_forward"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise MisconfigurationError(
            f"FSDPStrategy got unknown option(s) {unknown}. Options passed on to fully_shard: {sorted(allowed)}; "
            "see FSDPStrategy's own arguments for the rest."
        )


def _check_rebuildable(optimizer: Optimizer, names: dict[int, str], strategy: str) -> None:
    if optimizer.state:
        raise FabricxError(
            f"{strategy} shards the model in setup() and must rebuild the optimizer {type(optimizer).__name__} "
            f"over the sharded parameters, but it has already taken steps (state for {len(optimizer.state)} "
            "parameter(s) that refers to the unsharded ones). Set up the model first: `model = "
            "fabric.setup_module(model)`, then create the optimizer from model.parameters() and call "
            "fabric.setup_optimizers(optimizer); load earlier optimizer state with fabric.load afterwards."
        )
    for group in optimizer.param_groups:
        for param in group["params"]:
            if id(param) not in names:
                raise FabricxError(
                    f"The optimizer {type(optimizer).__name__} holds a parameter that is not in the model; "
                    f"{strategy} cannot rebuild it over the sharded parameters."
                )


def _rebuild_optimizer(
    optimizer: Optimizer, names: dict[int, str], params: Mapping[str, Tensor], strategy: str
) -> None:
    """Rebuild ``optimizer`` in place over the sharded parameters: the same class and hyper-parameters (group by
    group), made by its constructor, then moved into the user's object. Whatever holds that object (a scheduler
    created before setup, the user's own name for it) drives the optimizer the run steps, as with Lightning's
    FSDP, which keeps the original parameters and so the user's optimizer."""
    groups = []
    for group in optimizer.param_groups:
        hyper = {key: value for key, value in group.items() if key != "params"}
        groups.append({**hyper, "params": [params[names[id(p)]] for p in group["params"]]})
    cls = type(optimizer)
    errors = []
    # Param groups carry every hyper-parameter, so the constructor's own defaults usually suffice.
    for kwargs in ({}, dict(optimizer.defaults)):
        try:
            rebuilt = cls([dict(g) for g in groups], **kwargs)
            break
        except TypeError as error:
            errors.append(error)
    else:
        raise FabricxError(
            f"{strategy} shards the model in setup() and must rebuild the optimizer {cls.__name__} over the "
            f"sharded parameters, but {cls.__name__}(param_groups) fails ({errors[-1]}). Set up the model first: "
            "`model = fabric.setup_module(model)`, then build the optimizer from model.parameters() and call "
            "`fabric.setup_optimizers(optimizer)`."
        )
    rebuilt.defaults = dict(optimizer.defaults)
    for new, old in zip(rebuilt.param_groups, groups, strict=True):
        new.update({key: value for key, value in old.items() if key != "params"})
    # Hooks the user registered, and the step tracking a scheduler installed on the instance, stay.
    kept = {key for key in vars(optimizer) if key == "step" or key.endswith("_hooks")}
    for key, value in vars(rebuilt).items():
        if key not in kept:
            setattr(optimizer, key, value)


def _fsdp_modules(module: Module) -> list[Module]:
    """``module`` and its submodules that ``fully_shard`` made FSDP units (torch's ``FSDPModule``)."""
    from torch.distributed.fsdp import FSDPModule

    return [submodule for submodule in module.modules() if isinstance(submodule, FSDPModule)]


def _fsdp_params(module: Module) -> list[tuple[str, Any]]:
    """(parameter name in ``module``, FSDP2's FSDPParam) for every sharded parameter under ``module``."""
    from fabricx._compat.torch_internals import fsdp_params_of

    names = {id(param): name for name, param in module.named_parameters()}
    found = []
    for submodule in _fsdp_modules(module):
        for fsdp_param in fsdp_params_of(submodule):
            name = names.get(id(fsdp_param.sharded_param))
            if name is not None:
                found.append((name, fsdp_param))
    return found


@contextlib.contextmanager
def _gradient_sync_off(fsdp_modules: Sequence[Any]) -> Generator[None, None, None]:
    # FSDPModule instances (torch's FSDP2 mixin): their set_requires_gradient_sync turns the reduction off.
    for module in fsdp_modules:
        module.set_requires_gradient_sync(False, recurse=False)
    try:
        yield
    finally:
        for module in fsdp_modules:
            module.set_requires_gradient_sync(True, recurse=False)


def clip_grad_norm_(
    parameters: Iterable[Tensor], max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = True
) -> Tensor:
    """Clip (possibly sharded) gradients to a global norm and return that norm, like ``torch.nn.utils.clip_grad_norm_``.

    Gradients are grouped by device mesh and placement; each group's norm is reduced over its mesh,
    so parameters sharded on different meshes (FSDP x TP) count exactly once.

    Example:
        ```python
        total = clip_grad_norm_(model.parameters(), max_norm=1.0)
        ```
    """
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    groups: dict[Any, list[Tensor]] = {}
    for grad in grads:
        key = (grad.device_mesh, tuple(grad.placements)) if isinstance(grad, DTensor) else None
        groups.setdefault(key, []).append(grad)
    norm_type = float(norm_type)
    norms = []
    for group in groups.values():
        norm = torch.nn.utils.get_total_norm(group, norm_type)
        norms.append((norm.full_tensor() if isinstance(norm, DTensor) else norm).float())
    device = norms[0].device
    stacked = torch.stack([n.to(device) for n in norms])
    total = stacked.max() if norm_type == float("inf") else torch.linalg.vector_norm(stacked, norm_type)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError(
            f"The total gradient norm (order {norm_type}) is {total.item()}, so the gradients cannot be clipped. "
            "Find the source of the inf/NaN, or pass error_if_nonfinite=False to clip anyway."
        )
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for grad in grads:
            local = local_tensor(grad)
            local.mul_(coefficient.to(device=local.device, dtype=local.dtype))
    return total


def _is_sharded(module: Module) -> bool:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    # An FSDP2 module left unsharded (an exception between its forward and backward) holds plain parameters, and
    # its state dict is still sharded.
    return any(isinstance(p, DTensor) for p in module.parameters()) or any(
        isinstance(m, FSDPModule) for m in module.modules()
    )


__all__ = ["SHARDING_STRATEGIES", "STATE_DICT_TYPES", "FSDPStrategy", "clip_grad_norm_"]
