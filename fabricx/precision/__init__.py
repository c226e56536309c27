"""Precision plugins: which dtypes parameters, inputs and computation use."""

from fabricx.precision.amp import MixedPrecision
from fabricx.precision.precision import Precision
from fabricx.precision.true_dtype import DoublePrecision, HalfPrecision, TrueDtypePrecision

__all__ = ["DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision", "TrueDtypePrecision"]
