"""Multi-process checks of the Accelerator surface, written once and run through fabricx's adapter and
(with ``ACCELERATE_SUITE_PEER=1``) through Accelerate itself by ``run_scripts.py local:surface_checks``.

Every ``test_*`` case records what it saw in ``FINAL_PARAMETERS`` (a JSON-able value per key); the
differential test asserts the two runs recorded the same values, and that every case passed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

PEER = os.environ.get("ACCELERATE_SUITE_PEER") == "1"
if PEER and not TYPE_CHECKING:  # the checker reads the fabricx side; the peer's names are the same
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD
    from accelerate.state import AcceleratorState, GradientState, PartialState
    from accelerate.utils import DataLoaderConfiguration, DDPCommunicationHookType, DistributedDataParallelKwargs

    def _fresh() -> None:
        AcceleratorState._reset_state()
        GradientState._reset_state()
else:
    from fabricx.compat.accelerate import (
        Accelerator,
        DataLoaderConfiguration,
        DDPCommunicationHookType,
        DistributedDataParallelKwargs,
        LocalSGD,
        PartialState,
    )

    def _fresh() -> None:
        pass


FINAL_PARAMETERS: dict = {}

_DDP_ATTRIBUTES = (
    "module",
    "no_sync",
    "join",
    "join_hook",
    "require_backward_grad_sync",
    "require_forward_param_sync",
    "device_ids",
    "process_group",
    "register_comm_hook",
    "find_unused_parameters",
    "static_graph",
    "gradient_as_bucket_view",
    "broadcast_buffers",
)


def test_prepared_model_answers_like_ddp() -> None:
    """Accelerate hands back DistributedDataParallel: its attributes, and no_sync() that keeps gradients local."""
    _fresh()
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = accelerator.prepare(nn.Linear(3, 1))
    answers = {name: hasattr(model, name) for name in _DDP_ATTRIBUTES}
    if accelerator.num_processes == 1:  # the plain module: none of them
        FINAL_PARAMETERS["plain_model"] = answers
        assert not any(answers.values()), answers
        return
    rank = accelerator.process_index
    x = torch.full((2, 3), float(rank + 1))
    with model.no_sync():
        model(x).sum().backward()
    local = cast(torch.Tensor, model.module.weight.grad).clone()
    model.require_backward_grad_sync = True
    model.module.weight.grad = None
    model(x).sum().backward()
    synced = cast(torch.Tensor, model.module.weight.grad).clone()
    FINAL_PARAMETERS["ddp_model"] = {
        "answers": answers,
        "module_is_user_module": type(model.module).__name__,
        "device_ids": model.device_ids,
        "local": local.tolist(),
        "synced": synced.tolist(),
    }
    assert all(answers.values()), answers


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([i]) for i in range(11))


def _as_dict(items: list) -> dict:
    return {"x": torch.tensor(items), "y": torch.tensor(items) * 2}


def _plain(batch) -> list:
    if isinstance(batch, dict):
        return [[key, value.tolist()] for key, value in batch.items()]
    return [t.tolist() for t in batch]


def _batches(loader) -> list:
    return [_plain(batch) for batch in loader]


def test_stateful_dataloader_batches() -> None:
    """use_stateful_dataloader=True: each process's batches (shapes included), then a resume mid-pass."""
    for name, make in {
        "sequential": lambda: DataLoader(TensorDataset(torch.arange(10)), batch_size=4),
        "shuffled": lambda: DataLoader(
            TensorDataset(torch.arange(18)), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3)
        ),
        "drop_last": lambda: DataLoader(TensorDataset(torch.arange(11)), batch_size=2, drop_last=True),
        "iterable": lambda: DataLoader(_Stream(), batch_size=4),
        "dict_collate": lambda: DataLoader(cast(Any, list(range(9))), batch_size=3, collate_fn=_as_dict),
        "workers": lambda: DataLoader(TensorDataset(torch.arange(10)), batch_size=3, num_workers=1),
        "global_shuffle": lambda: DataLoader(TensorDataset(torch.arange(12)), batch_size=5, shuffle=True),
    }.items():
        torch.manual_seed(7)
        _fresh()
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        loader = accelerator.prepare(make())
        length = len(loader) if hasattr(loader.dataset, "__len__") else None
        FINAL_PARAMETERS[f"stateful_{name}"] = {"length": length, "passes": [_batches(loader) for _ in range(2)]}
        iterator = iter(loader)
        next(iterator)
        state = loader.state_dict()
        rest = [_plain(batch) for batch in iterator]
        _fresh()
        again = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        torch.manual_seed(7)
        resumed = again.prepare(make())
        resumed.load_state_dict(state)
        FINAL_PARAMETERS[f"stateful_{name}_resumed_rest"] = _batches(resumed) == rest


