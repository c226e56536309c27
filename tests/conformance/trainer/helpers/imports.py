"""The requirement flags Lightning's tests import from ``lightning.pytorch.utilities.imports``: the same checks."""

from __future__ import annotations

import operator
import sys

from lightning_utilities.core.imports import RequirementCache, compare_version

_IS_WINDOWS = sys.platform == "win32"
_TORCH_GREATER_EQUAL_2_6 = compare_version("torch", operator.ge, "2.6.0")
_TORCH_GREATER_EQUAL_2_8 = compare_version("torch", operator.ge, "2.8.0")
_TORCHMETRICS_GREATER_EQUAL_0_9_1 = RequirementCache("torchmetrics>=0.9.1")
_TORCHMETRICS_GREATER_EQUAL_0_11 = RequirementCache("torchmetrics>=0.11.0")
_OMEGACONF_AVAILABLE = RequirementCache("omegaconf")
_RICH_AVAILABLE = RequirementCache("rich>=10.2.2")
