"""Turning ``Fabric(...)`` flags into an Accelerator, a Precision and a Strategy; all validation here."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from fabricx.accelerators.accelerator import Accelerator
from fabricx.accelerators.registry import ACCELERATORS, AUTO_ORDER, NOT_SUPPORTED
from fabricx.capabilities import CheckpointIOLike, is_checkpoint_io
from fabricx.environments.base import ClusterEnvironment
from fabricx.precision.precision import Precision
from fabricx.precision.registry import normalize_precision
from fabricx.strategies.parallel import ParallelStrategy
from fabricx.strategies.registry import STRATEGIES, create_strategy
from fabricx.strategies.single_device import SingleDeviceStrategy
from fabricx.strategies.strategy import Strategy
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.iterables import one_or_many

if TYPE_CHECKING:
    from fabricx.checkpoint.io import CheckpointIO


#: One plugin ``Fabric(plugins=...)`` takes; a list of them is taken too.
Plugin = Precision | ClusterEnvironment | CheckpointIOLike

#: Environment variables through which ``fabricx run`` passes its flags to ``Fabric()``.
CLI_FLAG_ENV = {
    "accelerator": "FABRICX_ACCELERATOR",
    "strategy": "FABRICX_STRATEGY",
    "devices": "FABRICX_DEVICES",
    "num_nodes": "FABRICX_NUM_NODES",
    "precision": "FABRICX_PRECISION",
}
#: Set by ``fabricx run --num-nodes MIN:MAX``: the job's number of nodes changes between attempts.
ELASTIC_ENV = "FABRICX_ELASTIC"
_DEFAULTS = {"accelerator": "auto", "strategy": "auto", "devices": "auto", "num_nodes": 1, "precision": None}


class Connector:
    """Resolves and validates the flags once; the results are plain objects.

    Example:
        ```python
        connector = Connector(accelerator="cpu", devices=2, precision="bf16-mixed")
        connector.strategy  # DDPStrategy(...)
        ```
    """

    def __init__(
        self,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy = "auto",
        devices: Any = "auto",
        num_nodes: int = 1,
        precision: str | int | None = None,
        plugins: Plugin | Sequence[Plugin] | None = None,
    ) -> None:
        flags = _apply_cli_flags(
            {
                "accelerator": accelerator,
                "strategy": strategy,
                "devices": devices,
                "num_nodes": num_nodes,
                "precision": precision,
            }
        )
        accelerator, strategy, devices = flags["accelerator"], flags["strategy"], flags["devices"]
        num_nodes, precision = flags["num_nodes"], flags["precision"]
        devices, num_nodes = _layout_from_external_launcher(devices, num_nodes)

        precision_plugin, environment, checkpoint_io = _sort_plugins(plugins)
        if precision_plugin is not None and precision is not None:
            raise MisconfigurationError(
                f"Both precision={precision!r} and a precision plugin ({type(precision_plugin).__name__}) were "
                "given. Pass only one of them."
            )
        if isinstance(strategy, Strategy) and strategy._precision is not None and precision_plugin is None:
            precision_plugin = strategy._precision
        if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
            raise MisconfigurationError(f"num_nodes={num_nodes!r} must be an int >= 1.")

        self.accelerator = _select_accelerator(accelerator, strategy)
        self.devices = self.accelerator.parse_devices(devices)
        self.parallel_devices = self.accelerator.get_parallel_devices(self.devices)
        self.num_nodes = num_nodes
        self.strategy = _select_strategy(strategy, self.accelerator, self.parallel_devices, num_nodes)
        self.strategy.accelerator = self.accelerator
        if precision_plugin is None:
            precision_plugin = self.strategy.build_precision(
                normalize_precision(precision), self.parallel_devices[0].type
            )
        else:
            self.strategy.validate_precision(precision_plugin)
        self.precision = precision_plugin
        self.strategy.precision = precision_plugin
        if isinstance(self.strategy, ParallelStrategy):
            self.strategy.configure(
                parallel_devices=self.parallel_devices,
                num_nodes=num_nodes,
                cluster_environment=environment,
            )
        elif environment is not None and num_nodes == 1 and len(self.parallel_devices) == 1:
            pass  # a single process ignores the cluster layout
        if checkpoint_io is not None:
            # A plugin shaped like CheckpointIO is stored as it is; the strategy only calls its methods.
            self.strategy.checkpoint_io = cast("CheckpointIO", checkpoint_io)


def _apply_cli_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Take flags from ``fabricx run``; refuse a value in code that contradicts the command line."""
    resolved = dict(flags)
    for name, env_name in CLI_FLAG_ENV.items():
        cli_value = os.environ.get(env_name)
        if cli_value is None:
            continue
        code_value = flags[name]
        parsed: Any = int(cli_value) if name == "num_nodes" else cli_value
        if code_value != _DEFAULTS[name] and str(code_value) != str(parsed):
            if name == "precision" and normalize_precision(code_value) == normalize_precision(parsed):
                continue
            if name == "strategy" and isinstance(code_value, Strategy):
                continue
            raise MisconfigurationError(
                f"Fabric({name}={code_value!r}) conflicts with `fabricx run --{name.replace('_', '-')} {cli_value}`. "
                f"Remove {name}= from the Fabric(...) call or change the command line."
            )
        resolved[name] = parsed
    return resolved


