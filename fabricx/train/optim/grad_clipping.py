"""The gradient-clipping algorithms ``Trainer(gradient_clip_algorithm=...)`` and ``clip_gradients`` accept."""

from __future__ import annotations

from lightning_utilities.core.enums import StrEnum


class GradClipAlgorithmType(StrEnum):
    """``"norm"`` clips the gradients' total norm, ``"value"`` each gradient element (Lightning's enum).

    Example:
        ```python
        self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm=GradClipAlgorithmType.VALUE)
        ```
    """

    VALUE = "value"
    NORM = "norm"


__all__ = ["GradClipAlgorithmType"]
