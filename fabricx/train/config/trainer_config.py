"""``TrainerConfig``: every Trainer flag, checked once, with Lightning's defaults and modes applied."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any

from fabricx.loggers.dummy import DummyLogger
from fabricx.train.config import flag_checks
from fabricx.train.config.barebones import barebones_flags
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.iterables import one_or_many
from fabricx.utilities.profilers import Profiler, resolve_profiler
from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_log_info
from fabricx.utilities.seed import seed_everything

log = logging.getLogger(__name__)

# The flags the Trainer keeps as its own public attributes (``trainer.max_epochs``, ...), as Lightning does.
TRAINER_ATTRIBUTES = (
    "fast_dev_run",
    "overfit_batches",
    "max_time",
    "reload_dataloaders_every_n_epochs",
    "deterministic",
    "inference_mode",
    "use_distributed_sampler",
    "detect_anomaly",
    "sync_batchnorm",
    "enable_autolog_hparams",
    "barebones",
    "min_epochs",
    "min_steps",
    "default_root_dir",
    "seed",
    "max_epochs",
    "max_steps",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "val_check_interval",
    "check_val_every_n_epoch",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "num_sanity_val_steps",
    "log_every_n_steps",
    "profiler",
    "val_check_seconds",
)


@dataclass
class TrainerConfig:
    """The `fabricx.train.Trainer` flags, checked in ``__post_init__`` (the same names and defaults).

    Checking rewrites the flags the way Lightning's connectors do: ``accumulate_grad_batches`` and
    ``logger`` merge into ``grad_accum_steps`` and ``loggers``; ``barebones`` turns the extras off;
    ``fast_dev_run`` and ``overfit_batches`` set the batch limits; ``None`` becomes Lightning's default
    (2 sanity batches, logging every 50 steps, 1000 epochs when nothing else stops the fit);
    ``max_time`` becomes seconds and ``profiler`` a profiler object. A flag that cannot work raises
    `fabricx.utilities.exceptions.MisconfigurationError` naming what was given and what is allowed.

    Example:
        ```python
        config = TrainerConfig(fast_dev_run=2, max_time="00:01:00:00")
        assert config.limit_train_batches == 2 and config.max_time == 3600.0
        ```
    """

    # Fabric's flags: handed to `fabricx.Fabric`, whose connector checks them.
    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    precision: str | int | None = None
    plugins: Any = None
    compile: bool | str | dict[str, Any] | None = None
    # When the fit stops.
    max_epochs: int | None = None
    min_epochs: int | None = None
    max_steps: int = -1
    min_steps: int | None = None
    max_time: Any = None  # "DD:HH:MM:SS", a timedelta or a dict of its arguments; seconds once checked
    # The optimizer step.
    grad_accum_steps: int = 1
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    # Validation and batch limits.
    val_check_interval: int | float | str | datetime.timedelta | dict[str, Any] | None = None
    check_val_every_n_epoch: int | None = 1
    limit_train_batches: int | float | None = None
    limit_val_batches: int | float | None = None
    limit_test_batches: int | float | None = None
    limit_predict_batches: int | float | None = None
    overfit_batches: int | float = 0.0
    num_sanity_val_steps: int | None = None
    log_every_n_steps: int | None = None
    reload_dataloaders_every_n_epochs: int = 0
    # Callbacks, loggers and where they write.
    callbacks: Any = None
    loggers: Any = None
    logger: Any = None
    default_root_dir: str | os.PathLike | None = None
    enable_progress_bar: bool | None = None
    enable_model_summary: bool | None = None
    enable_checkpointing: bool | None = None
    # Modes and process-wide settings.
    fast_dev_run: int | bool = False
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    profiler: Profiler | str | None = None
    detect_anomaly: bool = False
    barebones: bool = False
    sync_batchnorm: bool = False
    enable_autolog_hparams: bool = True
    model_registry: str | None = None
    seed: int | None = None
    # Derived: a time-based ``val_check_interval`` in seconds (``None``: batch-based), and
    # the profiler flag as given (``profiler`` becomes the profiler object).
    val_check_seconds: float | None = dataclasses.field(default=None, init=False)
    profiler_flag: Any = dataclasses.field(default=None, init=False)
    #: A checkpoint I/O of Lightning's shape taken from ``plugins`` (the Trainer writes its single files through it).
    file_checkpoint_io: Any = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        # The order is the Trainer's: the first wrong flag is the one reported.
        root = self.default_root_dir
        self.profiler_flag = self.profiler
        self.profiler = resolve_profiler(self.profiler, root_dir=root if root else os.getcwd())
        flag_checks.refuse_unsupported(model_registry=self.model_registry)
        self.grad_accum_steps = flag_checks.merge_alias(
            "grad_accum_steps", self.grad_accum_steps, 1, "accumulate_grad_batches", self.accumulate_grad_batches, 1
        )
        self.accumulate_grad_batches = self.grad_accum_steps
        self._merge_loggers()
        self._listify_collections()
        self._check_checkpoint_flag()
        self._check_progress_bars()
        if self.barebones:
            self._apply_barebones()
        self._apply_fast_dev_run()
        self.overfit_batches = flag_checks.check_overfit(self.overfit_batches)
        if self.overfit_batches:
            self.limit_train_batches = self.limit_val_batches = self.overfit_batches
        self.max_time = flag_checks.max_time_seconds(self.max_time)
        self.reload_dataloaders_every_n_epochs = flag_checks.check_reload_every(self.reload_dataloaders_every_n_epochs)
        flag_checks.check_determinism(self.deterministic)
        for name in ("inference_mode", "use_distributed_sampler", "detect_anomaly", "sync_batchnorm"):
            setattr(self, name, bool(getattr(self, name)))
        self.enable_autolog_hparams = bool(self.enable_autolog_hparams)
        self.barebones = bool(self.barebones)
        self._fill_defaults()
        self._check_numbers()
        self._explain_unit_values()
        self.default_root_dir = os.path.expanduser(os.fspath(root)) if root is not None else os.getcwd()

    def apply_process_settings(self) -> None:
        """Set what the flags change for the whole process: deterministic algorithms, cuDNN benchmark, the seed."""
        flag_checks.apply_determinism(self.deterministic, self.benchmark)
        if self.seed is not None:
            seed_everything(self.seed)

    def fabric_flags(self) -> dict[str, Any]:
        """The arguments of the `fabricx.Fabric` the Trainer runs on (loggers are added by the Trainer)."""
        names = ("accelerator", "strategy", "devices", "num_nodes", "precision", "plugins", "grad_accum_steps")
        return {name: getattr(self, name) for name in (*names, "compile")}

    def logger_objects(self) -> list[Any]:
        """The loggers the flags ask for: the given ones, none for ``False``, a CSVLogger under
        ``default_root_dir`` for ``None``/``True``."""
        loggers = self.loggers
        if loggers is False:
            return []
        if loggers is None or loggers is True:
            from fabricx.loggers import CSVLogger

            return [CSVLogger(self.default_root_dir)]
        return one_or_many(loggers)

    def trainer_attributes(self) -> dict[str, Any]:
        """The checked flags the Trainer exposes as attributes of the same names."""
        return {name: getattr(self, name) for name in TRAINER_ATTRIBUTES}

    def _merge_loggers(self) -> None:
        if self.loggers is not None and self.logger is not None and self.loggers is not self.logger:
            raise MisconfigurationError("Trainer got loggers= and logger=, which name the same setting; pass one.")
        self.loggers = self.logger if self.logger is not None else self.loggers
        self.logger = self.loggers

    def _listify_collections(self) -> None:
        # As Lightning: any iterable (a tuple, a generator, a Hydra ListConfig) is a list of callbacks, loggers or
        # plugins; a generator is read once, here.
        self.callbacks = one_or_many(self.callbacks)
        if self.plugins is not None:
            self.plugins = one_or_many(self.plugins)
            self._take_file_checkpoint_io()
        if self.loggers is not None and not isinstance(self.loggers, bool):
            self.loggers = self.logger = one_or_many(self.loggers)

    def _take_file_checkpoint_io(self) -> None:
        # As Lightning's Trainer: a CheckpointIO of Lightning's shape writes and reads the Trainer's checkpoint
        # files (the Fabric underneath keeps its own directory I/O for everything else).
        from fabricx.capabilities import is_file_checkpoint_io

        taken = [plugin for plugin in self.plugins if is_file_checkpoint_io(plugin)]
        if len(taken) > 1:
            raise MisconfigurationError(
                f"Two checkpoint I/O plugins were given ({', '.join(type(p).__name__ for p in taken)}); pass one."
            )
        if taken:
            self.file_checkpoint_io = taken[0]
            self.plugins = [plugin for plugin in self.plugins if plugin is not taken[0]] or None

    def _check_checkpoint_flag(self) -> None:
        # The user's own flag (barebones and fast_dev_run turn it off later, and then keep the callbacks given).
        from fabricx.train.callbacks.base import Checkpoint

        found = [type(cb).__name__ for cb in self.callbacks if isinstance(cb, Checkpoint)]
        if self.enable_checkpointing is False and found:
            raise MisconfigurationError(
                f"Trainer was configured with `enable_checkpointing=False` but found `{found[0]}` in callbacks "
                f"list. Remove the {found[0]} from callbacks, or leave enable_checkpointing at True."
            )

    def _check_progress_bars(self) -> None:
        # As Lightning's callback connector: one progress bar at most, and none when the user's flag turns them off.
        from fabricx.train.callbacks.progress import ProgressBar

        bars = [cb for cb in self.callbacks if isinstance(cb, ProgressBar)]
        if len(bars) > 1:
            raise MisconfigurationError(
                "You added multiple progress bar callbacks to the Trainer, but currently only one progress bar is "
                f"supported. Got {[type(bar).__name__ for bar in bars]}; keep one."
            )
        if bars and self.enable_progress_bar is False:
            raise MisconfigurationError(
                f"Trainer was configured with `enable_progress_bar=False` but found `{type(bars[0]).__name__}` in "
                "callbacks list. Remove it, or leave enable_progress_bar at True."
            )

    def _apply_barebones(self) -> None:
        off = barebones_flags(
            enable_checkpointing=self.enable_checkpointing,
            logger=self.loggers,
            enable_progress_bar=self.enable_progress_bar,
            log_every_n_steps=self.log_every_n_steps,
            enable_model_summary=self.enable_model_summary,
            num_sanity_val_steps=self.num_sanity_val_steps,
            fast_dev_run=self.fast_dev_run,
            detect_anomaly=self.detect_anomaly,
            profiler=self.profiler_flag,
        )
        self.enable_checkpointing, self.loggers = off["enable_checkpointing"], off["logger"]
        self.logger = self.loggers
        self.enable_progress_bar, self.enable_model_summary = off["enable_progress_bar"], off["enable_model_summary"]
        self.num_sanity_val_steps = off["num_sanity_val_steps"]

    def _apply_fast_dev_run(self) -> None:
        n = flag_checks.fast_dev_run_batches(self.fast_dev_run)
        if n == 1:
            self.fast_dev_run = True  # as Lightning: one batch is `True`, other counts stay as given
        if not n:
            return
        self.max_steps, self.max_epochs, self.num_sanity_val_steps = n, 1, 0
        self.limit_train_batches = self.limit_val_batches = self.limit_test_batches = self.limit_predict_batches = n
        self.val_check_interval, self.check_val_every_n_epoch = 1.0, 1
        # As Lightning: given loggers are replaced by one that records nothing (code using it still runs).
        self.loggers = self.logger = [DummyLogger()] if self.loggers is not False else False
        self.enable_checkpointing = False
        rank_zero_info(
            f"Running in `fast_dev_run` mode: will run the requested loop using {n} batch(es). "
            "Logging and checkpointing is suppressed."
        )

    def _fill_defaults(self) -> None:
        self.num_sanity_val_steps = 2 if self.num_sanity_val_steps is None else self.num_sanity_val_steps
        self.log_every_n_steps = 50 if self.log_every_n_steps is None else self.log_every_n_steps
        self.enable_progress_bar = True if self.enable_progress_bar is None else self.enable_progress_bar
        self.enable_model_summary = True if self.enable_model_summary is None else self.enable_model_summary
        self.enable_checkpointing = True if self.enable_checkpointing is None else self.enable_checkpointing
        # None stays None, as in Lightning (clipping then uses "norm").
        algorithm = self.gradient_clip_algorithm
        self.gradient_clip_algorithm = algorithm.lower() if algorithm else None

    def _check_numbers(self) -> None:
        flag_checks.check_loop_limit("max_steps", self.max_steps)
        if self.max_epochs is not None:  # None stays None until fit resolves it, as in Lightning
            flag_checks.check_loop_limit("max_epochs", self.max_epochs)
        for name in ("min_epochs", "min_steps"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=0)
        flag_checks.check_gradient_clipping(self.gradient_clip_val, self.gradient_clip_algorithm)
        self._check_val_check_interval()
        flag_checks.check_val_every_n_epoch(self.check_val_every_n_epoch)
        for stage in ("train", "val", "test", "predict"):
            check_limit(f"limit_{stage}_batches", getattr(self, f"limit_{stage}_batches"))
        check_int("num_sanity_val_steps", self.num_sanity_val_steps, minimum=-1)
        check_int("log_every_n_steps", self.log_every_n_steps, minimum=1)

    def _check_val_check_interval(self) -> None:
        interval = self.val_check_interval
        if isinstance(interval, (str, dict, datetime.timedelta)):
            # Time-based, as in Lightning: validate whenever this much wall-clock time passed since the last one.
            self.val_check_seconds = flag_checks.interval_seconds("val_check_interval", interval)
            return
        if self.check_val_every_n_epoch is None and isinstance(interval, float):
            raise MisconfigurationError(
                "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
                "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`. "
                f"Got val_check_interval={interval}: without epochs to take a fraction of, give a number of "
                "training batches."
            )
        if interval is None:
            return
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise MisconfigurationError(
                f"val_check_interval={interval!r}; give an int (batches), a float in (0, 1] "
                "(fraction of an epoch), a duration ('DD:HH:MM:SS', a timedelta or a dict of its arguments) "
                "or None (end of each epoch)."
            )
        if isinstance(interval, float) and not 0.0 < interval <= 1.0:
            raise MisconfigurationError(flag_checks.invalid_limit("val_check_interval", interval))
        if isinstance(interval, int) and interval < 1:
            raise MisconfigurationError(f"val_check_interval={interval} must be >= 1 as an int.")

    def _explain_unit_values(self) -> None:
        """Lightning's note on a flag set to ``1`` or ``1.0``, which mean different things (a batch, all batches)."""
        names = ["overfit_batches"]
        if not self.fast_dev_run:
            names += ["limit_test_batches", "limit_predict_batches", "val_check_interval"]
            if not self.overfit_batches:
                names[1:1] = ["limit_train_batches", "limit_val_batches"]
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or value != 1:
                continue
            if isinstance(value, int):
                what = {
                    "limit_train_batches": "1 batch per epoch will be used",
                    "val_check_interval": ("validation will run after every batch"),
                }.get(name, "1 batch will be used")
                rank_zero_log_info(log, f"`Trainer({name}=1)` was configured so {what}.")
            elif isinstance(value, float):
                what = {
                    "limit_train_batches": "100% of the batches per epoch will be used",
                    "val_check_interval": "validation will run at the end of the training epoch",
                }.get(name, "100% of the batches will be used")
                rank_zero_log_info(log, f"`Trainer({name}=1.0)` was configured so {what}.")


def check_int(name: str, value: Any, minimum: int) -> None:
    """Refuse ``value`` unless it is an int (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MisconfigurationError(f"{name}={value!r}; it must be an int >= {minimum}.")


def check_limit(name: str, value: Any) -> None:
    """Refuse a batch limit that is neither ``None``, an int ``>= 0`` nor a float in ``[0, 1]``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MisconfigurationError(flag_checks.invalid_limit(name, repr(value)))
    if (isinstance(value, float) and not 0.0 <= value <= 1.0) or (isinstance(value, int) and value < 0):
        raise MisconfigurationError(flag_checks.invalid_limit(name, value))


__all__ = ["TRAINER_ATTRIBUTES", "TrainerConfig", "check_int", "check_limit"]