def _layout_from_external_launcher(devices: Any, num_nodes: int) -> tuple[Any, int]:
    """Under torchrun or ``srun`` with ``devices="auto"``, use the layout that launcher created.

    In an elastic job (``fabricx run --num-nodes MIN:MAX``) the number of nodes changes between
    attempts, so it always comes from torchrun's ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``.
    """
    world = os.environ.get("WORLD_SIZE")
    local_world = os.environ.get("LOCAL_WORLD_SIZE")
    if devices != "auto":
        if os.environ.get(ELASTIC_ENV) == "1" and world is not None and local_world is not None:
            return devices, max(1, int(world) // max(1, int(local_world)))
        return devices, num_nodes
    if "TORCHELASTIC_RUN_ID" in os.environ and world is not None and local_world is not None:
        world_size, local_world_size = int(world), int(local_world)
    else:
        from fabricx.environments.slurm import SLURMEnvironment

        if not SLURMEnvironment.detect():
            return devices, num_nodes
        world_size = int(os.environ.get("SLURM_NTASKS", "1"))
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "1")))
        local_world_size = max(1, world_size // max(1, nodes))
    if world_size <= 1:
        return devices, num_nodes
    return local_world_size, max(num_nodes, world_size // local_world_size)


def _sort_plugins(
    plugins: Plugin | Sequence[Plugin] | None,
) -> tuple[Precision | None, ClusterEnvironment | None, CheckpointIOLike | None]:
    from fabricx.checkpoint.io import CheckpointIO

    if plugins is None:
        return None, None, None
    items = one_or_many(plugins)
    precision: Precision | None = None
    environment: ClusterEnvironment | None = None
    checkpoint_io: CheckpointIOLike | None = None
    for plugin in items:
        if isinstance(plugin, Precision):
            if precision is not None:
                raise MisconfigurationError(
                    f"Two precision plugins were given ({type(precision).__name__}, {type(plugin).__name__}); pass one."
                )
            precision = plugin
        elif isinstance(plugin, ClusterEnvironment):
            if environment is not None:
                raise MisconfigurationError("Two cluster environments were given in plugins; pass one.")
            environment = plugin
        elif isinstance(plugin, CheckpointIO) or is_checkpoint_io(plugin):
            if checkpoint_io is not None:
                raise MisconfigurationError(
                    f"Two checkpoint I/O plugins were given ({type(checkpoint_io).__name__}, "
                    f"{type(plugin).__name__}); pass one."
                )
            checkpoint_io = plugin
        elif hasattr(plugin, "save_checkpoint") and hasattr(plugin, "load_checkpoint"):
            raise MisconfigurationError(
                f"plugins got {type(plugin).__name__}, a Lightning-style checkpoint I/O object (save_checkpoint/"
                "load_checkpoint of one file). The Trainer writes its checkpoint files through one "
                "(Trainer(plugins=[...])); Fabric's checkpoints are written by every rank and committed "
                "atomically: subclass fabricx.checkpoint.CheckpointIO (or LocalCheckpointIO) instead."
            )
        else:
            raise MisconfigurationError(
                f"plugins got {plugin!r} of type {type(plugin).__name__}; allowed are a Precision, a "
                "ClusterEnvironment or a checkpoint I/O object (a fabricx.checkpoint.CheckpointIO)."
            )
    return precision, environment, checkpoint_io


def _select_accelerator(accelerator: str | Accelerator, strategy: Any) -> Accelerator:
    name = accelerator.name if isinstance(accelerator, Accelerator) else accelerator
    if isinstance(name, str) and name in NOT_SUPPORTED:
        # Refused whether or not this machine has one: "not available here" would suggest another machine works.
        raise MisconfigurationError(
            f"accelerator={accelerator!r}: {NOT_SUPPORTED[name]}. Choose one of "
            f"{['auto', *ACCELERATORS]} or pass an Accelerator instance."
        )
    if isinstance(accelerator, Accelerator):
        return accelerator
    if isinstance(strategy, Strategy) and strategy.accelerator is not None and accelerator == "auto":
        return strategy.accelerator
    if not isinstance(accelerator, str) or (accelerator not in ACCELERATORS and accelerator != "auto"):
        raise MisconfigurationError(
            f"accelerator={accelerator!r} is not supported. Choose one of "
            f"{['auto', *ACCELERATORS]} or pass an Accelerator instance."
        )
    if accelerator == "auto":
        for name in AUTO_ORDER:
            if ACCELERATORS[name].is_available():
                return ACCELERATORS[name]()
    cls = ACCELERATORS[accelerator]
    if not cls.is_available():
        available = [name for name in AUTO_ORDER if ACCELERATORS[name].is_available()]
        raise MisconfigurationError(
            f"accelerator={accelerator!r} was asked for but is not available on this machine. "
            f"Available here: {available}. Use accelerator='auto' to pick the best one."
        )
    return cls()


def _select_strategy(
    strategy: str | Strategy, accelerator: Accelerator, parallel_devices: list, num_nodes: int
) -> Strategy:
    if isinstance(strategy, Strategy):
        if isinstance(strategy, SingleDeviceStrategy) and (len(parallel_devices) > 1 or num_nodes > 1):
            raise MisconfigurationError(
                f"A SingleDeviceStrategy cannot use devices={len(parallel_devices)}, num_nodes={num_nodes}. "
                "Use strategy='ddp' (or another parallel strategy) for several devices."
            )
        return strategy
    if not isinstance(strategy, str) or (strategy != "auto" and strategy not in STRATEGIES):
        raise MisconfigurationError(
            f"strategy={strategy!r} is not a known strategy. Choose one of {['auto', *sorted(STRATEGIES)]} "
            "or pass a Strategy instance."
        )
    if strategy == "auto":
        if len(parallel_devices) > 1 or num_nodes > 1:
            strategy = "ddp"
        else:
            return SingleDeviceStrategy(device=parallel_devices[0], accelerator=accelerator)
    if strategy == "single_device":
        if len(parallel_devices) > 1 or num_nodes > 1:
            raise MisconfigurationError(
                f"strategy='single_device' cannot use {len(parallel_devices)} devices on {num_nodes} node(s). "
                "Use strategy='ddp' or devices=1."
            )
        return SingleDeviceStrategy(device=parallel_devices[0], accelerator=accelerator)
    return create_strategy(strategy)
