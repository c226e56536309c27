"""The clients' cases that pass on Lightning and not on fabricx: client folder -> {pytest node id: reason}.

Each one runs as a strict xfail under fabricx (an unexpected pass fails), and each reason that is a deliberate
difference is a row of docs/migrating/lightning-trainer.md.
"""

from __future__ import annotations

_FITTED_NORMALIZERS = (
    "the model keeps its fitted target normalizer (a GroupNormalizer or EncoderNormalizer object, pandas and "
    "NumPy state inside) in its hyper-parameters (output_transformer) and in the checkpoint entry "
    "dataset_parameters, and loads with weights_only=False; a fabricx checkpoint holds no objects: saving "
    "dataset_parameters to the .ckpt raises CheckpointError naming it (its NumPy scalars are stored since)"
)

KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "pytorch_forecasting": {
        case: _FITTED_NORMALIZERS
        for case in (
            "tests/test_models/test_nbeats.py::test_integration",
            "tests/test_models/test_nhits.py::test_prediction_length[1]",
            "tests/test_models/test_nhits.py::test_prediction_length[5]",
        )
    },
}
