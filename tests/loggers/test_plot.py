"""`fabricx plot`: a PNG of every curve a CSV logger wrote."""

from __future__ import annotations

from fabricx.cli import main
from fabricx.loggers import CSVLogger
from fabricx.loggers.plot import read_metrics


def test_plot_writes_a_png_of_the_logged_curves(tmp_path, capsys):
    for version in range(2):
        logger = CSVLogger(tmp_path, name="exp")
        for step in range(5):
            logger.log_metrics({"loss": 1.0 / (step + 1 + version)}, step=step)
        logger.log_metrics({"val_acc": 0.5, "epoch": 0}, step=4)
        logger.finalize("success")
    series = read_metrics(tmp_path / "exp" / "version_0" / "metrics.csv")
    assert series["loss"] == [(float(s), 1.0 / (s + 1)) for s in range(5)]
    assert series["val_acc"] == [(4.0, 0.5)] and "epoch" not in series

    assert main(["plot", str(tmp_path)]) == 0
    png = tmp_path / "metrics.png"
    assert capsys.readouterr().out.strip() == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_plot_of_a_folder_without_logs_fails_with_advice(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 1
    assert "No metrics.csv" in capsys.readouterr().err
