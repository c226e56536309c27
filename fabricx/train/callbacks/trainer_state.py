"""What callbacks read from the Trainer, read through its public attributes only.

The Trainer's state is a ``TrainerState`` (``.fn``, ``.stage``) or a plain string in older builds;
these helpers accept both, so callbacks need not know which.
"""

from __future__ import annotations

from typing import Any

import torch

from fabricx.utilities.rank_zero import rank_zero_warn


def _value(item: Any) -> str:
    return str(getattr(item, "value", item))


def fitting(trainer: Any) -> bool:
    """Whether ``trainer`` runs ``fit`` now (and not its sanity check)."""
    state = trainer.state
    return _value(getattr(state, "fn", state)) == "fit" and not getattr(trainer, "sanity_checking", False)


def any_rank(trainer: Any, decision: bool) -> bool:
    """True on every rank when ``decision`` is true on at least one (one all-reduce when distributed)."""
    strategy = getattr(trainer, "strategy", None)
    reduce = getattr(strategy, "reduce_boolean_decision", None)
    if reduce is not None:
        return bool(reduce(decision, all=False))
    if getattr(trainer, "world_size", 1) <= 1:
        return bool(decision)
    flag = torch.tensor(float(decision), device=trainer.fabric.device)
    return bool(trainer.fabric.all_reduce(flag, reduce_op="sum").item() > 0)


def validates_every_epoch_end(trainer: Any) -> bool:
    """Whether validation runs once per epoch, at its end (Lightning's defaults)."""
    interval = getattr(trainer, "val_check_interval", 1.0)
    return interval in (None, 1.0) and getattr(trainer, "check_val_every_n_epoch", 1) in (None, 1)


def validates_this_epoch(trainer: Any) -> bool:
    """Whether fit validates in the current epoch (validation set up, and ``check_val_every_n_epoch`` allows it)."""
    if not getattr(trainer, "enable_validation", True):
        return False
    every = getattr(trainer, "check_val_every_n_epoch", 1)
    return every is None or (trainer.current_epoch + 1) % every == 0


def total_val_batches(trainer: Any) -> int | float:
    """Lightning's ``ProgressBar.total_val_batches``: this epoch's validation batches (0 if it does not validate)."""
    return sum(trainer.num_val_batches) if validates_this_epoch(trainer) else 0


def batches_that_stepped(trainer: Any) -> int:
    """The step number Lightning logs step metrics at (optimizer steps taken, counted per batch)."""
    return trainer.progress.batches_that_stepped


def logs_this_step(trainer: Any) -> bool:
    """Lightning's rule for step logging: every ``log_every_n_steps`` stepped batches, and when stopping."""
    every = getattr(trainer, "log_every_n_steps", None) or 50
    return (batches_that_stepped(trainer) + 1) % every == 0 or bool(trainer.should_stop)


def shown_metrics(trainer: Any) -> dict[str, Any]:
    """What a progress bar's ``get_metrics`` shows: ``v_num`` (the logger's version) and the ``prog_bar`` metrics."""
    standard: dict[str, Any] = {}
    loggers = trainer.loggers
    # As Lightning: several loggers show their distinct versions joined by "_"; an empty version shows nothing.
    version = None
    if len(loggers) == 1:
        version = loggers[0].version
    elif loggers:
        version = "_".join(dict.fromkeys(str(logger.version) for logger in loggers))
    if version not in ("", None):
        standard["v_num"] = version[-4:] if isinstance(version, str) else version
    bar_metrics = {k: _number(v) for k, v in trainer.progress_bar_metrics.items()}
    duplicates = sorted(standard.keys() & bar_metrics.keys())
    if duplicates:
        rank_zero_warn(
            f"The progress bar already tracks a metric with the name(s) '{', '.join(duplicates)}' and"
            f" `self.log('{duplicates[0]}', ..., prog_bar=True)` will overwrite this value. "
            " If this is undesired, change the name or override `get_metrics()` in the progress bar callback.",
        )
    return {**standard, **bar_metrics}


def _number(value: Any) -> Any:
    # One-element tensors are shown as numbers.
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "numel", lambda: 0)() == 1:
        return item()
    return value
