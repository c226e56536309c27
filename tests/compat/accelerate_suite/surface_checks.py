"""Multi-process checks of the Accelerator surface, written once and run through fabricx's adapter and
(with ``ACCELERATE_SUITE_PEER=1``) through Accelerate itself by ``run_scripts.py local:surface_checks``.

Every ``test_*`` case records what it saw in ``FINAL_PARAMETERS`` (a JSON-able value per key); the
differential test asserts the two runs recorded the same values, and that every case passed."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if os.environ.get("ACCELERATE_SUITE_PEER") == "1":
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration

    def _fresh() -> None:
        AcceleratorState._reset_state()
        GradientState._reset_state()
else:
    from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration

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
    local = model.module.weight.grad.clone()
    model.require_backward_grad_sync = True
    model.module.weight.grad = None
    model(x).sum().backward()
    synced = model.module.weight.grad.clone()
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
        "dict_collate": lambda: DataLoader(list(range(9)), batch_size=3, collate_fn=_as_dict),
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


def main() -> None:
    test_prepared_model_answers_like_ddp()
    test_stateful_dataloader_batches()
