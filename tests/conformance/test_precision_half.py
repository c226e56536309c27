"""Ported from Lightning's
tests/tests_fabric/plugins/precision/test_half.py:
only the imports differ (and the tests listed in docs/migrating/lightning-fabric.md as left out are absent)."""


import pytest
import torch

from fabricx.precision import HalfPrecision

_TORCH_GREATER_EQUAL_2_4 = True


@pytest.mark.parametrize(
    ("precision", "expected_dtype"),
    [
        ("bf16-true", torch.bfloat16),
        ("16-true", torch.half),
    ],
)
def test_module_init_context(precision, expected_dtype):
    plugin = HalfPrecision(precision=precision)
    with plugin.module_init_context():
        model = torch.nn.Linear(2, 2)
        assert torch.get_default_dtype() == expected_dtype
    assert model.weight.dtype == expected_dtype


@pytest.mark.parametrize(
    ("precision", "expected_dtype"),
    [
        ("bf16-true", torch.bfloat16),
        ("16-true", torch.half),
    ],
)
def test_forward_context(precision, expected_dtype):
    precision = HalfPrecision(precision=precision)
    assert torch.get_default_dtype() == torch.float32
    with precision.forward_context():
        assert torch.get_default_dtype() == expected_dtype
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize(
    ("precision", "expected_dtype"),
    [
        ("bf16-true", torch.bfloat16),
        ("16-true", torch.half),
    ],
)
def test_convert_module(precision, expected_dtype):
    precision = HalfPrecision(precision=precision)
    module = torch.nn.Linear(2, 2)
    assert module.weight.dtype == module.bias.dtype == torch.float32
    module = precision.convert_module(module)
    assert module.weight.dtype == module.bias.dtype == expected_dtype
