"""Messages shared by the DataModule and the TrainModule: a loader hook the user did not define."""

from __future__ import annotations

from typing import Any


def missing_loader_hook(owner: Any, method: str, stage: str) -> str:
    """Why a loader hook of a DataModule or TrainModule the user did not define cannot be called.

    Example:
        ```python
        raise NotImplementedError(missing_loader_hook(self, "train_dataloader", "fit"))
        ```
    """
    return (
        f"{type(owner).__name__} has no {method}(), which Trainer.{stage} needs. Define "
        f"{method}(self) returning a DataLoader, or pass the loader to the Trainer call."
    )