def _model_two_loaders(stateful: bool) -> tuple:
    """What training scripts prepare: a model, its optimizer, a shuffled training loader and an evaluation loader."""
    torch.manual_seed(5)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(TensorDataset(torch.arange(18.0)), batch_size=4, shuffle=True)
    evaluation = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
    return accelerator, *accelerator.prepare(model, optimizer, train, evaluation)


def test_stateful_loaders_with_a_model() -> None:
    """use_stateful_dataloader=True with a model and two loaders, 2 epochs: the batches, the global generator's
    draws between them (a user draw right after prepare), and the trained parameters; then a resume mid-pass."""
    for stateful in (True, False):
        _fresh()
        accelerator, model, optimizer, train, evaluation = _model_two_loaders(stateful)
        seen: list = [torch.rand(1).item()]
        for _ in range(2):
            for (x,) in train:
                seen.append(x.tolist())
                accelerator.backward(model(x[:, None]).square().mean())
                optimizer.step()
                optimizer.zero_grad()
            seen.append(_batches(evaluation))
            seen.append(torch.rand(1).item())
        seen.append([p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()])
        FINAL_PARAMETERS[f"model_two_loaders_stateful_{stateful}"] = seen
    _fresh()
    accelerator, model, optimizer, train, evaluation = _model_two_loaders(True)
    iterator = iter(train)
    next(iterator)
    state = train.state_dict()
    rest = [_plain(batch) for batch in iterator]
    _fresh()
    again = _model_two_loaders(True)[3]
    again.load_state_dict(state)
    FINAL_PARAMETERS["model_two_loaders_resumed_rest"] = _batches(again) == rest


def _train(accelerator, steps: int = 4, local_sgd_steps: int | None = None) -> list:
    """A few SGD steps of a small MLP on per-process data; the final parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(10 + accelerator.process_index)
    batches = [(torch.randn(4, 6, generator=generator), torch.randn(4, 2, generator=generator)) for _ in range(steps)]

    def step(x, y):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    if local_sgd_steps is None:
        for x, y in batches:
            step(x, y)
    else:
        with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps) as local_sgd:
            for x, y in batches:
                step(x, y)
                local_sgd.step()
    return [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()]


# bf16 compression needs CUDA and NCCL (torch refuses it on gloo, under Accelerate too), and PowerSGD's
# batched variant fails its orthogonalisation on CPU (under Accelerate too), so neither runs here.
_HOOKS = {
    "fp16": {"comm_hook": DDPCommunicationHookType.FP16},
    "power_sgd": {
        "comm_hook": DDPCommunicationHookType.POWER_SGD,
        "comm_state_option": {"start_powerSGD_iter": 2, "matrix_approximation_rank": 1, "min_compression_rate": 0},
    },
    "options": {"find_unused_parameters": True, "gradient_as_bucket_view": True},
}


def test_ddp_kwargs_and_comm_hooks() -> None:
    """DistributedDataParallelKwargs: DDP options and communication hooks; the final parameters."""
    for name, options in {"none": {}, **_HOOKS}.items():
        _fresh()
        handlers = [DistributedDataParallelKwargs(**options)] if options else []
        FINAL_PARAMETERS[f"ddp_kwargs_{name}"] = _train(Accelerator(cpu=True, kwargs_handlers=handlers))
    if _world() > 1:  # compression changes the numbers
        assert FINAL_PARAMETERS["ddp_kwargs_fp16"] != FINAL_PARAMETERS["ddp_kwargs_none"]
        assert FINAL_PARAMETERS["ddp_kwargs_power_sgd"] != FINAL_PARAMETERS["ddp_kwargs_none"]


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def test_local_sgd() -> None:
    """LocalSGD: local steps, parameters averaged every 2 steps and on leaving."""
    _fresh()
    FINAL_PARAMETERS["local_sgd"] = _train(Accelerator(cpu=True), steps=5, local_sgd_steps=2)


def process_selections(accelerator: Any, state: Any) -> dict:
    """What every process-selecting decorator of an Accelerator and of a PartialState does on this process, for
    each index 0..2 (one more than two processes have): the call's result, or None where it was skipped."""

    def ran(*args: Any, **kwargs: Any) -> list:
        return ["ran", list(args), kwargs]

    seen: dict[str, Any] = {}
    for owner_name, owner in (("accelerator", accelerator), ("state", state)):
        seen[f"{owner_name}.on_main_process"] = owner.on_main_process(ran)(1)
        seen[f"{owner_name}.on_local_main_process"] = owner.on_local_main_process(ran)(1)
        seen[f"{owner_name}.on_last_process"] = owner.on_last_process(ran)(1)
        for index in range(3):
            name = f"{owner_name}.on_process"
            seen[f"{name}({index})"] = owner.on_process(ran, process_index=index)(1)
            seen[f"{name}(process_index={index})(f)"] = owner.on_process(process_index=index)(ran)(x=2)
            seen[f"{owner_name}.on_local_process({index})"] = owner.on_local_process(ran, local_process_index=index)(1)
    # the state hands back the function itself where it runs, so it stays the same object
    seen["state.on_main_process(f) is f"] = state.on_main_process(ran) is ran
    return seen


