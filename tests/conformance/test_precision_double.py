"""Ported from Lightning's
tests/tests_fabric/plugins/precision/test_double.py:
only the imports differ (and the tests listed in docs/migrating/lightning-fabric.md as left out are absent)."""


import torch

from fabricx.precision import DoublePrecision

_TORCH_GREATER_EQUAL_2_4 = True


def test_double_precision_forward_context():
    precision = DoublePrecision()
    assert torch.get_default_dtype() == torch.float32
    with precision.forward_context():
        assert torch.get_default_dtype() == torch.float64
    assert torch.get_default_dtype() == torch.float32


def test_convert_module():
    precision = DoublePrecision()
    module = torch.nn.Linear(2, 2)
    assert module.weight.dtype == module.bias.dtype == torch.float32
    module = precision.convert_module(module)
    assert module.weight.dtype == module.bias.dtype == torch.float64
