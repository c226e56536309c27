"""``RunIf`` as Lightning's test helper spells it: skip where the hardware or package a test needs is absent."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from lightning_utilities.core.imports import compare_version


def _reasons(
    min_cuda_gpus: int = 0,
    min_torch: str | None = None,
    max_torch: str | None = None,
    min_python: str | None = None,
    bf16_cuda: bool = False,
    tpu: bool = False,
    mps: bool | None = None,
    skip_windows: bool = False,
    standalone: bool = False,
    deepspeed: bool = False,
    rich: bool = False,
    omegaconf: bool = False,
    sklearn: bool = False,
    onnx: bool = False,
    dynamo: bool = False,
    linux_only: bool = False,
    **_: object,
) -> list[str]:
    import operator

    reasons = []
    if min_cuda_gpus and torch.cuda.device_count() < min_cuda_gpus:
        reasons.append(f"GPUs>={min_cuda_gpus}")
    if min_torch and not compare_version("torch", operator.ge, min_torch):
        reasons.append(f"torch>={min_torch}")
    if max_torch and not compare_version("torch", operator.lt, max_torch):
        reasons.append(f"torch<{max_torch}")
    if min_python and sys.version_info < tuple(int(part) for part in min_python.split(".")):
        reasons.append(f"python>={min_python}")
    if bf16_cuda and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        reasons.append("CUDA with bf16")
    if tpu:
        reasons.append("TPU")
    has_mps = torch.backends.mps.is_available()
    if mps is True and not has_mps:
        reasons.append("MPS")
    if mps is False and has_mps:
        reasons.append("no MPS")
    if skip_windows and sys.platform == "win32":
        reasons.append("not Windows")
    if linux_only and not sys.platform.startswith("linux"):
        reasons.append("Linux")
    if standalone:
        reasons.append("a standalone multi-device run")
    for flag, package in ((deepspeed, "deepspeed"), (rich, "rich"), (omegaconf, "omegaconf"),
                          (sklearn, "sklearn"), (onnx, "onnx")):
        if flag and importlib.util.find_spec(package) is None:
            reasons.append(package)
    if dynamo and sys.platform == "win32":
        reasons.append("dynamo (not on Windows)")
    return reasons


def RunIf(**kwargs: object) -> pytest.MarkDecorator:
    """`@RunIf(sklearn=True)`: skip where the requirement is absent (the reason says which)."""
    reasons = _reasons(**kwargs)  # type: ignore[arg-type]
    return pytest.mark.skipif(len(reasons) > 0, reason=f"Requires: [{' + '.join(reasons)}]")


# Lightning xfails gloo on Windows with torch 2.8+; this suite does not run on Windows.
_xfail_gloo_windows = pytest.mark.xfail(
    RuntimeError, strict=True, condition=sys.platform == "win32", reason="makeDeviceForHostname(): unsupported gloo device"
)
