"""One mechanism keeps wrapped objects looking like the user's own: class, attributes, pickling."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from fabricx import Fabric
from fabricx.utilities.identity import facade_class, gate_method, intercept_method, user_class
from fabricx.wrappers import FabricOptimizer


def _setup(grad_accum_steps: int = 1):
    fabric = Fabric(accelerator="cpu", grad_accum_steps=grad_accum_steps)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return fabric, model, optimizer, scheduler


def test_optimizer_attributes_are_read_and_written_through_not_copied():
    fabric, model, optimizer, _ = _setup()
    _, wrapped = fabric.setup(model, optimizer)
    assert isinstance(wrapped, torch.optim.SGD) and isinstance(wrapped, FabricOptimizer)
    assert type(wrapped).__name__ == "SGD"
    optimizer.custom_flag = "set later on the user's optimizer"
    assert wrapped.custom_flag == "set later on the user's optimizer"  # a copy would miss it
    wrapped.another = 3
    assert optimizer.another == 3 and "another" not in wrapped.__dict__
    wrapped.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})  # torch's method, on the wrapper
    assert len(optimizer.param_groups) == 2
    del wrapped.another
    assert not hasattr(optimizer, "another")


def test_one_class_per_optimizer_class_and_setting_up_a_wrapper_is_a_value_error():
    fabric, model, optimizer, _ = _setup()
    _, first = fabric.setup(model, optimizer)
    _, second = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert type(first) is type(second)
    with pytest.raises(ValueError, match="An optimizer should be passed only once"):
        fabric.setup_optimizers(first)


def test_scheduler_keeps_class_state_dict_and_pickles_as_the_users_class():
    fabric, model, optimizer, scheduler = _setup(grad_accum_steps=2)
    keys = set(scheduler.state_dict())
    model, optimizer, scheduler = fabric.setup(model, optimizer, scheduler=scheduler)
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR)
    assert type(scheduler).__name__ == "StepLR" and user_class(scheduler) is torch.optim.lr_scheduler.StepLR
    assert set(scheduler.state_dict()) == keys
    restored = pickle.loads(pickle.dumps(scheduler))
    assert type(restored) is torch.optim.lr_scheduler.StepLR
    assert restored.state_dict()["last_epoch"] == scheduler.state_dict()["last_epoch"]
    assert type(copy.deepcopy(scheduler)) is torch.optim.lr_scheduler.StepLR
    # Off a boundary the step is skipped, on a boundary it runs.
    lr = optimizer.param_groups[0]["lr"]
    for expected in (lr, lr * 0.5):
        with fabric.accumulate(model):
            fabric.backward(model(torch.ones(1, 2)).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        assert optimizer.param_groups[0]["lr"] == expected


def test_intercepts_stack_and_replace_per_tag():
    _, _, _, scheduler = _setup()
    calls = []
    intercept_method(scheduler, "step", lambda s, step, *a, **k: calls.append("a") or step(*a, **k), tag="a")
    intercept_method(scheduler, "step", lambda s, step, *a, **k: calls.append("b") or step(*a, **k), tag="b")
    scheduler.step()
    assert calls == ["b", "a"]
    gate_method(scheduler, "step", lambda: False, tag="a")  # replaces the handler of tag "a"
    calls.clear()
    before = scheduler.last_epoch
    scheduler.step()
    assert calls == ["b"] and scheduler.last_epoch == before
    assert pickle.loads(pickle.dumps(scheduler)).__class__ is torch.optim.lr_scheduler.StepLR


def test_a_scheduler_created_after_setup_sees_the_step():
    fabric, model, optimizer, _ = _setup()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.5))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer.optimizer, step_size=1)  # over the user's optimizer
    fabric.backward(model(torch.ones(1, 2)).sum())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        optimizer.step()
        scheduler.step()


def test_facade_classes_are_cached():
    assert facade_class(None, torch.optim.Adam, tag="t") is facade_class(None, torch.optim.Adam, tag="t")
