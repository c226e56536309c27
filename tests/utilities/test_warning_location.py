"""fabricx's warnings point at the user's line, so Python prints that line under them, not ``rank_zero_warn(``."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

from fabricx.train import Trainer
from fabricx.utilities.rank_zero import rank_zero_warn
from tests.train._train_helpers import Regressor, loader, regression_data


def test_a_trainer_warning_points_at_the_users_fit_call(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, logger=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_line = inspect.currentframe().f_lineno + 1
        trainer.fit(Regressor(), loader(regression_data(64), batch_size=32))
    # A validation_step and no validation loader: Lightning's "Skipping val loop" warning, issued in the fit loop.
    assert any("Skipping val loop" in str(w.message) for w in caught), [str(w.message) for w in caught]
    for warning in caught:
        assert (warning.filename, warning.lineno) == (__file__, fit_line), (warning.filename, warning.message)
        shown = warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno)
        assert "trainer.fit(" in shown and "rank_zero_warn(" not in shown, shown


def test_rank_zero_warn_called_here_points_here() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("direct")
        line = inspect.currentframe().f_lineno - 1
        rank_zero_warn("an explicit stacklevel is kept", stacklevel=3)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    assert caught[1].filename == __file__  # the wrapper and rank_zero_warn are the two levels below
