"""DeepSpeed: ZeRO stages 0-3 (sharded optimizer state, gradients, parameters), offloading, fp16/bf16.

``deepspeed`` is imported only once processes exist (``setup_environment``) so that naming the
strategy costs nothing; without the package, constructing the strategy says how to install it.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import re
import warnings
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabricx._compat.deepspeed import all_zero_checkpoints, avoid_cpu_jit_builds, zero_param_shapes
from fabricx.accelerators.accelerator import Accelerator
from fabricx.checkpoint.contents import EntryStorage, unwrap_object
from fabricx.checkpoint.deepspeed_consolidate import ENGINE_FOLDER, META_KEY
from fabricx.checkpoint.fabric_state import CheckpointKeyError
from fabricx.precision.deepspeed import DEEPSPEED_PRECISIONS, DeepSpeedPrecision
from fabricx.precision.precision import Precision
from fabricx.strategies.deepspeed import config as ds_config
from fabricx.strategies.parallel import ParallelStrategy
from fabricx.utilities.exceptions import CheckpointError, FabricxError, MisconfigurationError
from fabricx.utilities.identity import facade_class
from fabricx.utilities.imports import rng_untouched

INSTALL_HINT = "pip install 'fabricx[deepspeed]'"
_TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# torch deprecated the collectives ZeRO calls inside every step; the warning is about DeepSpeed's code, not the
# user's, and DeepSpeed's calls reach torch through the same wrapper line as anyone's, so the filter names the
# exact messages (installed once, when a DeepSpeed strategy starts its processes).
_DEEPSPEED_COLLECTIVE_DEPRECATIONS = (
    r"`torch\.distributed\.all_gather_into_tensor` is deprecated",
    r"`torch\.distributed\.reduce_scatter_tensor` is deprecated",
)


def _hide_collective_deprecations() -> None:
    for message in _DEEPSPEED_COLLECTIVE_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)


def require_deepspeed() -> None:
    """Raise a clear error when the ``deepspeed`` package is not installed."""
    if importlib.util.find_spec("deepspeed") is None:
        raise ModuleNotFoundError(
            f"The DeepSpeed strategy needs the `deepspeed` package, which is not installed. Run `{INSTALL_HINT}` "
            "(on a CPU-only machine: DS_BUILD_OPS=0 and DS_ACCELERATOR=cpu)."
        )


class DeepSpeedStrategy(ParallelStrategy):
    """Train with a DeepSpeed engine: ZeRO sharding (stages 1-3), CPU/NVMe offloading, fp16/bf16.

    ``fabric.setup(model, optimizer)`` builds one engine per model; ``fabric.backward(loss)`` and
    ``optimizer.step()`` go through it, and calling ``loss.backward()`` yourself raises. Several models
    (e.g. a GAN) are set up with one ``fabric.setup`` call each; when more than one of them ran forward
    since its last backward, ``fabric.backward(loss, model=...)`` says which engine the loss belongs to.

    Args:
        zero_optimization: ZeRO on or off. Ignored when ``config`` is given.
        stage: the ZeRO stage (0-3). Ignored when ``config`` is given.
        offload_optimizer: move optimizer state (stage >= 1) to ``offload_optimizer_device`` (``"cpu"`` or
            ``"nvme"``).
        offload_parameters: move parameters (stage 3) to ``offload_params_device`` (``"cpu"`` or ``"nvme"``).
        remote_device: where ``fabric.init_module()`` under stage 3 puts partitions (default: the device).
        config: a DeepSpeed config dict or JSON file; it wins over the arguments above. fabricx adds the
            precision section, the micro-batch size, ``gradient_accumulation_steps`` and ``gradient_clipping``
            where the config leaves them out.
        logging_batch_size_per_gpu: micro-batch size reported to DeepSpeed (default: the first data loader's).
        gradient_accumulation_steps: let the engine accumulate: call ``fabric.backward`` and ``optimizer.step()``
            on every micro-batch and the engine steps every N-th time (alternative: ``Fabric(grad_accum_steps=N)``
            with ``fabric.accumulate``).
        gradient_clipping: clip the global gradient norm inside ``optimizer.step()`` (DeepSpeed clips, not
            ``fabric.clip_gradients``). Off unless given here or in the config (DeepSpeed alone would clip at 1.0).
        loss_scale: the fp16 loss scale (``0``: dynamic, as tuned by the four arguments below).
        initial_scale_power: a dynamic loss scale starts at ``2**initial_scale_power``.
        loss_scale_window: steps without an overflow before a dynamic loss scale grows.
        hysteresis: overflows tolerated before a dynamic loss scale shrinks.
        min_loss_scale: the smallest a dynamic loss scale gets.
        exclude_frozen_parameters: leave parameters with ``requires_grad=False`` out of checkpoints.
        start_method: as for `fabricx.strategies.DDPStrategy`.
        timeout: as for `fabricx.strategies.DDPStrategy`.
        process_group_backend: as for `fabricx.strategies.DDPStrategy`.

    On CPU, DeepSpeed's shared-memory all-reduce (a C++ op compiled on first use) is skipped: collectives
    go through gloo.

    Example:
        ```python
        fabric = Fabric(accelerator="cpu", devices=2, precision="bf16-mixed",
                        strategy=DeepSpeedStrategy(stage=3, gradient_clipping=1.0))
        fabric.launch()
        with fabric.init_module(empty_init=True):   # built partitioned across ranks
            model = Net()
        model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters()))
        ```
    """

    strategy_name = "deepspeed"
    requires_fabric_backward = True
    shards_parameters = True  # ZeRO may partition them (stage 3); Lightning treats every stage as sharded
    engine_owns_optimizer = True

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        zero_optimization: bool = True,
        stage: int = 2,
        remote_device: str | None = None,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        offload_params_device: str = "cpu",
        offload_optimizer_device: str = "cpu",
        nvme_path: str = "/local_nvme",
        pin_memory: bool = False,
        sub_group_size: int = 1_000_000_000,
        contiguous_gradients: bool = True,
        overlap_comm: bool = True,
        allgather_bucket_size: int = 200_000_000,
        reduce_bucket_size: int = 200_000_000,
        zero_allow_untested_optimizer: bool = True,
        logging_batch_size_per_gpu: int | None = None,
        config: dict[str, Any] | str | os.PathLike[str] | None = None,
        logging_level: int = logging.WARN,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        loss_scale: float = 0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        min_loss_scale: int = 1,
        partition_activations: bool = False,
        cpu_checkpointing: bool = False,
        contiguous_memory_optimization: bool = False,
        synchronize_checkpoint_boundary: bool = False,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = timedelta(minutes=30),
        start_method: str = "popen",
        exclude_frozen_parameters: bool = False,
        gradient_accumulation_steps: int | None = None,
        gradient_clipping: float | None = None,
    ) -> None:
        require_deepspeed()
        super().__init__(
            accelerator, parallel_devices, cluster_environment, precision, process_group_backend, timeout, start_method
        )
        if gradient_accumulation_steps is not None and (
            not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1
        ):
            raise MisconfigurationError(
                f"gradient_accumulation_steps={gradient_accumulation_steps!r} must be an int >= 1."
            )
        if gradient_clipping is not None and not gradient_clipping > 0:
            raise MisconfigurationError(f"gradient_clipping={gradient_clipping!r} must be a positive max norm.")
        user_config = ds_config.load_config(config)
        if user_config is None:
            user_config = ds_config.build_config(
                zero_optimization=zero_optimization,
                stage=stage,
                offload_optimizer=offload_optimizer,
                offload_parameters=offload_parameters,
                offload_optimizer_device=offload_optimizer_device,
                offload_params_device=offload_params_device,
                nvme_path=nvme_path,
                pin_memory=pin_memory,
                sub_group_size=sub_group_size,
                contiguous_gradients=contiguous_gradients,
                overlap_comm=overlap_comm,
                allgather_bucket_size=allgather_bucket_size,
                reduce_bucket_size=reduce_bucket_size,
                zero_allow_untested_optimizer=zero_allow_untested_optimizer,
                partition_activations=partition_activations,
                cpu_checkpointing=cpu_checkpointing,
                contiguous_memory_optimization=contiguous_memory_optimization,
                synchronize_checkpoint_boundary=synchronize_checkpoint_boundary,
            )
        self._config = user_config
        self._remote_device = remote_device or (offload_params_device if offload_parameters else None)
        self._pin_memory = pin_memory
        self._micro_batch_size = logging_batch_size_per_gpu
        self._gradient_accumulation_steps = gradient_accumulation_steps
        self._gradient_clipping = gradient_clipping
        self._loss_scaling = {
            "loss_scale": loss_scale,
            "initial_scale_power": initial_scale_power,
            "loss_scale_window": loss_scale_window,
            "hysteresis": hysteresis,
            "min_loss_scale": min_loss_scale,
        }
        self._logging_level = logging_level
        self._exclude_frozen_parameters = exclude_frozen_parameters
        self._reset_engines()

    def _reset_engines(self) -> None:
        self._engines: list[Any] = []
        # id(user's module) / id(engine) / id(user's optimizer) -> engine
        self._engine_by_module: dict[int, Any] = {}
        self._engine_by_optimizer: dict[int, Any] = {}
        # Engines whose forward built a graph that no fabric.backward has consumed yet.
        self._awaiting_backward: dict[int, Any] = {}
        self._in_fabric_backward = False

    def __getstate__(self) -> dict[str, Any]:
        # Spawned processes get the strategy before any engine exists; engines never travel.
        state = self.__dict__.copy()
        state.update(_engines=[], _engine_by_module={}, _engine_by_optimizer={}, _awaiting_backward={})
        return state

    # -- configuration -----------------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """The DeepSpeed config new engines are built from (before fabricx adds precision and batch settings)."""
        return self._config

    @property
    def zero_stage(self) -> int:
        return ds_config.zero_stage(self._config)

    def engine_config(self) -> dict[str, Any]:
        """The complete config the next engine gets: `config` plus precision, batch size,
        gradient accumulation and clipping.

        Example:
            ```python
            strategy.engine_config()["zero_optimization"]["stage"]  # 2
            ```
        """
        config = copy.deepcopy(self._config)
        ds_config.apply_precision(config, self.precision.precision, self._loss_scaling)
        ds_config.apply_training_settings(
            config,
            micro_batch_size=self._micro_batch_size,
            gradient_accumulation_steps=self._gradient_accumulation_steps,
            gradient_clipping=self._gradient_clipping,
        )
        return config

    def build_precision(self, name: str, device_type: str) -> Precision:
        if name not in DEEPSPEED_PRECISIONS:
            raise MisconfigurationError(
                f"precision={name!r} is not supported by the DeepSpeed strategy. Choose one of "
                f"{list(DEEPSPEED_PRECISIONS)}."
            )
        if name == "16-mixed" and device_type == "cpu" and not _cpu_supports_fp16():
            raise MisconfigurationError(
                "precision='16-mixed' with DeepSpeed on CPU needs fp16 kernels this CPU does not have (DeepSpeed's "
                "CPU accelerator refuses fp16 here). Use precision='bf16-mixed' or '32-true'."
            )
        return DeepSpeedPrecision(name)

    def validate_precision(self, precision: Precision) -> None:
        if not isinstance(precision, DeepSpeedPrecision):
            raise MisconfigurationError(
                f"The DeepSpeed engine handles precision itself; a {type(precision).__name__} plugin cannot drive "
                f"it. Pass precision=<one of {list(DEEPSPEED_PRECISIONS)}> to Fabric, or "
                "plugins=DeepSpeedPrecision(<that name>)."
            )

    def process_dataloader(self, dataloader: Any) -> Any:
        if self._micro_batch_size is None and getattr(dataloader, "batch_size", None):
            self._micro_batch_size = int(dataloader.batch_size)
        return dataloader

    # -- processes -------------------------------------------------------------------------------------
    def setup_environment(self) -> None:
        if self.root_device.type == "cpu":
            # DeepSpeed picks its accelerator once, on first use: make it match fabricx's choice.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        # deepspeed.initialize() insists on LOCAL_RANK, which only launchers set: a one-process run has none.
        os.environ.setdefault("LOCAL_RANK", str(self.local_rank))
        super().setup_environment()
        self._init_deepspeed_comm()

    def _init_deepspeed_comm(self) -> None:
        # The first import of DeepSpeed (and of the modules it loads on CPU) must leave the RNGs alone.
        with rng_untouched():
            import deepspeed
            from deepspeed.utils import logger as deepspeed_logger

            if self.root_device.type == "cpu":
                avoid_cpu_jit_builds()
        deepspeed_logger.setLevel(self._logging_level)
        _warn_if_untested_version(deepspeed.__version__)
        _hide_collective_deprecations()
        kwargs: dict[str, Any] = {"dist_init_required": False, "verbose": False}
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        # torch.distributed is initialised already; DeepSpeed wraps the existing process group.
        deepspeed.init_distributed(self.process_group_backend, **kwargs)

    # -- modules and optimizers ------------------------------------------------------------------------
    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Under ZeRO-3 (unless ``empty_init=False``) the model is built partitioned across ranks with
        ``deepspeed.zero.Init``; with other stages every rank builds the full model on its device."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.precision.module_init_context())
        if self.zero_stage == 3 and empty_init is not False:
            if not torch.distributed.is_initialized():
                raise FabricxError(
                    "fabric.init_module() under ZeRO-3 partitions the model across processes, which do not exist "
                    "yet. Call fabric.launch() first (or pass empty_init=False to build the full model here)."
                )
            import deepspeed

            stack.enter_context(
                deepspeed.zero.Init(
                    remote_device=self._remote_device,
                    pin_memory=self._pin_memory,
                    config_dict_or_path=self.engine_config(),
                )
            )
        else:
            stack.enter_context(self.root_device)
        return stack

    def module_to_device(self, module: Module) -> None:
        if _is_partitioned(module):
            return  # ZeRO-3 partitions live where deepspeed.zero.Init put them
        module.to(self.root_device)

    def materialize_module(self, module: Module) -> None:
        """Nothing to do: the engine owns the parameters' storage."""

    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        if len(optimizers) > 1:
            raise FabricxError(
                f"A DeepSpeed engine drives one model with one optimizer; fabric.setup() got {len(optimizers)} "
                "optimizers. Set up each model with its own optimizer, e.g. for a GAN "
                "`generator, opt_g = fabric.setup(generator, opt_g)` and "
                "`discriminator, opt_d = fabric.setup(discriminator, opt_d)`."
            )
        if not optimizers:
            return self._initialize_engine(module, None), [], scheduler
        optimizer = optimizers[0]
        engine = self._initialize_engine(module, optimizer)
        # The handle keeps the user's class, param_groups and lr; steps go through the engine. The scheduler
        # stays the user's: stepping it is their call, as with every other strategy.
        handle = _engine_optimizer_handle(optimizer)
        self._engine_by_optimizer[id(handle)] = engine
        return engine, [handle], scheduler

    def setup_module(self, module: Module) -> Module:
        """An engine without an optimizer (evaluation / inference; backward is refused)."""
        return self._initialize_engine(module, None)

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        raise FabricxError(
            "DeepSpeed builds its engine from the model and its optimizer together: call "
            "`model, optimizer = fabric.setup(model, optimizer)` instead of setup_module() followed by "
            "setup_optimizers()."
        )

    def _initialize_engine(self, module: Module, optimizer: Optimizer | None) -> Any:
        import deepspeed

        config = self.engine_config()
        if optimizer is None and ds_config.zero_stage(config) in (1, 2):
            # ZeRO 1/2 shard only optimizer state and gradients, and refuse an engine without an optimizer:
            # a forward-only engine is the same model without them.
            config["zero_optimization"] = {"stage": 0}
        engine, _, _, _ = deepspeed.initialize(
            model=module, optimizer=optimizer, config=config, dist_init_required=False
        )
        self._engines.append(engine)
        self._engine_by_module[id(module)] = engine
        self._engine_by_module[id(engine)] = engine
        if optimizer is not None:
            self._engine_by_optimizer[id(optimizer)] = engine
        engine.register_forward_hook(self._guard_outputs)
        return engine

    # -- backward and steps ----------------------------------------------------------------------------
    def _guard_outputs(self, engine: Module, args: Any, output: Any) -> None:
        # Outputs that carry a graph get a hook that refuses a backward pass not started by fabric.backward.
        if torch.is_grad_enabled():
            _hook_tensors(output, self._check_backward)
            self._awaiting_backward[id(engine)] = engine

    def _check_backward(self, grad: Tensor) -> None:
        if not self._in_fabric_backward:
            raise FabricxError(
                "loss.backward() was called on the output of a DeepSpeed model. The engine must run backward "
                "(it scales the loss and reduces sharded gradients): call fabric.backward(loss) instead."
            )

    def backward(self, tensor: Tensor, module: Module | None, *args: Any, **kwargs: Any) -> None:
        engine = self._engine_for_backward(module)
        self._in_fabric_backward = True
        try:
            engine.backward(tensor, *args, **kwargs)
        finally:
            self._in_fabric_backward = False
        self._awaiting_backward.pop(id(engine), None)

    def _engine_for_backward(self, module: Module | None) -> Any:
        if module is not None:
            engine = self._engine_of(module)
            if engine is None:
                raise FabricxError(
                    f"fabric.backward(model=...) got a {type(module).__name__} that was not set up by this DeepSpeed "
                    "strategy. Pass the model returned by fabric.setup()."
                )
        elif len(self._engines) == 1:
            engine = self._engines[0]
        elif not self._engines:
            raise FabricxError("fabric.backward() was called before any model was set up with fabric.setup().")
        elif len(self._awaiting_backward) == 1:
            # Only one model ran forward (with autograd) since its last backward: the loss is its.
            engine = next(iter(self._awaiting_backward.values()))
        else:
            raise FabricxError(
                f"{len(self._engines)} DeepSpeed models are set up and {len(self._awaiting_backward)} of them ran "
                "forward since their last backward, so the loss's model is ambiguous. Say which one this loss "
                "trains: fabric.backward(loss, model=generator)."
            )
        if engine.optimizer is None:
            raise FabricxError(
                "This model was set up without an optimizer (fabric.setup_module), so its DeepSpeed engine cannot "
                "run backward. Use `model, optimizer = fabric.setup(model, optimizer)`."
            )
        return engine

    def _engine_of(self, module: Any) -> Any:
        inner = getattr(module, "_forward_module", module)
        engine = self._engine_by_module.get(id(inner))
        if engine is None:
            engine = self._engine_by_module.get(id(getattr(module, "_original_module", module)))
        return engine

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        engine = self._engine_by_optimizer.get(id(optimizer))
        if engine is None:
            raise FabricxError(
                f"The optimizer {type(optimizer).__name__} does not belong to a DeepSpeed engine of this strategy; "
                "set it up together with its model: fabric.setup(model, optimizer)."
            )
        if "closure" in kwargs:
            raise FabricxError(
                "DeepSpeed's engine steps without a closure; compute the loss, call fabric.backward(loss), then "
                "optimizer.step()."
            )
        return engine.step(**kwargs)

    def no_backward_sync(self, module: Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        engine = self._engine_of(module) if enabled else None
        managed = getattr(engine, "managed_gradient_accumulation", None)  # DeepSpeed >= 0.19
        if engine is None or (managed is not None and not managed()):
            # Without managed accumulation every engine.step() is a boundary: nothing to switch off.
            return contextlib.nullcontext()
        return _off_accumulation_boundary(engine)

    def clip_gradients_norm(
        self,
        module: Module,
        optimizer: Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> Tensor:
        raise MisconfigurationError(
            "DeepSpeed clips gradients itself, inside optimizer.step() (the gradients are sharded). Remove the "
            f"fabric.clip_gradients() call and set DeepSpeedStrategy(gradient_clipping={max_norm}) or "
            f'"gradient_clipping": {max_norm} in the DeepSpeed config.'
        )

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float) -> None:
        raise MisconfigurationError(
            "DeepSpeed cannot clip gradients by value; it clips the global norm inside optimizer.step(). Set "
            "DeepSpeedStrategy(gradient_clipping=<max norm>) and remove the fabric.clip_gradients() call."
        )

    # -- state -----------------------------------------------------------------------------------------
    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        if not _is_partitioned(module):
            return module.state_dict()
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return {name: value.detach().clone() for name, value in module.state_dict().items()}

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        engine = self._engine_of(module)
        if _is_partitioned(module):
            import deepspeed

            # Every rank loads the full tensors; rank 0's copy is partitioned out again on exit.
            with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=0):
                result = module.load_state_dict(state_dict, strict=strict)
        else:
            result = module.load_state_dict(state_dict, strict=strict)
        refresh = getattr(getattr(engine, "optimizer", None), "refresh_fp32_params", None)
        if callable(refresh):
            refresh()  # the optimizer's fp32 master weights follow the loaded weights
        return result

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """This rank's shard of the optimizer state (ZeRO) or the optimizer's own state."""
        engine = self._engine_by_optimizer.get(id(optimizer))
        if engine is None:
            return optimizer.state_dict()
        return engine.optimizer.state_dict()

    def load_optimizer_state(self, optimizer: Optimizer, state_dict: dict[str, Any]) -> None:
        if id(optimizer) not in self._engine_by_optimizer:
            optimizer.load_state_dict(state_dict)
            return
        raise FabricxError(
            "The optimizer state of a DeepSpeed model is sharded by its engine and can only be restored from a "
            "checkpoint that engine wrote; this one holds a plain optimizer state (saved without DeepSpeed). Leave "
            "the optimizer out of the state to load the weights alone."
        )

    def get_gradient_state(self, module: Module) -> dict[str, Any]:
        """This rank's accumulated gradients inside a window (ZeRO-0/1: on the parameters; ZeRO-2: the
        optimizer's partitioned running sums) and the engine's micro-step; ZeRO-3 refuses (see
        `fabricx.strategies.deepspeed.window`)."""
        engine = self._engine_of(module)
        if engine is None:
            return super().get_gradient_state(module)
        from fabricx.strategies.deepspeed.window import engine_gradient_state

        return engine_gradient_state(engine, self.world_size)

    def load_gradient_state(self, module: Module, state: dict[str, Any]) -> None:
        engine = self._engine_of(module)
        if engine is None:
            super().load_gradient_state(module, state)
            return
        from fabricx.strategies.deepspeed.window import load_engine_gradient_state

        load_engine_gradient_state(engine, state, self.world_size)

    def check_mid_window_save(self, counter: int, window_length: int) -> None:
        from fabricx.strategies.deepspeed.window import refuse_mid_window

        for engine in self._engines:
            if engine.optimizer is not None:
                refuse_mid_window(engine)

    # -- checkpoints -----------------------------------------------------------------------------------
    def checkpoint_storage(self) -> Any:
        """Each engine writes its own model and optimizer shards under ``deepspeed/<key>/``; fabricx's
        state (loaders, RNG, plain values) takes the shared layout."""
        return _EngineEntries(self)

    def _split_engine_state(
        self, state: dict[str, Any], require_models: bool = True
    ) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
        """(model key -> engine, model key -> optimizer key, everything else)."""
        models: dict[str, Any] = {}
        optimizers: dict[int, str] = {}
        rest: dict[str, Any] = {}
        for key, obj in state.items():
            target = unwrap_object(obj)
            if isinstance(target, Module) and self._engine_of(obj) is not None:
                if not isinstance(key, str) or not _TAG_PATTERN.fullmatch(key):
                    raise CheckpointError(
                        f"The state key {key!r} of a DeepSpeed model names a folder of the checkpoint; use letters, "
                        "digits, '_', '.' or '-' (e.g. 'model')."
                    )
                models[key] = self._engine_of(obj)
            elif isinstance(target, Optimizer) and id(target) in self._engine_by_optimizer:
                optimizers[id(self._engine_by_optimizer[id(target)])] = key
            else:
                rest[key] = obj
        optimizer_keys: dict[str, str] = {}
        engines = {id(engine): key for key, engine in models.items()}
        for engine_id, optimizer_key in optimizers.items():
            if engine_id not in engines:
                if not require_models:
                    continue
                raise CheckpointError(
                    f"state[{optimizer_key!r}] is the optimizer of a DeepSpeed model that is not in the state. The "
                    "engine stores an optimizer with its model: add the model to the state too."
                )
            optimizer_keys[engines[engine_id]] = optimizer_key
        return models, optimizer_keys, rest

    def teardown(self) -> None:
        for engine in self._engines:
            destroy = getattr(engine, "destroy", None)
            if callable(destroy):
                destroy()
        self._reset_engines()
        super().teardown()

    def __repr__(self) -> str:
        return (
            f"DeepSpeedStrategy(stage={self.zero_stage}, devices={len(self.parallel_devices)}, "
            f"num_nodes={self.num_nodes}, start_method={self._start_method!r})"
        )


class _EngineEntries(EntryStorage):
    """DeepSpeed models (and their optimizers), stored by their engines' own ``save_checkpoint``."""

    meta_key = META_KEY
    full_state_in_one_file = False  # an engine's ZeRO optimizer state has no full form
    engine_folder_layout = "deepspeed"  # what Lightning's DeepSpeedStrategy.save_checkpoint writes

    def __init__(self, strategy: DeepSpeedStrategy) -> None:
        self.strategy = strategy

    def claims(self, key: str, obj: Any) -> bool:
        target = unwrap_object(obj)
        if isinstance(target, Module):
            return self.strategy._engine_of(obj) is not None
        return isinstance(target, Optimizer) and id(target) in self.strategy._engine_by_optimizer

    def check_filter(self, keys: list[str], filter: Any) -> None:
        if filter and any(key in filter for key in keys):
            raise FabricxError(
                "save(filter=...) cannot filter a DeepSpeed model or optimizer: the engine writes its shards whole. "
                "Filter other entries, or export the weights after consolidation."
            )

    def record(self, entries: dict[str, Any]) -> dict[str, Any]:
        models, optimizer_keys, _ = self.strategy._split_engine_state(entries)
        engines = list(models.values())
        return {
            "zero_stage": self.strategy.zero_stage,
            "elastic_checkpoint": bool(engines) and all(_elastic_engine(engine) for engine in engines),
            "models": {key: {"optimizer": optimizer_keys.get(key)} for key in models},
        }

    def save(self, staging: Any, entries: dict[str, Any], filter: Any) -> dict[str, Any]:
        self._save_engines(staging, entries, lambda engine: contextlib.nullcontext())
        return {}

    def save_async(self, staging: Any, entries: dict[str, Any], filter: Any, group: Any) -> Callable[[], dict]:
        """Like `save()`, but the engines' files are serialized into memory now and written by the
        background thread (see `fabricx.strategies.deepspeed.async_save`)."""
        from fabricx.strategies.deepspeed.async_save import EngineFiles

        files = EngineFiles()
        self._save_engines(staging, entries, files.capture)

        def finish() -> dict[str, Any]:
            files.write()
            return {}

        return finish

    def _save_engines(
        self, staging: Any, entries: dict[str, Any], around: Callable[[Any], contextlib.AbstractContextManager]
    ) -> None:
        """Every rank: each model's engine saves its files under ``staging``, inside ``around(engine)``."""
        models, _, _ = self.strategy._split_engine_state(entries)
        for key, engine in models.items():
            elastic = engine.optimizer is not None and _elastic_engine(engine)
            with around(engine):
                client_state = {GROUP_SETTINGS_KEY: _group_settings(engine)} if elastic else {}
                self._write_engine(engine, staging / ENGINE_FOLDER, key, client_state, latest=False)

    def _write_engine(self, engine: Any, folder: Any, tag: str, client_state: dict[str, Any], latest: bool) -> None:
        """``engine.save_checkpoint`` into ``folder/<tag>/`` (and ``folder/latest`` when ``latest``)."""
        engine.save_checkpoint(
            os.fspath(folder),
            tag=tag,
            client_state=client_state,
            save_latest=latest,
            exclude_frozen_parameters=self.strategy._exclude_frozen_parameters,
        )

    def save_engine_folder(self, folder: Any, entries: dict[str, Any], client_state: dict[str, Any], tag: str) -> None:
        """Every rank: the one model's engine writes ``folder/<tag>/`` and ``folder/latest``, with
        ``client_state`` in its model states file (Lightning's ``DeepSpeedStrategy.save_checkpoint``).

        ZeRO-1/2 shards are written rigid, as with Lightning's default config: DeepSpeed loads elastic ones
        into a rigid engine only when the optimizer keeps its step in its param groups, which torch's do not.
        """
        models, _, _ = self.strategy._split_engine_state(entries)
        if len(models) != 1:
            raise CheckpointError(
                f"layout='deepspeed' saves one DeepSpeed model per checkpoint, as Lightning's DeepSpeedStrategy "
                f"does; the state holds {sorted(models)}. Save each model to its own path, or save without "
                "layout= for a checkpoint directory that holds them all."
            )
        (engine,) = models.values()
        elastic = _elastic_engine(engine)
        if elastic:
            engine.optimizer.elastic_checkpoint = False  # read by its state_dict() alone
        try:
            self._write_engine(engine, folder, tag, client_state, latest=True)
        finally:
            if elastic:
                engine.optimizer.elastic_checkpoint = True

    def load(self, loaded: Any, entries: dict[str, Any], strict: bool) -> None:
        models, optimizer_keys, _ = self.strategy._split_engine_state(entries, require_models=False)
        saved = _saved_models(loaded.meta)
        loose = set(entries) - set(models) - set(optimizer_keys.values())
        if loose and strict:
            raise CheckpointKeyError(
                f"The checkpoint {loaded.path} stores {sorted(loose)} inside a DeepSpeed model's engine files; add "
                "that model to the state you load into (the engine restores its optimizer with it), or pass "
                "strict=False."
            )
        for key, engine in models.items():
            optimizer_key = optimizer_keys.get(key)
            has_optimizer = saved[key].get("optimizer") is not None
            if optimizer_key is not None and not has_optimizer and strict:
                raise CheckpointKeyError(
                    f"The checkpoint {loaded.path} stores the DeepSpeed model {key!r} without its optimizer, so "
                    f"{optimizer_key!r} cannot be restored. Leave the optimizer out of the state or pass strict=False.",
                    [optimizer_key],
                )
            with_optimizer = optimizer_key is not None and has_optimizer
            if not with_optimizer and engine.zero_optimization_partition_weights():
                # ZeRO-3 keeps the weights only in the optimizer shards, and DeepSpeed's model-only load
                # reads whichever tag a 'latest' file names: merge this tag's shards here instead.
                from fabricx.checkpoint.deepspeed_consolidate import engine_model_states

                weights = engine_model_states(loaded.path, loaded.meta, [key])[key]
                self.strategy.load_module_state_dict(engine.module, weights, strict=strict)
                continue
            elastic = with_optimizer and self._elastic(engine, loaded)
            if with_optimizer and not elastic and int(loaded.meta["world_size"]) != self.strategy.world_size:
                self._refuse_resharding(engine, loaded, key)
            from fabricx.checkpoint.deepspeed_consolidate import engine_location
            from fabricx.checkpoint.deepspeed_files import check_engine_folder, safe_engine_loading

            folder, tag = engine_location(loaded.meta, key)
            engine_dir = os.fspath(loaded.path if folder == "." else loaded.path / folder)
            check_engine_folder(os.path.join(engine_dir, tag))
            with safe_engine_loading(engine):  # DeepSpeed's files are read weights-only
                load_path, client_state = engine.load_checkpoint(
                    engine_dir,
                    tag=tag,
                    load_module_strict=strict,
                    load_optimizer_states=with_optimizer and not elastic,
                    load_lr_scheduler_states=False,
                )
                if load_path is None:
                    raise CheckpointError(f"DeepSpeed could not load {engine_dir}/{tag}; see its log above.")
                if elastic:
                    _load_elastic_optimizer(engine, engine_dir, tag)
                    _restore_group_settings(engine, (client_state or {}).get(GROUP_SETTINGS_KEY))

    @staticmethod
    def _elastic(engine: Any, loaded: Any) -> bool:
        record = (loaded.meta.get("extra_meta") or {}).get(META_KEY) or {}
        return _elastic_engine(engine) and bool(record.get("elastic_checkpoint"))

    def _refuse_resharding(self, engine: Any, loaded: Any, key: str) -> None:
        stage = engine.zero_optimization_stage()
        raise CheckpointError(
            f"The checkpoint {loaded.path} holds the DeepSpeed optimizer of {key!r} sharded over "
            f"{loaded.meta['world_size']} process(es); this run has {self.strategy.world_size}. DeepSpeed re-shards "
            "optimizer state only for ZeRO stages 1 and 2 saved with elastic_checkpoint (fabricx's default for those "
            f"stages; this engine: stage {stage}, elastic_checkpoint={engine.zero_elastic_checkpoint()}). Resume with "
            f"{loaded.meta['world_size']} process(es), or leave the optimizer out of the state to load the weights."
        )


def _elastic_engine(engine: Any) -> bool:
    """Whether the engine saves ZeRO-1/2 optimizer shards in DeepSpeed's elastic (re-shardable) layout."""
    return engine.zero_optimization_stage() in (1, 2) and bool(engine.zero_elastic_checkpoint())


def _load_elastic_optimizer(engine: Any, engine_dir: str, tag: str) -> None:
    """Load ZeRO-1/2 optimizer shards saved in DeepSpeed's elastic layout, for any process count.

    The engine's own load refuses another process count, and its elastic path expects a step count in
    the optimizer's param groups, which torch optimizers keep per parameter (in the state DeepSpeed
    restores anyway): every saved shard is merged and this rank's part is cut out of it.
    """
    from deepspeed.checkpoint.constants import BASE_OPTIMIZER_STATE_STEP

    shards = all_zero_checkpoints(engine, engine_dir, tag)
    if shards is None:
        raise CheckpointError(f"DeepSpeed found no optimizer shards in {engine_dir}/{tag}.")
    world = torch.distributed.get_world_size(group=engine.optimizer.dp_process_group)
    if len(shards) != world:
        shards = _regroup_shards(shards, world)
    groups = engine.optimizer.optimizer.param_groups
    had_step = ["step" in group for group in groups]
    for shard in shards:
        shard.setdefault(BASE_OPTIMIZER_STATE_STEP, None)
    engine.optimizer.load_state_dict(
        state_dict_list=shards,
        load_optimizer_states=True,
        load_from_fp32_weights=engine.zero_load_from_fp32_weights(),
        param_shapes=zero_param_shapes(engine),
    )
    for group, had in zip(groups, had_step, strict=True):
        if not had and group.get("step", 0) is None:
            del group["step"]


#: Where the engine's model-states file keeps the base optimizer's param-group settings (lr, betas, weight decay,
#: a scheduler's initial_lr) beside elastic ZeRO-1/2 shards: those hold only the per-parameter state, and DeepSpeed
#: restores the learning rate through its own scheduler only, so a torch scheduler the user steps would resume with
#: the lr the optimizer was built with.
GROUP_SETTINGS_KEY = "fabricx_param_group_settings"


def _group_settings(engine: Any) -> list[dict[str, Any]]:
    """The base optimizer's param-group settings, group by group (not the parameters; DeepSpeed keeps the step)."""
    groups = engine.optimizer.optimizer.param_groups
    return [{key: value for key, value in group.items() if key not in ("params", "step")} for group in groups]


def _restore_group_settings(engine: Any, saved: list[dict[str, Any]] | None) -> None:
    """Put back what `_group_settings` saved (a checkpoint written before it was saved keeps the built settings)."""
    if saved is None:
        return
    groups = engine.optimizer.optimizer.param_groups
    if len(saved) != len(groups):
        raise CheckpointError(
            f"The checkpoint's DeepSpeed optimizer has {len(saved)} param group(s), this one {len(groups)}: build the "
            "optimizer with the same param groups as the run that saved it."
        )
    for group, settings in zip(groups, saved, strict=True):
        group.update(settings)


def _regroup_shards(shards: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    """Elastic ZeRO-1/2 shards of another process count as ``world`` shards with the same concatenation.

    DeepSpeed merges the shards it is given (concatenating each group's partitions) and cuts out this
    rank's part, but indexes the list by the current rank: the first shard here holds every saved
    partition concatenated, the others empty ones, which merge to the same flat state.
    """
    from deepspeed.checkpoint.constants import BASE_OPTIMIZER_STATE, SINGLE_PARTITION_OF_FP32_GROUPS

    def regrouped(take: Callable[[list[Tensor]], Tensor]) -> dict[str, Any]:
        shard = copy.copy(shards[0])
        fp32_groups, states = [], []
        for group in range(len(shards[0][SINGLE_PARTITION_OF_FP32_GROUPS])):
            parts = [s[SINGLE_PARTITION_OF_FP32_GROUPS][group] for s in shards]
            fp32_groups.append(take(parts))
            state = {}
            for key, value in shards[0][BASE_OPTIMIZER_STATE][group].items():
                partitioned = torch.is_tensor(value) and value.shape == parts[0].shape
                state[key] = take([s[BASE_OPTIMIZER_STATE][group][key] for s in shards]) if partitioned else value
            states.append(state)
        shard[SINGLE_PARTITION_OF_FP32_GROUPS] = fp32_groups
        shard[BASE_OPTIMIZER_STATE] = states
        return shard

    merged = regrouped(torch.cat)
    empty = regrouped(lambda parts: parts[0][:0])
    return [merged] + [empty] * (world - 1)


#: The oldest DeepSpeed release fabricx's equivalence tests pass with. With 0.19.7, ZeRO-1/2/3 on CPU ended
#: some runs with weights that differ from DDP on the same data, and by different amounts from run to run.
TESTED_DEEPSPEED = (0, 19, 8)


def _warn_if_untested_version(version: str) -> None:
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    if release < TESTED_DEEPSPEED:
        from fabricx.utilities.rank_zero import rank_zero_warn

        rank_zero_warn(
            f"DeepSpeed {version} is older than {'.'.join(map(str, TESTED_DEEPSPEED))}, the oldest release fabricx's "
            "ZeRO-versus-DDP equivalence tests pass with (0.19.7 gave different weights from run to run on CPU). "
            "Upgrade: pip install 'deepspeed>=0.19.8'."
        )


@contextlib.contextmanager
def _off_accumulation_boundary(engine: Any) -> Generator[None, None, None]:
    """Backward inside accumulates locally; the engine's next step is at the boundary again."""
    steps = engine.gradient_accumulation_steps()
    if steps > 1:
        raise FabricxError(
            f"The DeepSpeed engine accumulates gradients itself (gradient_accumulation_steps={steps}); do not also "
            "use fabric.accumulate()/no_backward_sync(). Either call fabric.backward() and optimizer.step() on every "
            "micro-batch, or drop gradient_accumulation_steps from the strategy and use Fabric(grad_accum_steps=N)."
        )
    engine.set_gradient_accumulation_boundary(False)
    try:
        yield
    finally:
        engine.set_gradient_accumulation_boundary(True)


def _engine_optimizer_handle(optimizer: Optimizer) -> Optimizer:
    """A second face of the user's optimizer (same class, same attributes) whose ``zero_grad`` does nothing.

    The engine clears gradients itself after each optimizer step and keeps them between accumulated
    micro-batches; the optimizer's own ``zero_grad`` would drop buffers ZeRO reuses (offloaded gradients).
    DeepSpeed keeps calling the original object, which is left unchanged.
    """
    handle_cls = facade_class(None, type(optimizer), {"zero_grad": _engine_zero_grad}, tag="deepspeed_handle")
    handle = object.__new__(handle_cls)
    handle.__dict__ = optimizer.__dict__  # shared: param_groups, state and defaults stay one
    return handle


def _engine_zero_grad(self: Optimizer, set_to_none: bool = True) -> None:
    """Gradients belong to the DeepSpeed engine, which clears them after each step."""


def _hook_tensors(output: Any, hook: Callable[[Tensor], None]) -> None:
    if isinstance(output, Tensor):
        if output.requires_grad:
            output.register_hook(hook)
    elif isinstance(output, list | tuple):
        for item in output:
            _hook_tensors(item, hook)
    elif isinstance(output, dict):
        for item in output.values():
            _hook_tensors(item, hook)


def _is_partitioned(module: Module) -> bool:
    """Whether ``deepspeed.zero.Init`` (or a ZeRO-3 engine) has partitioned the module's parameters."""
    return any(hasattr(parameter, "ds_id") for parameter in module.parameters())


def _saved_models(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    extra = meta.get("extra_meta") or {}
    return dict((extra.get(META_KEY) or {}).get("models") or {})


def _cpu_supports_fp16() -> bool:
    from fabricx._compat.torch_internals import mkldnn_fp16_supported

    return mkldnn_fp16_supported()


__all__ = ["ENGINE_FOLDER", "INSTALL_HINT", "DeepSpeedStrategy", "require_deepspeed"]
