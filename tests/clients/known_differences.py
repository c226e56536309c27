"""The clients' cases that pass on Lightning and not on fabricx: client folder -> {pytest node id: reason}.

Each one runs as a strict xfail under fabricx (an unexpected pass fails), and each reason that is a deliberate
difference is a row of docs/migrating/lightning-trainer.md.
"""

from __future__ import annotations

_NUMPY_HPARAMS = (
    "the model's hyper-parameters hold NumPy scalars (dataset_parameters' min_prediction_idx); ModelCheckpoint's "
    "single .ckpt file refuses values torch.load(weights_only=True) cannot read back (CheckpointError naming the "
    "key), where Lightning pickles them"
)

KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "pytorch_forecasting": {
        case: _NUMPY_HPARAMS
        for case in (
            "tests/test_models/test_nbeats.py::test_integration",
            "tests/test_models/test_nhits.py::test_prediction_length[1]",
            "tests/test_models/test_nhits.py::test_prediction_length[5]",
        )
    },
}
