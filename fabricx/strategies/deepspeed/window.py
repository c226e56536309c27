"""A DeepSpeed engine's gradients inside an accumulation window, for an exact mid-window checkpoint.

Where the engine keeps what it has accumulated so far depends on the ZeRO stage:

* ZeRO-0/1: on the parameters (``param.grad``, or DeepSpeed's ``grad_accum`` attribute) until the
  boundary, where they are reduced.
* ZeRO-2: reduced and partitioned at every backward. Each rank keeps its partition's running sum in
  the optimizer: one tensor per parameter of its partition (``all_grad_tensors[group]``), or, when it
  accumulates in fp32 over 16-bit weights, one flat fp32 partition per group (``averaged_gradients
  [group].flat_partition``). These tensors are saved as they are and copied back into a freshly built
  engine of the same layout (same process count, same model), so the next backward adds to the same
  values in the same order: the resumed run is bit-identical.
* ZeRO-3 and ZeRO-2 with optimizer offloading keep partial gradients in places this module does not
  restore; a save inside a window is refused there with the alternatives.

With the engine's own ``gradient_accumulation_steps`` the position inside its window is the engine's
micro-step counter, which DeepSpeed's checkpoint does not store; it is saved here too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fabricx._compat.deepspeed import compact_grad_partition_buffer
from fabricx.utilities.exceptions import CheckpointError, FabricxError

_PARAMETERS = "parameters"
_ACCUMULATED = "zero2_accumulated"
_PARTITIONS = "zero2_partitions"


def mid_engine_window(engine: Any) -> bool:
    """Whether the engine's own accumulation (``gradient_accumulation_steps > 1``) is inside a window."""
    steps = engine.gradient_accumulation_steps()
    return steps > 1 and engine.micro_steps % steps != 0


def refusal(engine: Any) -> str | None:
    """Why a save inside a window cannot be exact for this engine, or ``None`` when it can."""
    stage = engine.zero_optimization_stage()
    if stage >= 3:
        return (
            "ZeRO stage 3 reduces and partitions gradients (and parameters) as backward runs, in buffers no "
            "DeepSpeed API exports"
        )
    if stage == 2 and getattr(engine.optimizer, "cpu_offload", False):
        return "ZeRO stage 2 with optimizer offloading accumulates partial gradients in its offload buffers"
    return None


def refuse_mid_window(engine: Any) -> None:
    reason = refusal(engine)
    if reason is None:
        return
    raise FabricxError(
        f"fabric.save() inside a gradient-accumulation window cannot be exact here: {reason}. Save at a window "
        "boundary (after optimizer.step(), when fabric.sync_gradients is True), or use ZeRO stage 1 or 2 without "
        "offloading (DeepSpeedStrategy(stage=2)), or strategy='ddp' / 'fsdp', whose mid-window saves store every "
        "rank's accumulated gradients."
    )


def engine_gradient_state(engine: Any, world_size: int) -> dict[str, Any]:
    """This rank's accumulated gradients of ``engine`` and its micro-step; ``{}`` when nothing is pending.

    Example:
        ```python
        state = engine_gradient_state(engine, fabric.world_size)  # inside a window
        load_engine_gradient_state(engine, state, fabric.world_size)  # in the resumed run
        ```
    """
    engine_window = mid_engine_window(engine)
    if engine_window:
        refuse_mid_window(engine)
    stage = engine.zero_optimization_stage()
    if stage in (0, 1):
        pending: dict[str, Any] = _parameter_gradients(engine)
        if pending:
            pending = {_PARAMETERS: pending}
    elif stage == 2 and refusal(engine) is None:
        pending = _zero2_buffers(engine.optimizer)
    else:
        pending = {}
    if not pending and not engine_window:
        return {}
    return {**pending, "stage": stage, "world_size": world_size, "micro_steps": int(engine.micro_steps)}


def load_engine_gradient_state(engine: Any, state: dict[str, Any], world_size: int) -> None:
    """Put what `engine_gradient_state()` saved back into a freshly built engine of the same layout."""
    if not state:
        return
    if _PARAMETERS not in state and "stage" not in state:  # the per-parameter form of earlier checkpoints
        state = {_PARAMETERS: state, "stage": engine.zero_optimization_stage(), "world_size": world_size}
    stage = engine.zero_optimization_stage()
    saved = (state.get("stage"), state.get("world_size"))
    if saved != (stage, world_size):
        raise CheckpointError(
            f"This checkpoint was saved inside a gradient-accumulation window by DeepSpeed ZeRO stage {saved[0]} on "
            f"{saved[1]} process(es); each process's accumulated gradients are its own partition, so it resumes "
            f"exactly only with ZeRO stage {saved[0]} on {saved[1]} process(es) (here: stage {stage} on "
            f"{world_size}). Resume with that setup, or from a checkpoint saved at a window boundary."
        )
    if _PARAMETERS in state:
        _load_parameter_gradients(engine, state[_PARAMETERS])
    if _ACCUMULATED in state or _PARTITIONS in state:
        refuse_mid_window(engine)
        _load_zero2_buffers(engine.optimizer, state.get(_ACCUMULATED, {}), state.get(_PARTITIONS, {}))
    if "micro_steps" in state:
        engine.micro_steps = int(state["micro_steps"])


