"""``save_image`` as the DCGAN example calls it: the grid is saved as a tensor file (no image codec here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def save_image(tensor: torch.Tensor, fp: str | Path, **kwargs: Any) -> None:
    torch.save(tensor.detach().cpu(), fp)
