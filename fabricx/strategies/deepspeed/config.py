"""Building the DeepSpeed configuration dict from a user's config and fabricx's own settings.

Pure dict manipulation: nothing here imports deepspeed, so it is cheap to use and to test.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from fabricx.utilities.exceptions import MisconfigurationError

#: Precision names the DeepSpeed engine runs, and the config section each one turns on.
PRECISION_SECTIONS: dict[str, str | None] = {
    "32-true": None,
    "16-mixed": "fp16",
    "bf16-mixed": "bf16",
    "bf16-true": "bf16",
}
_HALF_SECTIONS = ("fp16", "bf16")


def load_config(config: dict[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """A private copy of a DeepSpeed config given as a dict or as the path of a JSON file.

    Example:
        ```python
        load_config("ds_config.json")  # {"zero_optimization": {"stage": 2}, ...}
        ```
    """
    if config is None:
        return None
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        if not path.is_file():
            raise MisconfigurationError(
                f"DeepSpeedStrategy(config={os.fspath(config)!r}): no such file. Pass a dict or the path of an "
                "existing DeepSpeed JSON config."
            )
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise MisconfigurationError(f"The DeepSpeed config {path} is not valid JSON: {error}.") from None
        if not isinstance(loaded, dict):
            raise MisconfigurationError(
                f"The DeepSpeed config {path} holds a {type(loaded).__name__}; it must be a JSON object."
            )
        return loaded
    raise MisconfigurationError(
        f"DeepSpeedStrategy(config=...) takes a dict or a path to a JSON file, got {type(config).__name__}."
    )


def build_config(
    *,
    zero_optimization: bool = True,
    stage: int = 2,
    offload_optimizer: bool = False,
    offload_parameters: bool = False,
    offload_optimizer_device: str = "cpu",
    offload_params_device: str = "cpu",
    nvme_path: str = "/local_nvme",
    pin_memory: bool = False,
    sub_group_size: int = 1_000_000_000,
    contiguous_gradients: bool = True,
    overlap_comm: bool = True,
    allgather_bucket_size: int = 200_000_000,
    reduce_bucket_size: int = 200_000_000,
    zero_allow_untested_optimizer: bool = True,
    partition_activations: bool = False,
    cpu_checkpointing: bool = False,
    contiguous_memory_optimization: bool = False,
    synchronize_checkpoint_boundary: bool = False,
) -> dict[str, Any]:
    """A DeepSpeed config from the strategy's constructor arguments (the user gave none).

    Example:
        ```python
        build_config(stage=3, offload_optimizer=True)["zero_optimization"]["stage"]  # 3
        ```
    """
    if stage not in (0, 1, 2, 3):
        raise MisconfigurationError(f"DeepSpeedStrategy(stage={stage!r}); ZeRO stages are 0, 1, 2 and 3.")
    if (offload_optimizer or offload_parameters) and zero_optimization and stage == 0:
        raise MisconfigurationError("Offloading needs ZeRO stage 1, 2 or 3; stage=0 was given.")
    if offload_parameters and stage != 3:
        raise MisconfigurationError(
            f"offload_parameters=True needs ZeRO stage 3 (stage={stage} was given). Use stage=3, or only "
            "offload_optimizer=True with stages 1 and 2."
        )
    zero: dict[str, Any] = {"stage": stage if zero_optimization else 0}
    if zero_optimization and stage > 0:
        zero.update(
            contiguous_gradients=contiguous_gradients,
            overlap_comm=overlap_comm,
            allgather_bucket_size=int(allgather_bucket_size),
            reduce_bucket_size=int(reduce_bucket_size),
            sub_group_size=int(sub_group_size),
        )
        if stage in (1, 2):
            # Optimizer shards saved without padding, so a checkpoint resumes on another number of processes.
            zero["elastic_checkpoint"] = True
        if offload_optimizer:
            zero["offload_optimizer"] = {
                "device": offload_optimizer_device,
                "nvme_path": nvme_path,
                "pin_memory": pin_memory,
            }
        if offload_parameters:
            zero["offload_param"] = {"device": offload_params_device, "nvme_path": nvme_path, "pin_memory": pin_memory}
    config: dict[str, Any] = {
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": zero_allow_untested_optimizer,
        # A torch optimizer with offloading is slower than DeepSpeedCPUAdam but correct: allow it.
        "zero_force_ds_cpu_optimizer": False,
    }
    if partition_activations or cpu_checkpointing or contiguous_memory_optimization:
        config["activation_checkpointing"] = {
            "partition_activations": partition_activations,
            "cpu_checkpointing": cpu_checkpointing,
            "contiguous_memory_optimization": contiguous_memory_optimization,
            "synchronize_checkpoint_boundary": synchronize_checkpoint_boundary,
        }
    return config


def apply_precision(config: dict[str, Any], precision: str, loss_scaling: dict[str, Any]) -> None:
    """Turn on the ``fp16``/``bf16`` section a precision needs; refuse a config that contradicts it.

    ``loss_scaling`` fills a new ``fp16`` section (``loss_scale``, ``initial_scale_power``, ...).

    Example:
        ```python
        config = {}
        apply_precision(config, "bf16-mixed", {})  # config == {"bf16": {"enabled": True}}
        ```
    """
    if precision not in PRECISION_SECTIONS:
        raise MisconfigurationError(
            f"precision={precision!r} is not supported by DeepSpeed; choose one of {list(PRECISION_SECTIONS)}."
        )
    wanted = PRECISION_SECTIONS[precision]
    for section in _HALF_SECTIONS:
        enabled = _section_enabled(config, section)
        if section == wanted or not enabled:
            continue
        raise MisconfigurationError(
            f"The DeepSpeed config enables {section!r} but Fabric runs precision={precision!r}. Pass "
            f"precision={'16-mixed' if section == 'fp16' else 'bf16-mixed'!r} to Fabric, or remove the "
            f"{section!r} section from the config."
        )
    if wanted is None:
        return
    section = config.setdefault(wanted, {})
    if not isinstance(section, dict):
        raise MisconfigurationError(f"The DeepSpeed config's {wanted!r} entry must be a dict, got {section!r}.")
    section.setdefault("enabled", True)
    if not section["enabled"]:
        raise MisconfigurationError(
            f"precision={precision!r} needs the DeepSpeed {wanted!r} section, but the config sets "
            f"{wanted}.enabled=false. Remove that entry or choose precision='32-true'."
        )
    if wanted == "fp16":
        for key, value in loss_scaling.items():
            section.setdefault(key, value)


def _section_enabled(config: dict[str, Any], name: str) -> bool:
    section = config.get(name)
    if name == "bf16" and section is None:
        section = config.get("bfloat16")  # DeepSpeed's older spelling
    return isinstance(section, dict) and bool(section.get("enabled", False))


def apply_training_settings(
    config: dict[str, Any],
    *,
    micro_batch_size: int | None,
    gradient_accumulation_steps: int | None,
    gradient_clipping: float | None,
) -> None:
    """Fill batch size, accumulation and clipping where the config does not set them already
    (clipping is off unless asked for, unlike DeepSpeed's own default of 1.0).

    DeepSpeed insists on a consistent ``train_batch_size = micro * accumulation * world_size``; fabricx
    owns the loop, so the micro-batch size only feeds DeepSpeed's throughput logs and defaults to 1.

    Example:
        ```python
        config = {}
        apply_training_settings(config, micro_batch_size=8, gradient_accumulation_steps=None, gradient_clipping=1.0)
        ```
    """
    if gradient_accumulation_steps is not None:
        _set_or_check(config, "gradient_accumulation_steps", int(gradient_accumulation_steps))
    if gradient_clipping is not None:
        _set_or_check(config, "gradient_clipping", float(gradient_clipping))
    # DeepSpeed clips at norm 1.0 unless told otherwise; fabricx clips only when asked, like every strategy.
    config.setdefault("gradient_clipping", 0.0)
    has_micro = "train_micro_batch_size_per_gpu" in config
    if not has_micro and "train_batch_size" not in config:
        config["train_micro_batch_size_per_gpu"] = int(micro_batch_size or 1)
    elif not has_micro and "gradient_accumulation_steps" not in config:
        # Only the global batch is given: DeepSpeed derives the rest, assuming one micro-batch per step.
        config.setdefault("gradient_accumulation_steps", 1)
    config.setdefault("steps_per_print", 2**31 - 1)  # DeepSpeed's own progress lines would flood the console


def _set_or_check(config: dict[str, Any], key: str, value: Any) -> None:
    if key in config and config[key] != value:
        raise MisconfigurationError(
            f"DeepSpeedStrategy({key}={value!r}) contradicts the config's {key}={config[key]!r}. Set it in one "
            "place only."
        )
    config[key] = value


def zero_stage(config: dict[str, Any]) -> int:
    """The ZeRO stage a config asks for (0 when ZeRO is off).

    Example:
        ```python
        zero_stage({"zero_optimization": {"stage": 3}})  # 3
        ```
    """
    zero = config.get("zero_optimization")
    if isinstance(zero, dict):
        return int(zero.get("stage", 0))
    if isinstance(zero, bool):
        return 1 if zero else 0  # DeepSpeed reads ``true`` as stage 1
    return 0


__all__ = [
    "PRECISION_SECTIONS",
    "apply_precision",
    "apply_training_settings",
    "build_config",
    "load_config",
    "zero_stage",
]
