"""The data of one `Trainer.fit`: the training loader, the validation loaders, and when each is (re)loaded.

As Lightning: the training data is requested after the sanity check (or earlier, by
``estimated_stepping_batches`` in ``configure_optimizers``), the validation data when the first epoch
validates (or when validation first runs), and both again every ``reload_dataloaders_every_n_epochs``.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from fabricx.train.data import data_connector as data
from fabricx.train.data import loaders as setup
from fabricx.train.data.loader_setup import limited_length, setup_eval_loaders, setup_loaders, shuffled, without_shuffle
from fabricx.train.loops.loop_checks import defines_step, warn_val_mismatch
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer


class FitData:
    """The loaders of the current fit and the validation schedule (`trainer.fit_loop.data`).

    Example:
        ```python
        trainer.fit(model, train_loader, val_loader)
        trainer.fit_loop.data.val_check_batch  # validate every N training batches
        ```
    """

    def __init__(self, trainer: Trainer, run: RunContext) -> None:
        self.trainer = trainer
        self.run = run
        self.started = False  # a fit has begun (its training data can be loaded on request)
        self.train_source: Any = None  # what fit was given (None: the DataModule's or the module's own loader)
        self.val_source: Any = None
        self.train_loader: Any = None
        self.val_loaders: list[Any] = []
        self.val_limits: list[float] = []
        self.val_limits_of_fit = False  # the validation figures are fit's (validate() alone has no sanity check)
        self.num_training_batches: float = 0
        self.val_check_batch: float = 0
        self.val_enabled = False
        self.last_val_time = 0.0  # when the last validation ended (time-based val_check_interval)
        self._train_reload_epoch: float = -math.inf
        self._val_reload_epoch: float = -math.inf
        self._val_warned = True
        self._val_built = False

    def start_fit(self, train_dataloaders: Any, val_dataloaders: Any) -> None:
        """Forget the previous fit's loaders; remember what this fit was given."""
        self.started = True
        self.train_source, self.val_source = train_dataloaders, val_dataloaders
        self.train_loader = None
        self.val_loaders, self.val_limits, self._val_built = [], [], False
        self.num_training_batches = 0
        self.val_check_batch = 0
        self.val_enabled = self.may_validate()
        self._train_reload_epoch = self._val_reload_epoch = -math.inf
        self._val_warned = False

    def set_eval_loaders(self, loaders: list[Any], limits: list[float]) -> None:
        """The loaders of `Trainer.validate` (they are `trainer.val_dataloaders` until the next fit)."""
        self.val_loaders, self.val_limits, self.val_limits_of_fit = loaders, limits, False

    def setup_fit_data(self) -> None:
        """The training loader (unless built already) and the validation interval; the validation loaders now
        when the first epoch validates (as Lightning, for the progress bar), else when validation first runs."""
        trainer = self.trainer
        self.ensure_train_loader()
        self.val_enabled = self.may_validate()
        if not self._val_warned:
            self._val_warned = True
            has_data = self.has_val_source()
            warn_val_mismatch(self.run.module, has_data)
        if self.validates_this_epoch():
            self.ensure_val_loaders()
        self.compute_val_check_batch()
        if trainer.loggers and self.num_training_batches < trainer.log_every_n_steps and not trainer.fast_dev_run:
            rank_zero_warn(
                f"The number of training batches ({self.num_training_batches}) is smaller than the logging interval"
                f" Trainer(log_every_n_steps={trainer.log_every_n_steps}). Set a lower value for log_every_n_steps if"
                " you want to see logs for the training epoch.",
                category=PossibleUserWarning,
            )

    def ensure_train_loader(self) -> None:
        if self.train_loader is None:
            self.train_loader = self._build_train_loader(self.train_source)
            self.num_training_batches = self._train_batches()
            self._train_reload_epoch = self.trainer.current_epoch

    def ensure_val_loaders(self) -> None:
        """Build the validation loaders on first use, and again every ``reload_dataloaders_every_n_epochs``."""
        trainer = self.trainer
        every = trainer.reload_dataloaders_every_n_epochs
        due = bool(every) and trainer.current_epoch - self._val_reload_epoch >= every
        if self._val_built and not due:
            return
        if not self.may_validate():
            return
        # As Lightning: a sanity check in an epoch that does not validate does not count as this epoch's load.
        if not trainer.sanity_checking or self.validates_this_epoch():
            self._val_reload_epoch = trainer.current_epoch
        if not self._val_built or self.val_source is None:
            self._build_val_loaders(self.val_source)
        self._val_built = True

    def may_validate(self) -> bool:
        """Whether fit has validation at all: a validation_step, validation data and a non-zero limit."""
        run = self.run
        if self.trainer.limit_val_batches == 0 or not defines_step(run.module, "validation_step"):
            return False
        return self.has_val_source()

    def has_val_source(self) -> bool:
        """Whether this fit was given validation data, or its DataModule or module defines ``val_dataloader``."""
        run = self.run
        return self.val_source is not None or data.defines_loader(run.datamodule, run.module, "validate")

    def validates_this_epoch(self) -> bool:
        every = self.trainer.check_val_every_n_epoch
        return every is None or (self.trainer.current_epoch + 1) % every == 0

    def maybe_reload_train_loader(self) -> None:
        every = self.trainer.reload_dataloaders_every_n_epochs
        if not every or self.trainer.current_epoch - self._train_reload_epoch < every:
            return
        if self.trainer.progress.resumed_mid_epoch:
            # Restored inside this epoch: the loader built for the restore holds the epoch's position.
            self._train_reload_epoch = self.trainer.current_epoch
            return
        if self.train_source is None:
            self.train_loader = self._build_train_loader(None)
            self.num_training_batches = self._train_batches()
        self._train_reload_epoch = self.trainer.current_epoch
        self.compute_val_check_batch()

    def compute_val_check_batch(self) -> None:
        """Validate every N batches (``inf``: at the end of an epoch of unknown length), as Lightning counts."""
        trainer = self.trainer
        interval, batches = trainer.val_check_interval, self.num_training_batches
        if trainer.val_check_seconds is not None:
            # Time-based: the clock starts now and again after every validation.
            self.val_check_batch = math.inf
            self.last_val_time = time.monotonic()
        elif isinstance(interval, int) and not isinstance(interval, bool):
            self.val_check_batch = interval
            per_epoch = trainer.check_val_every_n_epoch is not None and trainer.limit_val_batches != 0
            if 0 < batches < interval and per_epoch:
                raise ValueError(
                    f" `val_check_interval` ({interval}) must be less than or equal"
                    f" to the number of the training batches ({batches})."
                    " If you want to disable validation set `limit_val_batches` to 0.0 instead."
                    " If you want to validate based on the total training batches, set `check_val_every_n_epoch=None`."
                )
        elif math.isinf(batches):
            if interval not in (None, 1.0):
                raise MisconfigurationError(
                    "When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be "
                    f"time based, `1.0` or an int. An int k specifies checking validation every k training batches. "
                    f"val_check_interval={interval} is a fraction of an epoch, but the training loader has no "
                    "length: give an int (every N batches) instead."
                )
            self.val_check_batch = math.inf
        else:
            self.val_check_batch = max(1, int(batches * (1.0 if interval is None else interval)))

    def validation_ended(self, limits: list[float]) -> None:
        if any(limit > 0 for limit in limits):
            self.last_val_time = time.monotonic()  # the clock of a time-based val_check_interval restarts

    def _train_batches(self) -> float:
        return limited_length(self.train_loader, self.trainer.limit_train_batches, "limit_train_batches")

    def _build_train_loader(self, given: Any) -> Any:
        """The training data as the fit loop runs it: one set-up loader, or a `LoaderGroup` for a collection."""
        trainer, run = self.trainer, self.run
        raw = data.request_loaders("train", given, run.datamodule, run.module, required=True, profiler=run.profiler)
        # A sequential CombinedLoader is counted (`num_training_batches`) and refused when the epoch starts.
        flat, spec, mode, source = setup.flatten_loaders(raw)
        if trainer.overfit_batches:
            changed = without_shuffle(flat, "train")
        elif run.fabric.world_size > 1 and trainer.use_distributed_sampler:
            # As Lightning's Trainer: training data given to several processes is always shuffled
            # (each rank's DistributedSampler draws its share of one seeded permutation per epoch).
            changed = [shuffled(loader) for loader in flat]
        else:
            changed = flat
        if any(new is not old for new, old in zip(changed, flat, strict=True)):
            source = None  # the group reports the rebuilt loaders
        loaders = setup_loaders(trainer, run, changed, "Trainer.fit(train_dataloaders)")
        if spec.kind == "leaf" and source is None:
            return loaders[0]
        return setup.LoaderGroup(loaders, spec, mode or "max_size_cycle", source, run.fabric.accumulation_state)

    def _build_val_loaders(self, given: Any) -> None:
        trainer, run = self.trainer, self.run
        raw = None
        if defines_step(run.module, "validation_step"):
            raw = data.request_loaders(
                "validate", given, run.datamodule, run.module, required=False, profiler=run.profiler
            )
        # Not `if raw`: the truth value of a loader is its len(), which an iterable dataset does not have.
        empty = raw is None or (isinstance(raw, (list, tuple, dict)) and not raw)
        where = "Trainer.fit(val_dataloaders)"
        self.val_loaders = [] if empty else setup_eval_loaders(trainer, run, raw, where, "val")
        limit = trainer.limit_val_batches
        self.val_limits = [limited_length(loader, limit, "limit_val_batches") for loader in self.val_loaders]
        self.val_limits_of_fit = True


__all__ = ["FitData"]