# -- ZeRO-0/1: gradients on the parameters ---------------------------------------------------------------
def _parameter_gradients(engine: Any) -> dict[str, Tensor]:
    separate = getattr(engine.optimizer, "use_grad_accum_attribute", False)
    grads = {}
    for name, param in engine.module.named_parameters():
        grad = getattr(param, "grad_accum", None) if separate else None
        grad = param.grad if grad is None else grad
        if grad is not None:
            grads[name] = grad.detach()
    return grads


def _load_parameter_gradients(engine: Any, state: dict[str, Tensor]) -> None:
    separate = getattr(engine.optimizer, "use_grad_accum_attribute", False)
    for name, param in engine.module.named_parameters():
        saved = state.get(name)
        grad = None if saved is None else saved.to(device=param.device)
        if separate:
            param.grad_accum = None if grad is None else grad.to(engine.optimizer.gradient_accumulation_dtype)
            param.grad = None
        else:
            param.grad = None if grad is None else grad.to(param.dtype)


# -- ZeRO-2: the optimizer's partitioned running sums ----------------------------------------------------
def _zero2_buffers(optimizer: Any) -> dict[str, Any]:
    accumulated: dict[str, list[Tensor]] = {}
    partitions: dict[str, Tensor] = {}
    for group in range(len(optimizer.bit16_groups)):
        tensors = optimizer.all_grad_tensors.get(group)
        if tensors is not None:
            accumulated[str(group)] = [tensor.detach() for tensor in tensors]
        buffer = optimizer.averaged_gradients.get(group)
        flat = getattr(buffer, "flat_partition", None)
        if flat is not None:
            partitions[str(group)] = flat.detach()
        elif buffer is not None:
            # Reduced for a step that has not run (a save between the boundary's backward and step()).
            raise FabricxError(
                "fabric.save() between the last backward of a window and optimizer.step() cannot store ZeRO-2's "
                "reduced gradients. Save after optimizer.step(), or before that backward."
            )
    pending: dict[str, Any] = {}
    if accumulated:
        pending[_ACCUMULATED] = accumulated
    if partitions:
        pending[_PARTITIONS] = partitions
    return pending


def _load_zero2_buffers(optimizer: Any, accumulated: dict[str, Any], partitions: dict[str, Any]) -> None:
    groups = len(optimizer.bit16_groups)
    unknown = sorted((set(accumulated) | set(partitions)) - {str(group) for group in range(groups)})
    if unknown:
        raise CheckpointError(
            f"The checkpoint's ZeRO-2 gradients name parameter group(s) {unknown}; this optimizer has {groups}. "
            "Resume with the model and optimizer the checkpoint was saved with."
        )
    for group in range(groups):
        tensors = accumulated.get(str(group))
        if tensors is None:
            optimizer.all_grad_tensors[group] = None
        else:
            params = optimizer.params_in_partition[group]
            shapes = [tuple(param.shape) for param in params]
            if [tuple(tensor.shape) for tensor in tensors] != shapes:
                raise CheckpointError(
                    f"The checkpoint's ZeRO-2 gradients of parameter group {group} have shapes "
                    f"{[tuple(t.shape) for t in tensors]}; this rank's partition holds {shapes}. Resume with the "
                    "model, optimizer and process count the checkpoint was saved with."
                )
            optimizer.all_grad_tensors[group] = [
                tensor.to(device=param.device).clone() for tensor, param in zip(tensors, params, strict=True)
            ]
        flat = partitions.get(str(group))
        if flat is None:
            optimizer.averaged_gradients[group] = None
            continue
        buffer = compact_grad_partition_buffer(optimizer, group)
        if buffer.flat_partition.shape != flat.shape:
            raise CheckpointError(
                f"The checkpoint's ZeRO-2 gradient partition of group {group} has {flat.numel()} elements; this "
                f"rank's has {buffer.flat_partition.numel()}. Resume with the process count it was saved with."
            )
        with torch.no_grad():
            buffer.flat_partition.copy_(flat)
        optimizer.averaged_gradients[group] = buffer


__all__ = ["engine_gradient_state", "load_engine_gradient_state", "mid_engine_window", "refuse_mid_window"]
