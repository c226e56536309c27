"""Comparing what two frameworks returned: nested dicts, lists and tensors, with dtypes and shapes."""

from __future__ import annotations

from typing import Any

import torch


def assert_same(expected: Any, got: Any, where: str = "") -> None:
    """Equal structure, types of sequences, tensor dtypes, shapes and values; ``where`` names the place in messages."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__} instead of a tensor"
        assert got.dtype == expected.dtype and got.shape == expected.shape, (
            f"{where}: {got.dtype}{tuple(got.shape)} instead of {expected.dtype}{tuple(expected.shape)}"
        )
        assert torch.equal(got, expected), f"{where}: {got} instead of {expected}"
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), f"{where}: keys {got} vs {expected}"
        for key in expected:
            assert_same(expected[key], got[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert type(got) is type(expected) and len(got) == len(expected), f"{where}: {got!r} vs {expected!r}"
        for index, (a, b) in enumerate(zip(expected, got, strict=True)):
            assert_same(a, b, f"{where}[{index}]")
    else:
        assert got == expected, f"{where}: {got!r} instead of {expected!r}"
