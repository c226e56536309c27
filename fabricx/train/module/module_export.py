"""A `TrainModule` exported: compiled by TorchScript (``to_torchscript``) or written as ONNX (``to_onnx``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO, Any, Protocol

import torch

from fabricx.train.module.current_hook import call_hook
from fabricx.utilities.jit import jit_inspection


class ExportedModule(Protocol):
    """What an export reads of a `TrainModule`: its mode, device, example input and batch-transfer hooks
    (a protocol, so that this module, which `TrainModule` imports, does not import it back)."""

    training: bool
    example_input_array: Any

    @property
    def device(self) -> torch.device: ...
    def eval(self) -> torch.nn.Module: ...
    def train(self, mode: bool = True) -> torch.nn.Module: ...
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any: ...
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any: ...
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any: ...


def example_on_device(module: ExportedModule, example: Any) -> Any:
    """``example`` through the module's batch-transfer hooks onto its device, as Lightning moves an export's input."""
    batch = call_hook(module, "on_before_batch_transfer", module.on_before_batch_transfer, example, 0)
    batch = call_hook(module, "transfer_batch_to_device", module.transfer_batch_to_device, batch, module.device, 0)
    return call_hook(module, "on_after_batch_transfer", module.on_after_batch_transfer, batch, 0)


@torch.no_grad()
def compile_torchscript(
    module: ExportedModule,
    file_path: str | os.PathLike | IO[bytes] | None,
    method: str | None,
    example_inputs: Any,
    kwargs: dict[str, Any],
) -> Any:
    """`TrainModule.to_torchscript`: the module scripted or traced in eval mode (its mode restored after)."""
    if method not in ("script", "trace"):
        raise ValueError(f"The 'method' parameter only supports 'script' or 'trace', but value given was: {method}")
    mode = module.training
    try:
        if method == "script":
            with jit_inspection():
                compiled = torch.jit.script(module.eval(), **kwargs)
        else:
            if example_inputs is None:
                example_inputs = module.example_input_array
            if example_inputs is None:
                raise ValueError(
                    "Choosing method=`trace` requires either `example_inputs` or `model.example_input_array` to be "
                    "defined: pass to_torchscript(method='trace', example_inputs=...) or set "
                    "self.example_input_array in __init__."
                )
            if kwargs.get("check_inputs") is not None:
                kwargs["check_inputs"] = example_on_device(module, kwargs["check_inputs"])
            example_inputs = example_on_device(module, example_inputs)
            with jit_inspection():
                compiled = torch.jit.trace(module.eval(), example_inputs=example_inputs, **kwargs)
    finally:
        module.train(mode)
    if file_path is not None:
        torch.jit.save(compiled, _path_or_file(file_path))
    return compiled


def export_onnx(
    module: ExportedModule, file_path: str | os.PathLike | IO[bytes] | None, input_sample: Any, kwargs: dict[str, Any]
) -> Any:
    """`TrainModule.to_onnx`: ``torch.onnx.export`` of the module in eval mode; returns what it returned."""
    if input_sample is None:
        input_sample = module.example_input_array
    if input_sample is None:
        raise ValueError(
            "Could not export to ONNX since neither `input_sample` nor `model.example_input_array` attribute is "
            "set: pass to_onnx(file_path, input_sample=...) or set self.example_input_array in __init__."
        )
    input_sample = example_on_device(module, input_sample)
    mode = module.training
    in_eval_mode = module.eval()
    try:
        with jit_inspection():
            return torch.onnx.export(in_eval_mode, input_sample, _path_or_file(file_path), **kwargs)
    finally:
        module.train(mode)


def log_graph_to_loggers(module: ExportedModule, loggers: Iterable[Any]) -> None:
    """The module's graph to each logger, as Lightning's Trainer does when a run starts: fabricx's loggers that
    draw graphs (``TensorBoardLogger(log_graph=True)``) get it traced from `example_input_array` on the module's
    device (a logger warns when the module has no example input); any other logger gets
    ``log_graph(module)``, Lightning's call, to use or ignore."""
    example: Any = None
    for logger in loggers:
        if not hasattr(logger, "logs_graph"):
            logger.log_graph(module)
        elif logger.logs_graph:
            if example is None and module.example_input_array is not None:
                example = example_on_device(module, module.example_input_array)
            logger.log_graph(module, example)


def _path_or_file(file_path: Any) -> Any:  # torch's annotations say str, but files work
    # A path as a string; an open file (``io.BytesIO``) as it is.
    return os.fspath(file_path) if isinstance(file_path, os.PathLike) else file_path


__all__ = ["compile_torchscript", "example_on_device", "export_onnx", "log_graph_to_loggers"]
