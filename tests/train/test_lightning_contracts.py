"""Contracts real Lightning projects rely on, pinned by running the same user code through Lightning and fabricx.

``lightning_source/contracts.py`` is ordinary Lightning code; ``_lightning_differential.py --source=contracts``
runs it as is and with its imports swapped for fabricx's (one subprocess, both sides). Each case is compared
with Lightning's result: weights bit for bit on CPU, warnings, exception types, files written. Where fabricx
differs on purpose (a code-free checkpoint leaves non-plain hyper-parameters out) the test pins what it says
instead, as the migration guide's row does.

``rank_zero_only.rank`` is set when the library is imported, which only a fresh process shows: one process per
side and rank.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _lightning_differential import case as _case
from _lightning_differential import run_both
from _lightning_differential import same_weights as _same_weights

pytest.importorskip("lightning")
pytestmark = pytest.mark.timeout(600)

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_both(tmp_path_factory.mktemp("lightning_contracts"), "contracts", timeout=540)


def test_callbacks_logger_and_plugins_accept_any_iterable(results):
    # callbacks as a list-like non-list (Hydra's ListConfig), logger as a generator, plugins as a tuple.
    lightning, fabricx = _case(results, "iterable_flags")
    assert fabricx["batches_counted"] == lightning["batches_counted"] == 8
    assert fabricx["loggers"] == lightning["loggers"] == ["CSVLogger"]
    assert fabricx["log_dir_exists"] and lightning["log_dir_exists"]
    _same_weights(lightning["weights"], fabricx["weights"])
    assert fabricx["weights"]["net.weight"].dtype == torch.float64  # the plugin inside the tuple was used


def test_unknown_key_in_the_optimizer_dict_is_warned_about_and_left_out(results):
    lightning, fabricx = _case(results, "unknown_optimizer_key")
    assert lightning["warnings"] == ["Found unsupported keys in the optimizer configuration: {'scheduler'}"]
    assert len(fabricx["warnings"]) == 1 and fabricx["warnings"][0].startswith(lightning["warnings"][0])
    assert fabricx["lr"] == lightning["lr"] == 0.1  # the misspelled scheduler never stepped
    _same_weights(lightning["weights"], fabricx["weights"])


def test_trainer_model_is_the_module_inside_configure_optimizers(results):
    lightning, fabricx = _case(results, "trainer_model")
    assert fabricx["seen"] == lightning["seen"] == {"is_self": True, "type": "OptimizesTrainerModel"}
    _same_weights(lightning["weights"], fabricx["weights"])


def test_val_loop_data_source_says_whether_fit_has_validation_data(results):
    lightning, fabricx = _case(results, "val_data_source")
    assert fabricx["seen"] == lightning["seen"] == {"given": True, "none": False, "module_method": True}


def test_validation_inside_fit_is_no_grad_not_inference_mode(results):
    lightning, fabricx = _case(results, "grad_in_validation")
    assert lightning["fit_error"] is None and fabricx["fit_error"] is None, (lightning, fabricx)
    assert fabricx["validate_error"] == lightning["validate_error"]  # trainer.validate: inference mode, both
    assert fabricx["modes"] == lightning["modes"] == [("fit", False), ("validate", True)]


def test_non_plain_hyperparameters_are_named_when_saving_and_loading(results):
    lightning, fabricx = _case(results, "non_plain_hparams")
    _same_weights(lightning["weights"], fabricx["weights"])
    # Passed again, the module loads the same on both.
    assert fabricx["passed_again"]["hidden"] == lightning["passed_again"]["hidden"] == 3
    _same_weights(lightning["passed_again"]["weights"], fabricx["passed_again"]["weights"])
    # Lightning pickles the module and the partial; fabricx's code-free file leaves them out and says so.
    assert lightning["without_them"] is None
    (warning,) = [m for m in fabricx["save_warnings"] if "save_hyperparameters()" in m]
    assert "'net' (a Linear)" in warning and "'optimizer' (a partial)" in warning
    assert "WithSubmodule.load_from_checkpoint(path, net=..., optimizer=...)" in warning
    error = fabricx["without_them"]
    assert error["types"][0] == "TypeError"  # what calling __init__ without the argument raises
    assert "needs 'net'" in error["message"] and "'net' was a Linear" in error["message"]
    assert "WithSubmodule.load_from_checkpoint(path, net=...)" in error["message"]


def test_csv_columns_are_in_lightnings_order(results):
    lightning, fabricx = _case(results, "csv_columns")
    assert fabricx["header"] == lightning["header"] == ["alpha_loss", "epoch", "step", "zeta_loss"]


def test_csv_rows_without_a_step_get_lightnings_step(results):
    lightning, fabricx = _case(results, "csv_steps_without_step")
    assert fabricx["rows"] == lightning["rows"]
    assert [row["step"] for row in lightning["rows"]] == ["0", "1", "2", "0", "1", "2", "0"]


def test_checkpoint_holds_lightnings_hyperparameter_entries(results):
    lightning, fabricx = _case(results, "checkpoint_hparams_keys")
    assert fabricx == lightning
    assert lightning["datamodule_hparams_name"] == "kwargs"


def test_hyperparameters_given_whole_load_back_under_the_argument_they_came_in(results):
    # save_hyperparameters(config): Lightning records the argument's name (`hparams_name`) and load_from_checkpoint
    # passes the values back as `config=...`; a Hydra DictConfig is kept as hparams itself, not copied into a dict.
    lightning, fabricx = _case(results, "hparams_given_whole")
    for kind in ("dict", "namespace", "dictconfig"):
        ours, theirs = fabricx[kind], lightning[kind]
        assert ours["types"] == theirs["types"], kind
        assert ours["entries"] == theirs["entries"], kind
        assert ours["entries"]["hparams_name"] == "config"
        assert ours["loaded"] == theirs["loaded"] == ours["entries"]["hyper_parameters"], kind
        assert ours["loaded_type"] == theirs["loaded_type"], kind
        # An hparams_file replaces the saved hyper-parameters; a keyword overrides one inside the config.
        assert ours["from_file"] == theirs["from_file"], kind
        assert ours["from_file"][1] == {"lr": 0.2}
        assert ours["overridden"] == theirs["overridden"] == {**ours["loaded"], "lr": 0.3}, kind
        # DataModule.load_from_checkpoint: its hyper-parameters (given whole, overridden) and its state_dict entry.
        assert ours["datamodule"] == theirs["datamodule"] == ["AttributeDict", {"batch_size": 4, "seed": 5}, 1]
        _same_weights(theirs["weights"], ours["weights"])
        _same_weights(ours["weights"], ours["loaded_weights"])
    assert fabricx["dictconfig"]["types"] == ["DictConfig", "DictConfig"]
    assert fabricx["dictconfig"]["loaded_type"] == "DictConfig"
    # Lightning pickles the config's class as `hparams_type`; fabricx's code-free file names it (Lightning reads a
    # name as "a plain dict").
    assert lightning["dictconfig"]["saved_type"] == "DictConfig" == fabricx["dictconfig"]["saved_type"]


def test_loggers_get_the_hyperparameters_in_every_entry_point_as_lightnings_do(results):
    # Lightning logs the hyper-parameters (then the graph, then save()) in fit, validate, test and predict: after
    # on_fit_start, before the sanity check; it finalizes the loggers after the teardown hooks, predict included.
    # A CSVLogger given to test() alone writes hparams.yaml, an Enum by its name.
    lightning, fabricx = _case(results, "logging_in_every_entry_point")
    assert fabricx["calls"] == lightning["calls"]
    hparams_first = [("log_hyperparams", ["lr", "mode"]), ("log_graph", "EvaluatedRegressor", True), ("save",)]
    assert fabricx["calls"]["test"][:3] == hparams_first
    assert fabricx["calls"]["predict"][-2:] == [("teardown", "predict"), ("finalize", "success")]
    assert fabricx["hparams_yaml"] == lightning["hparams_yaml"] == "lr: 0.1\nmode: FAST\n"
    _same_weights(lightning["weights"], fabricx["weights"])


def test_a_run_that_raises_calls_on_exception_and_no_teardown_hook_as_lightnings_does(results):
    # Lightning's _call_and_handle_interrupt: on_exception, the loggers finalized "failed", the state INTERRUPTED,
    # the user's error raised as it was; the teardown hooks (module, callbacks, data module) are not called.
    lightning, fabricx = _case(results, "failing_entry_points")
    assert fabricx == lightning
    for stage, step in (("fit", "training_step"), ("test", "test_step")):
        calls = fabricx[stage]["calls"]
        assert calls[-2:] == [("on_exception", "ValueError", f"{step} failed"), ("finalize", "failed")]
        assert not [call for call in calls if "teardown" in call[0]]
        assert fabricx[stage]["status"] == "TrainerStatus.INTERRUPTED"


def test_an_accumulation_schedule_trains_as_lightnings_and_is_refused_where_lightnings_is(results):
    # GradientAccumulationScheduler({1: 2, 3: 4}) over 4 epochs of 8 batches: each epoch's factor, step count and
    # weights bit for bit; beside Trainer(accumulate_grad_batches=2) a ValueError, with manual optimization a
    # RuntimeError (Lightning's message wraps a triple-quoted line: compared with its white space folded).
    lightning, fabricx = _case(results, "accumulation_schedule")
    assert [epoch[:2] for epoch in fabricx["epochs"]] == [(1, 8), (2, 12), (2, 16), (4, 18)]
    for theirs, ours in zip(lightning["epochs"], fabricx["epochs"], strict=True):
        assert ours[:2] == theirs[:2]
        _same_weights(theirs[2], ours[2])
    assert fabricx["with_the_trainer_flag"] == lightning["with_the_trainer_flag"]
    for side in (lightning, fabricx):
        side["manual"]["message"] = " ".join(side["manual"]["message"].split())
    assert fabricx["manual"] == lightning["manual"]


def test_an_ema_of_the_weights_validates_saves_and_resumes_as_lightnings(results):
    # EMAWeightAveraging(decay=0.8, update_every_n_steps=2, update_starting_at_step=1) with accumulation 2 over
    # 3 epochs, a batch norm among the averaged buffers: the validation losses (on the averaged weights), the
    # weights after training (the average copied in), the average itself and last.ckpt's three entries bit for bit;
    # a fit resumed from an epoch's last.ckpt ends where the uninterrupted one does, on both.
    lightning, fabricx = _case(results, "weight_averaging")
    assert len(fabricx["val_losses"]) == 6 and len(fabricx["resumed_val_losses"]) == 2
    for key in ("val_losses", "resumed_val_losses"):
        assert all(torch.equal(a, b) for a, b in zip(lightning[key], fabricx[key], strict=True)), key
    for key in ("weights", "average", "resumed_weights", "resumed_average"):
        _same_weights(lightning[key], fabricx[key])
    for key in ("state_dict", "current_model_state", "averaging_state"):
        _same_weights(lightning["checkpoint"][key], fabricx["checkpoint"][key])
    for side in (lightning, fabricx):
        _same_weights(side["weights"], side["resumed_weights"])
        _same_weights(side["average"], side["resumed_average"])
    # Deliberate: fabricx's state also keeps the epoch of the last update (a file of Lightning's lacks it).
    assert fabricx["callback_state"] == {**lightning["callback_state"], "latest_update_epoch": -1}


def test_a_checkpoint_saved_at_a_batch_end_holds_what_the_modules_batch_end_hook_did(results):
    # Deliberate difference (the migration guide's row): Lightning calls every callback's on_train_batch_end, then
    # the module's, so a ModelCheckpoint saving every n steps writes the module's state from before its hook ran for
    # that batch, and a fit resumed from the file never runs that hook again: the update is lost. fabricx calls the
    # module's hook before the monitoring callbacks' (as Lightning orders on_train_epoch_end).
    lightning, fabricx = _case(results, "batch_end_before_checkpoint")
    assert lightning["saved"] == [(2, 1), (4, 3), (6, 5), (8, 7)]
    assert fabricx["saved"] == [(2, 2), (4, 4), (6, 6), (8, 8)]
    assert lightning["batch_ends"] == fabricx["batch_ends"] == 8
    assert (lightning["resumed_batch_ends"], fabricx["resumed_batch_ends"]) == (7, 8)


def test_missing_and_unwritable_checkpoints_raise_the_os_errors_lightning_raises(results):
    lightning, fabricx = _case(results, "missing_and_read_only")
    for case in ("fit_missing", "load_missing"):
        assert "FileNotFoundError" in lightning[case]["types"]
        assert "FileNotFoundError" in fabricx[case]["types"], fabricx[case]
    for case in ("save_read_only_subfolder", "checkpoint_callback_read_only"):
        assert lightning[case]["types"][0] == "PermissionError"
        assert "PermissionError" in fabricx[case]["types"], fabricx[case]
    # A file straight in the unwritable folder: Lightning's fsspec check fails first (a RuntimeError naming
    # fsspec); fabricx reports the refused write.
    assert "PermissionError" in fabricx["save_read_only"]["types"]
    # Callers that catch fabricx's own type keep working.
    for case in ("load_missing", "save_read_only", "checkpoint_callback_read_only"):
        assert "CheckpointError" in fabricx[case]["types"], fabricx[case]


# -- fabricx only: forms Lightning refuses ------------------------------------------------------------------------
def test_callbacks_as_tuple_or_generator(tmp_path):
    # Lightning appends its default callbacks to what it was given, so a tuple or a generator fails there
    # (AttributeError: no append); fabricx takes any iterable.
    from fabricx.callbacks import Callback
    from fabricx.precision import DoublePrecision
    from fabricx.train import Trainer

    class Marker(Callback):
        pass

    first, second = Marker(), Marker()
    for given in ((first, second), (cb for cb in [first, second])):
        trainer = Trainer(
            callbacks=given,
            plugins=(plugin for plugin in [DoublePrecision()]),
            logger=False,
            accelerator="cpu",
            default_root_dir=tmp_path,
            enable_progress_bar=False,
        )
        assert [cb for cb in trainer.callbacks if isinstance(cb, Marker)] == [first, second]
        assert isinstance(trainer.fabric.strategy.precision, DoublePrecision)


def test_fabric_load_of_a_missing_path_is_a_file_not_found_error(tmp_path):
    from fabricx import Fabric
    from fabricx.utilities.exceptions import CheckpointError

    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(FileNotFoundError, match="No checkpoint found at") as caught:
        fabric.load(tmp_path / "missing")
    assert isinstance(caught.value, CheckpointError)


def test_an_unwritable_folder_is_a_permission_error_with_its_errno():
    import errno
    import pickle

    from fabricx import Fabric
    from fabricx.utilities.exceptions import CheckpointError

    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(PermissionError) as caught:
        fabric.save("/sys/fabricx-unwritable/state.pth", {"step": 1})  # sysfs takes no new files, root's neither
    error = caught.value
    assert isinstance(error, CheckpointError) and error.errno in (errno.EACCES, errno.EPERM)
    again = pickle.loads(pickle.dumps(error))  # as it reaches the parent of a spawned process
    assert type(again) is type(error) and again.errno == error.errno and str(again) == str(error)


# -- rank_zero_only.rank, set at import -----------------------------------------------------------------------------
_RANK_SCRIPT = textwrap.dedent(
    """
    import {module}
    from lightning_utilities.core.rank_zero import rank_zero_only

    @rank_zero_only
    def log_once():
        return "ran"

    print(repr((rank_zero_only.rank, log_once())))
    """
)


def _rank_run(module: str, rank: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")}
    if rank is not None:
        env["RANK"] = rank
    completed = subprocess.run(
        [sys.executable, "-c", _RANK_SCRIPT.format(module=module)], capture_output=True, text=True, env=env, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout.strip().splitlines()[-1]


def test_rank_zero_only_of_lightning_utilities_is_set_at_import():
    # A launcher's RANK: Lightning's import sets it, so the user's decorated helper is skipped on rank 3.
    lightning = _rank_run("lightning.pytorch", "3")
    assert lightning == "(3, None)"
    assert _rank_run("fabricx.train", "3") == lightning
    assert _rank_run("fabricx", "3") == lightning  # the Fabric side too
    # No launcher: rank 0, the helper runs (on Lightning, too, rather than "needs to be set before use").
    assert _rank_run("fabricx.train", None) == "(0, 'ran')"


def test_prediction_writer_sees_the_batches_indices_and_the_epochs_predictions(results):
    # pytorch-forecasting's predict() is a BasePredictionWriter reading trainer.predict_loop.epoch_batch_indices.
    lightning, fabricx = _case(results, "prediction_writer")
    assert fabricx == lightning
    shuffled = lightning["batch_and_epoch-True"]["batches"][-3:]
    assert sorted(i for _, _, indices, _ in shuffled for i in indices) == list(range(10))  # real sample indices
    assert lightning["epoch-False"]["epochs"] and lightning["epoch-False"]["returned"] is False
    assert "write_interval" in lightning["bad_interval"]["message"]


def test_hyperparameters_saved_before_the_module_init_are_kept(results):
    # pytorch-forecasting's models call save_hyperparameters() first and read get_init_args(frame).
    lightning, fabricx = _case(results, "hparams_before_init")
    assert fabricx == lightning
    assert lightning["hparams"] == {"hidden": 2, "scale": 0.5, "extra": "x"}


def test_numpy_scalars_in_hyperparameters_load_back_as_the_same_numpy_types(results):
    # pytorch-forecasting's models keep NumPy scalars in their hyper-parameters; fabricx's single file holds them
    # and reads them back through a checked allow-list (no code runs).
    lightning, fabricx = _case(results, "numpy_hparams")
    assert fabricx["hparams"] == lightning["hparams"]
    assert lightning["hparams"]["min_idx"] == ("int64", "np.int64(4)")
    assert lightning["hparams"]["flags"][1][0] == ("bool", "np.True_")
    _same_weights(lightning["weights"], fabricx["weights"])
    _same_weights(lightning["loaded_weights"], fabricx["loaded_weights"])
    # Lightning's default load is torch's weights-only one, which refuses NumPy; fabricx's checked reader does not.
    assert "UnpicklingError" in lightning["default_load"]["types"]
    assert fabricx["default_load"] is None


def test_a_librarys_own_checkpoint_io_and_load_state(results):
    # nn-template-core subclasses TorchCheckpointIO to write its files and builds modules with the private
    # `_load_state`; fabricx's file is code-free, and what the library reads back is the same.
    lightning, fabricx = _case(results, "library_checkpoint_io")
    assert fabricx["keys"] == lightning["keys"] == ["hyper_parameters", "run_path", "state_dict"]
    assert fabricx["run_path"] == lightning["run_path"] == "entity/project/run"
    assert fabricx["hparams"] == lightning["hparams"] == {"lr": 0.2, "note": "b"}
    assert fabricx["removed"] and lightning["removed"]
    _same_weights(lightning["weights"], fabricx["weights"])
    _same_weights(lightning["loaded_weights"], fabricx["loaded_weights"])
    _same_weights(lightning["weights"], lightning["loaded_weights"])
    assert "FileNotFoundError" in lightning["missing"]["types"] and "FileNotFoundError" in fabricx["missing"]["types"]


def test_the_trainer_writes_and_reads_its_checkpoints_through_a_checkpoint_io_plugin(results):
    # nn-template's run() trains with Trainer(plugins=[NNCheckpointIO(...)]): the plugin gets each checkpoint
    # dict (objects the module's on_save_checkpoint added included), names the file itself, removes the ones
    # ModelCheckpoint replaces, and hands the dict back when the fit resumes from one.
    lightning, fabricx = _case(results, "checkpoint_io_plugin")
    saved = ["epoch=0-step=4.ckpt", "last.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    assert fabricx["saved"] == lightning["saved"] == saved
    assert fabricx["removed"] == lightning["removed"] == ["epoch=0-step=4.ckpt"]
    assert fabricx["files"] == lightning["files"] == ["epoch=4-step=20.ckpt.zip", "last.ckpt.zip"]
    # Read back through the plugin twice: to resume the fit, and for test(ckpt_path="best").
    assert fabricx["notes_loaded"] == lightning["notes_loaded"] == ["Note", "Note"]
    assert fabricx["best"] == lightning["best"] == "epoch=3-step=16.ckpt"
    assert fabricx["tested"] == lightning["tested"]
    _same_weights(lightning["straight"], fabricx["straight"])
    _same_weights(fabricx["straight"], fabricx["resumed"])  # the resume through the plugin is exact
    _same_weights(lightning["resumed"], fabricx["resumed"])
    # ckpt_path="last" looks for last.ckpt by name, as Lightning does: the plugin's last.ckpt.zip is not it.
    _same_weights(fabricx["fresh"], fabricx["from_last"])
    _same_weights(lightning["from_last"], fabricx["from_last"])


def test_async_checkpoint_io_writes_each_checkpoint_as_it_was_when_saved(results):
    # Trainer(plugins=[AsyncCheckpointIO(...)]): each save is written in a background thread (here a slow one), from
    # a copy taken when the Trainer saved; fit returns once every file is written, and a fit resumes from one.
    lightning, fabricx = _case(results, "async_checkpoint_io")
    names = ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"]
    assert fabricx["files"] == lightning["files"] == names
    for name in names:
        _same_weights(lightning["saved"][name], fabricx["saved"][name])
    _same_weights(fabricx["saved"][names[-1]], fabricx["straight"])
    _same_weights(lightning["straight"], fabricx["straight"])
    _same_weights(fabricx["straight"], fabricx["resumed"])


def test_loggers_are_handed_the_model_checkpoint_after_each_save(results):
    # Logger.after_save_checkpoint(checkpoint_callback): Lightning hands loggers the ModelCheckpoint (a weak proxy),
    # and loggers read paths off it (nn-core's logger reads best_model_path; a path there was an AttributeError).
    lightning, fabricx = _case(results, "logger_hears_checkpoints")
    assert fabricx["heard"] == lightning["heard"]
    assert {entry["score"] > 0 for entry in fabricx["heard"]} == {True}  # best_model_score.item(): a tensor
    assert fabricx["heard"][-1]["types"] == ["Tensor"]
    assert fabricx["state_types"] == lightning["state_types"] == dict.fromkeys(
        ("best_model_score", "kth_value", "current_score"), "Tensor"
    )
    assert [entry["best"] for entry in fabricx["heard"]] == [
        "epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"
    ]
