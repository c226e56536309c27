"""Lightning's `demos/boring_classes.py` for the callback tests: the one port in `../helpers/boring_classes.py`."""

from helpers.boring_classes import (  # noqa: F401 - re-exported for the test files here
    STEP_OUTPUT,
    BoringDataModule,
    BoringDataModuleNoLen,
    BoringModel,
    DemoModel,
    IterableBoringDataModule,
    ManualOptimBoringModel,
    Net,
    RandomDataset,
    RandomDictDataset,
    RandomIterableDataset,
    RandomIterableDatasetWithLen,
)
