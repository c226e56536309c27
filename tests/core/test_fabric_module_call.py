"""FabricModule's own call path: hooks on the wrapper, global module hooks and compile() still run.

The wrapper skips nn.Module's call machinery when nothing uses it (it is on every step's path);
these tests fail if that shortcut ever drops a hook or a compiled call.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fabricx import Fabric


def _set_up(precision: str = "32-true") -> tuple[Fabric, nn.Module]:
    fabric = Fabric(accelerator="cpu", precision=precision)  # type: ignore[arg-type]
    torch.manual_seed(0)
    return fabric, fabric.setup_module(nn.Linear(4, 2))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_hooks_on_the_wrapper_run_and_can_change_inputs_and_outputs(precision: str) -> None:
    _, model = _set_up(precision)
    x = torch.randn(3, 4, requires_grad=True)
    plain, doubled = model(x), model(x * 2)
    calls: list[str] = []

    def pre(module, args):
        calls.append("pre")
        return (args[0] * 2,)

    def post(module, args, output):
        calls.append("post")
        return output + 1

    def backward(module, grad_input, grad_output):
        calls.append("backward")

    handles = [
        model.register_forward_pre_hook(pre),
        model.register_forward_hook(post),
        model.register_full_backward_hook(backward),
    ]
    hooked = model(x)
    hooked.sum().backward()
    assert calls == ["pre", "post", "backward"]
    torch.testing.assert_close(hooked, doubled + 1)
    for handle in handles:
        handle.remove()
    calls.clear()
    torch.testing.assert_close(model(x), plain)
    assert calls == []


def test_global_module_hooks_see_the_wrapper_like_any_module() -> None:
    _, model = _set_up()
    seen: list[type] = []
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, output: seen.append(type(module)))
    try:
        model(torch.randn(2, 4))
    finally:
        handle.remove()
    assert [cls.__name__ for cls in seen] == ["Linear", "FabricModule"]
    seen.clear()
    model(torch.randn(2, 4))
    assert seen == []


def test_compiling_the_wrapper_runs_the_compiled_call() -> None:
    _, model = _set_up()
    x = torch.randn(2, 4)
    expected = model(x)
    calls = []

    def compiled(*args, **kwargs):
        calls.append(args)
        return model._call_impl(*args, **kwargs)

    model.__dict__["_compiled_call_impl"] = compiled  # what nn.Module.compile() sets
    torch.testing.assert_close(model(x), expected)
    assert len(calls) == 1
    del model.__dict__["_compiled_call_impl"]
    model.compile(backend="eager")
    torch.testing.assert_close(model(x), expected)
    assert model.__dict__.get("_compiled_call_impl") is not None