def test_process_selection() -> None:
    """on_main_process, on_last_process, on_process(process_index=...), on_local_process: who runs what."""
    _fresh()
    accelerator = Accelerator(cpu=True)
    FINAL_PARAMETERS["process_selection"] = process_selections(accelerator, PartialState())


def fabric_ddp_comm_hook_check() -> None:
    """fabricx's own DDPStrategy(ddp_comm_hook=..., ddp_comm_state=..., ddp_comm_wrapper=...) gives what torch's
    DistributedDataParallel with that hook registered gives (and the adapter's handler, recorded above)."""
    if _world() == 1:
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy

    def state():
        return powerSGD_hook.PowerSGDState(None, start_powerSGD_iter=2, matrix_approximation_rank=1,
                                           min_compression_rate=0)

    for hook, wrapper, make_state in (
        (default_hooks.fp16_compress_hook, None, lambda: None),
        (powerSGD_hook.powerSGD_hook, None, state),
        (default_hooks.allreduce_hook, default_hooks.fp16_compress_wrapper, lambda: None),
    ):
        fabric = Fabric(accelerator="cpu", strategy=DDPStrategy(ddp_comm_hook=hook, ddp_comm_state=make_state(),
                                                                ddp_comm_wrapper=wrapper))
        fabric.launch()
        results = []
        for use_fabric in (True, False):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            if use_fabric:
                wrapped, optimizer = fabric.setup(model, optimizer)
            else:
                wrapped = torch.nn.parallel.DistributedDataParallel(model)
                wrapped.register_comm_hook(make_state(), hook if wrapper is None else wrapper(hook))
            generator = torch.Generator().manual_seed(10 + fabric.global_rank)
            for _ in range(4):
                x, y = torch.randn(4, 6, generator=generator), torch.randn(4, 2, generator=generator)
                loss = nn.functional.mse_loss(wrapped(x), y)
                fabric.backward(loss) if use_fabric else loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            results.append([p.detach().clone() for p in model.parameters()])
        assert all(torch.equal(a, b) for a, b in zip(*results, strict=True)), hook.__name__


def main() -> None:
    test_prepared_model_answers_like_ddp()
    test_stateful_dataloader_batches()
    test_stateful_loaders_with_a_model()
    test_ddp_kwargs_and_comm_hooks()
    test_local_sgd()
    test_process_selection()
    if not PEER:
        fabric_ddp_comm_hook_check()
