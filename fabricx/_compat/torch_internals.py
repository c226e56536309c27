"""torch's private names that fabricx reads outside a single feature's shim.

Each is used here only; tests/_compat/test_private_names.py pins every one, so a torch release that
renames one fails there, naming this file, instead of deep inside a training step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torch.nn.modules.batchnorm import _BatchNorm


def optimizer_unscaled_this_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """Whether `scaler.unscale_(optimizer)` already ran in this step (GradScaler raises on a second call).

    Example:
        ```python
        if not optimizer_unscaled_this_step(scaler, optimizer):
            scaler.unscale_(optimizer)
        ```
    """
    from torch.amp.grad_scaler import OptState

    return scaler._per_optimizer_states[id(optimizer)]["stage"] is not OptState.READY


def fsdp_params_of(module: torch.nn.Module) -> list[Any]:
    """FSDP2's `FSDPParam` objects that `fully_shard(module)` manages directly (not its children's).

    Example:
        ```python
        for fsdp_param in fsdp_params_of(block):
            print(fsdp_param.sharded_param.shape)
        ```
    """
    group = module._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]
    return list(group.fsdp_params) if group is not None else []


def unsharded_accumulated_grad(fsdp_param: Any) -> torch.Tensor | None:
    """The gradient FSDP2 accumulates unsharded while gradient sync is off (`None` outside such a window).

    Recent torch keeps it in `unsharded_accumulated_grad` (reduce dtype); otherwise it is the private
    unsharded parameter's `.grad`.

    Example:
        ```python
        grads = {name: unsharded_accumulated_grad(p) for name, p in named_fsdp_params}
        ```
    """
    grad = fsdp_param.unsharded_accumulated_grad
    if grad is None and hasattr(fsdp_param, "_unsharded_param"):
        grad = fsdp_param._unsharded_param.grad
    return grad


def default_store() -> Any:
    """The key-value store of the default process group (raises if there is none).

    Example:
        ```python
        default_store().add("arrived", 1)
        ```
    """
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


def narrow_tensor_by_index(tensor: torch.Tensor, offsets: Any, sizes: Any) -> torch.Tensor:
    """The region of `tensor` at `offsets` with `sizes` (as torch.distributed.checkpoint reads a chunk).

    Example:
        ```python
        chunk = narrow_tensor_by_index(full, (0, 4), (2, 4))
        ```
    """
    from torch.distributed._shard._utils import narrow_tensor_by_index as narrow

    return narrow(tensor, offsets, sizes)


def has_own_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether hooks were registered on `module` itself with `register_forward(_pre)_hook`.

    Example:
        ```python
        has_own_forward_hooks(module)  # False for a plain Linear
        ```
    """
    return bool(module._forward_pre_hooks or module._forward_hooks)


def loads_state_plainly(module: torch.nn.Module) -> bool:
    """Whether `module.load_state_dict` copies each of its own tensors from the entry of the same name untouched:
    no load-state-dict pre-hooks on it, and `_load_from_state_dict` is `nn.Module`'s (or batch norm's, which only
    adds a missing ``num_batches_tracked``).

    Example:
        ```python
        loads_state_plainly(torch.nn.Linear(2, 2))  # True
        ```
    """
    from torch.nn.modules.batchnorm import _NormBase

    method = type(module)._load_from_state_dict
    plain = (torch.nn.Module._load_from_state_dict, _NormBase._load_from_state_dict)
    return not module._load_state_dict_pre_hooks and method in plain


def global_module_hooks() -> tuple[dict[int, Any], dict[int, Any], dict[int, Any], dict[int, Any]]:
    """torch's dicts of hooks registered for every module: forward, forward-pre, backward, backward-pre.

    torch adds to and removes from these dicts in place (`register_module_forward_hook` and friends), so a
    caller may keep them and test them for emptiness on every call.

    Example:
        ```python
        forward, forward_pre, backward, backward_pre = global_module_hooks()
        ```
    """
    from torch.nn.modules import module

    return (
        module._global_forward_hooks,
        module._global_forward_pre_hooks,
        module._global_backward_hooks,
        module._global_backward_pre_hooks,
    )


def prepare_ddp_reducer_for_backward(module: torch.nn.parallel.DistributedDataParallel, outputs: list[Any]) -> None:
    """Ready DDP's reducer for a backward from `outputs`, as DDP's forward does when it returns.

    Needed when a backward runs inside DDP's forward (manual optimization's `training_step`), where the
    end of forward comes too late. Buckets are rebuilt first (DDP does so at the start of each forward),
    which also checks that the previous backward finished its reduction. `outputs` lists the tensors
    to search for unused parameters (empty unless `find_unused_parameters=True`).

    Example:
        ```python
        prepare_ddp_reducer_for_backward(ddp_module, [loss])
        loss.backward()  # gradients are all-reduced during it
        ```
    """
    reducer = module.reducer
    reducer._rebuild_buckets()
    reducer.prepare_for_backward(outputs)


def batch_norm_base() -> type[_BatchNorm]:
    """torch's common base class of `BatchNorm1d/2d/3d` and `SyncBatchNorm` (private ``_BatchNorm``).

    Example:
        ```python
        frozen = [m for m in model.modules() if isinstance(m, batch_norm_base())]
        ```
    """
    from torch.nn.modules.batchnorm import _BatchNorm

    return _BatchNorm


def mkldnn_fp16_supported() -> bool:
    """Whether this CPU runs fp16 through oneDNN (private ``torch.ops.mkldnn._is_mkldnn_fp16_supported``);
    False where torch has no such check.

    Example:
        ```python
        dtype = torch.float16 if mkldnn_fp16_supported() else torch.bfloat16
        ```
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):
        return False


def detached_copy(value: torch.Tensor) -> torch.Tensor:
    """``value.detach().clone()`` in one tensor operation: the clone runs with autograd off, so no alias is made.

    What ``self.log`` keeps of each value (every step): ``detach`` is a dispatched operation of its own, and the
    public ``torch.no_grad()`` builds an object per use; torch's private switch costs neither.

    Example:
        ```python
        kept = detached_copy(loss)  # a copy that does not require grad
        ```
    """
    # Grad mode, not `value.requires_grad`, decides: a tensor's attribute read costs more than this C call.
    if not _is_grad_enabled():
        return _clone(value)
    _set_grad_enabled(False)
    try:
        return _clone(value)
    finally:
        _set_grad_enabled(True)


_clone = torch.clone  # the function: the method form costs a bound call's argument tuple more (~500 instructions)
_is_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled


def next_pass_resets_workers(loader: torch.utils.data.DataLoader) -> bool:
    """Whether the next ``iter(loader)`` resets the iterator the loader holds (persistent workers kept from a
    pass before) rather than building a new one, which first draws its workers' base seed.

    Example:
        ```python
        loader = DataLoader(dataset, num_workers=2, persistent_workers=True)
        next_pass_resets_workers(loader)  # False; True once a pass has started the workers
        ```
    """
    return bool(loader.persistent_workers) and loader.num_workers > 0 and loader._iterator is not None
