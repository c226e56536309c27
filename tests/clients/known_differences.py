"""The clients' cases that pass on Lightning and not on fabricx: client folder -> {pytest node id: reason}.

Each one runs as a strict xfail under fabricx (an unexpected pass fails), and each reason that is a deliberate
difference is a row of docs/migrating/lightning-trainer.md.
"""

from __future__ import annotations

_NO_PREDICTION_WRITER = (
    "pytorch_forecasting's base model imports BasePredictionWriter and LearningRateFinder from "
    "lightning.pytorch.callbacks; fabricx has neither, so the import fails under the alias"
)

KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "pytorch_forecasting": {
        case: _NO_PREDICTION_WRITER
        for case in (
            "tests/test_models/test_nbeats.py::test_integration",
            "tests/test_models/test_nbeats.py::test_interpretation",
            "tests/test_models/test_nbeats.py::test_pickle",
            "tests/test_models/test_nhits.py::test_prediction_length[1]",
            "tests/test_models/test_nhits.py::test_prediction_length[5]",
        )
    },
}
