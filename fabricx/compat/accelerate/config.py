"""Accelerate-style configuration objects and the mapping of Accelerate flags onto ``Fabric`` flags."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabricx.utilities.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from fabricx.flags import PrecisionName

__all__ = [
    "DataLoaderConfiguration",
    "DistributedType",
    "GradientAccumulationPlugin",
    "ProjectConfiguration",
    "fabric_precision",
]

#: Accelerate's ``mixed_precision`` values and the fabricx precision each one means.
_PRECISIONS: dict[str, PrecisionName] = {"no": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}


@dataclass
class ProjectConfiguration:
    """Where an `fabricx.compat.accelerate.Accelerator` writes checkpoints and logs.

    Args:
        project_dir: Folder of the project; checkpoints go to ``project_dir/checkpoints/checkpoint_{n}``
            with ``automatic_checkpoint_naming=True``.
        logging_dir: Folder for trackers (``log_with``); defaults to ``project_dir``.
        automatic_checkpoint_naming: Let ``save_state()`` choose the next ``checkpoint_{n}`` and
            ``load_state()`` find the newest one.
        total_limit: Keep only the newest ``total_limit`` automatic checkpoints.
        iteration: The smallest number the next automatic checkpoint may get. The number actually used
            is also at least one past the highest ``checkpoint_{n}`` on disk, so it keeps counting
            after a restart.
        save_on_each_node: Accepted for compatibility; every process writes its own part of a checkpoint
            into the same folder (a file system shared by all nodes is assumed).

    Example:
        ```python
        config = ProjectConfiguration(
            "runs/exp1", automatic_checkpoint_naming=True, total_limit=3
        )
        accelerator = Accelerator(project_config=config)
        ```
    """

    project_dir: str | os.PathLike[str] | None = None
    logging_dir: str | os.PathLike[str] | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        if self.total_limit is not None and (
            isinstance(self.total_limit, bool) or not isinstance(self.total_limit, int) or self.total_limit < 1
        ):
            raise ValueError(f"total_limit={self.total_limit!r}; give None (keep all) or an int >= 1.")

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir`` (and ``logging_dir`` when it was not chosen separately).

        Example:
            ```python
            config.set_directories("runs/exp2")
            ```
        """
        if self.logging_dir is None or self.logging_dir == self.project_dir:
            self.logging_dir = project_dir
        self.project_dir = project_dir


@dataclass
class DataLoaderConfiguration:
    """How an `fabricx.compat.accelerate.Accelerator` prepares data loaders.

    Args:
        use_stateful_dataloader: ``save_state()``/``load_state()`` also store and restore each prepared
            loader's exact position (epoch, batch, shuffle order), so a resumed run continues mid-epoch
            with the next unseen batch. Without it loaders restart their epoch after ``load_state()``
            (use `Accelerator.skip_first_batches()` then, as with Accelerate).
        split_batches: Cut every batch of the loader into one equal part per process (the batch size
            is then the total over all processes) instead of giving each process whole batches.
        dispatch_batches: Let the main process read the batches and send each process its part
            (default: ``True`` for an ``IterableDataset``, ``False`` otherwise).
        even_batches: Complete the last round with samples from the start of the epoch so every
            process gets the same number of batches (``gather_for_metrics`` drops the repeats). With
            ``False`` the last processes may get one batch fewer (see ``join_uneven_inputs``).
        use_seedable_sampler: Replace a shuffling ``RandomSampler`` by one seeded with
            ``data_seed + epoch`` at every pass (``data_seed`` defaults to torch's initial seed).
        data_seed: The seed of ``use_seedable_sampler``.
        non_blocking: Copy batches to the GPU without waiting (with ``pin_memory=True``).

    Example:
        ```python
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        Accelerator(dataloader_config=config)
        ```
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class GradientAccumulationPlugin:
    """How an `fabricx.compat.accelerate.Accelerator` accumulates gradients.

    Args:
        num_steps: micro-batches per optimizer step.
        adjust_scheduler: accepted as Accelerate accepts it: Accelerate 1.15 keeps only the plugin's
            non-default fields and reads a missing ``adjust_scheduler`` as ``False``, so skipped
            micro-batches are never counted in a prepared scheduler's ``_step_count``; neither are they here.
        sync_with_dataloader: end a window at the end of the prepared loader even when it is short.
        sync_each_batch: synchronise gradients on every micro-batch (less memory under FSDP, more
            communication); the optimizer still steps once per window.

    Example:
        ```python
        Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4, sync_each_batch=True))
        ```
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is None:
            self.num_steps = int(os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", 1))
        if isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ValueError(f"num_steps={self.num_steps!r}; give an int >= 1.")


class DistributedType(str, enum.Enum):
    """What kind of distributed run this is (compare with ``accelerator.distributed_type``).

    Example:
        ```python
        if accelerator.distributed_type == DistributedType.MULTI_GPU: ...
        ```
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_MPS = "MULTI_MPS"
    FSDP = "FSDP"
    DEEPSPEED = "DEEPSPEED"
    XLA = "XLA"
    # Hardware fabricx does not run on; present so comparisons in Accelerate scripts keep working.
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    MULTI_XPU = "MULTI_XPU"
    MEGATRON_LM = "MEGATRON_LM"


def fabric_precision(mixed_precision: str | None) -> PrecisionName | None:
    """The fabricx ``precision=`` flag for Accelerate's ``mixed_precision`` (``None`` leaves it to the
    environment: ``ACCELERATE_MIXED_PRECISION``, ``fabricx run --precision``, else full precision).

    Example:
        ```python
        fabric_precision("bf16")  # "bf16-mixed"
        ```
    """
    if mixed_precision is None:
        mixed_precision = os.environ.get("ACCELERATE_MIXED_PRECISION")
        if mixed_precision is None:
            return None
    key = str(mixed_precision).lower()
    if key not in _PRECISIONS:
        raise MisconfigurationError(
            f"mixed_precision={mixed_precision!r} is not supported. Choose one of {[None, *_PRECISIONS]} "
            "(fp8 has no fabricx equivalent)."
        )
    return _PRECISIONS[key]


def accelerate_precision_name(precision: Any) -> str:
    """Accelerate's name (``"no"``, ``"fp16"``, ``"bf16"``) for a fabricx precision plugin."""
    name = getattr(precision, "precision", None)
    if name in ("16-mixed", "16-true"):
        return "fp16"
    if name in ("bf16-mixed", "bf16-true"):
        return "bf16"
    return "no"
