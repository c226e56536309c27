"""Messages shared by the DataModule and the TrainModule: a loader hook the user did not define."""

from __future__ import annotations

from typing import Any

from fabricx.utilities.exceptions import MisconfigurationException


def missing_loader_hook(owner: Any, method: str, stage: str) -> MisconfigurationException:
    """The error a loader hook of a DataModule or TrainModule raises when the user did not define it
    (Lightning's exception type and phrase, and what to do).

    Example:
        ```python
        raise missing_loader_hook(self, "train_dataloader", "fit")
        ```
    """
    return MisconfigurationException(
        f"`{method}` must be implemented to be used with the Lightning Trainer: {type(owner).__name__} has no "
        f"{method}(), which Trainer.{stage} needs. Define {method}(self) returning a DataLoader, or pass the "
        "loader to the Trainer call."
    )
