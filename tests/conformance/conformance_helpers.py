"""Small stand-ins for Lightning's test helpers, used by the ported conformance tests."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch


def _reasons(
    min_cuda_gpus: int = 0,
    mps: bool | None = None,
    tpu: bool = False,
    deepspeed: bool = False,
    dynamo: bool = False,
    skip_windows: bool = False,
    standalone: bool = False,
    bf16_cuda: bool = False,
    **_: object,
) -> list[str]:
    reasons = []
    if min_cuda_gpus and torch.cuda.device_count() < min_cuda_gpus:
        reasons.append(f"GPUs>={min_cuda_gpus}")
    if bf16_cuda and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        reasons.append("CUDA with bf16")
    has_mps = torch.backends.mps.is_available()
    if mps is True and not has_mps:
        reasons.append("MPS")
    if mps is False and has_mps:
        reasons.append("no MPS")
    if tpu:
        reasons.append("TPU")
    if deepspeed and importlib.util.find_spec("deepspeed") is None:
        reasons.append("deepspeed")
    if dynamo and sys.platform == "win32":
        reasons.append("dynamo (not on Windows)")
    if skip_windows and sys.platform == "win32":
        reasons.append("not Windows")
    if standalone:
        reasons.append("a standalone multi-device run")
    return reasons


def RunIf(**kwargs: object) -> pytest.MarkDecorator:
    """Skip the test where the hardware or package it needs is absent (the reason is printed)."""
    reasons = _reasons(**kwargs)  # type: ignore[arg-type]
    return pytest.mark.skipif(len(reasons) > 0, reason=f"Requires: [{' + '.join(reasons)}]")
