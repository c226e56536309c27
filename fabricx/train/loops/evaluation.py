"""Validation, test and prediction passes: no gradients, eval mode, training mode restored after."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from fabricx.data.loader import FabricDataLoader
from fabricx.train.callbacks.prediction_writer import BasePredictionWriter, BatchIndexRecorder
from fabricx.train.logging.logging_result import ResultCollection, to_float
from fabricx.train.loops.dataloader_iter import DataLoaderIter, Fetched, takes_dataloader_iter
from fabricx.train.module.current_hook import named_hook

if TYPE_CHECKING:
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer

_HOOK_PREFIX = {"validate": "validation", "test": "test", "predict": "predict"}


def takes_batch_idx(method: Any) -> bool:
    """Whether a ``*_step`` accepts ``batch_idx`` (Lightning passes it only then)."""
    try:
        spec = inspect.getfullargspec(method)
    except TypeError:
        return True
    args = spec.args[1:] if inspect.ismethod(method) or (spec.args and spec.args[0] == "self") else spec.args
    return "batch_idx" in args or spec.varargs is not None or len(args) >= 2


_LOADER_PREFIX = {"validate": "val", "test": "test", "predict": "predict"}


def check_dataloader_idx(module: Any, stage: str, hook_names: Sequence[str], multiple: bool) -> None:
    """As Lightning: with one loader a hook's ``dataloader_idx`` needs a default; with several it must exist.

    Example:
        ```python
        check_dataloader_idx(module, "validate", ["validation_step"], multiple=False)
        ```
    """
    for name in hook_names:
        method = getattr(module, name, None)
        if method is None:
            continue
        function = getattr(method, "__wrapped__", method)
        try:
            spec = inspect.getfullargspec(function)
        except TypeError:
            continue
        owner, prefix = type(module).__name__, _LOADER_PREFIX[stage]
        if not multiple:
            parameter = inspect.signature(function).parameters.get("dataloader_idx")
            if parameter is not None and parameter.default is inspect.Parameter.empty:
                raise RuntimeError(
                    f"You provided only a single `{prefix}_dataloader`, but have included `dataloader_idx` in "
                    f"`{owner}.{name}()`. Either remove the argument or give it a default value i.e. "
                    "`dataloader_idx=0`."
                )
        elif "dataloader_idx" not in spec.args[1:] and spec.varargs is None:
            raise RuntimeError(
                f"You provided multiple `{prefix}_dataloader`, but no `dataloader_idx` argument in "
                f"`{owner}.{name}()`. Try adding `dataloader_idx=0` to its signature."
            )


def _model_mode_hooks(module: Any, prefix: str) -> tuple[Any, Any]:
    from fabricx.train.data.datamodule import defines
    from fabricx.train.module.module import TrainModule

    eval_name, train_name = f"on_{prefix}_model_eval", f"on_{prefix}_model_train"
    eval_hook = getattr(module, eval_name, None) if isinstance(module, TrainModule) else None
    if eval_hook is not None:
        eval_hook = named_hook(module, eval_name, eval_hook)
    train_hook = None
    if (
        isinstance(module, TrainModule)
        and hasattr(TrainModule, train_name)
        and defines(module, train_name, TrainModule)
    ):
        train_hook = getattr(module, train_name)
    if train_hook is not None:
        train_hook = named_hook(module, train_name, train_hook)
    return eval_hook, train_hook


@contextlib.contextmanager
def _eval_context(trainer: Trainer, run: RunContext, prefix: str, in_fit: bool = False) -> Generator[None, None, None]:
    """``on_*_model_eval`` (default: eval mode), no gradients, then ``on_*_model_train`` or the modes restored."""
    module = run.module
    assert module is not None, "evaluation runs on a set-up module"
    eval_hook, train_hook = _model_mode_hooks(module, prefix)
    # The set-up model (its wrappers too) as Lightning's trainer.model: hooks read trainer.model.training.
    root = trainer.model if trainer.model is not None else module
    modes = [(submodule, submodule.training) for submodule in root.modules()]
    if eval_hook is not None:
        eval_hook()
    else:
        root.eval()
    # Validation inside fit runs under no_grad, never inference_mode, as Lightning's: a step may re-enable
    # gradients (`torch.enable_grad()`, gluonts' MQF2 model takes `autograd.grad` of its flow there).
    inference = getattr(trainer, "inference_mode", False) and not in_fit
    grad_context = torch.inference_mode() if inference else torch.no_grad()
    try:
        with grad_context:
            yield
    finally:
        if train_hook is not None:
            train_hook()
        else:
            for submodule, mode in modes:
                submodule.training = mode


def run_evaluation(
    trainer: Trainer,
    run: RunContext,
    stage: str,
    results: ResultCollection,
    loaders: Sequence[Any],
    limits: Sequence[float],
    sanity: bool = False,
    in_fit: bool = False,
) -> list[dict[str, Any]]:
    """One validation or test pass over ``loaders``; returns the epoch metrics per loader."""
    if not any(limit > 0 for limit in limits):
        return []  # as Lightning: no batches to run, no hooks, no metrics
    prefix = _HOOK_PREFIX[stage]
    hooks = run.hooks
    step_name = f"{prefix}_step" if stage != "validate" else "validation_step"
    step = run.step_function(step_name)
    with_batch_idx = takes_batch_idx(getattr(run.module, step_name))
    feeds_iterator = takes_dataloader_iter(getattr(run.module, step_name), step_name)
    process = run.batch_processor
    connector = run.logger_connector
    previous, previous_iter = connector.results, connector.first_loop_iter
    connector.set_results(results)
    connector.first_loop_iter = None
    multiple = len(loaders) > 1
    counts = _loop_of(trainer, stage).batch_progress
    counts.reset_on_run()
    check_dataloader_idx(run.module, stage, [step_name], multiple and not feeds_iterator)
    check_dataloader_idx(run.module, stage, [f"on_{prefix}_batch_start", f"on_{prefix}_batch_end"], multiple)
    outputs: list[dict[str, Any]] = []

    def store_outputs(until: int) -> None:
        # Each loader's epoch values once its batches are done (its entries only, when several run).
        while len(outputs) < until:
            connector.epoch_end_reached()
            results.dataloader_idx = len(outputs) if multiple else None
            outputs.append(connector.update_eval_epoch_metrics())

    try:
        with _eval_context(trainer, run, prefix, in_fit):
            results.in_step = False
            results.hook = f"on_{prefix}_epoch_start"
            hooks.call(f"on_{prefix}_start")
            hooks.call(f"on_{prefix}_epoch_start")
            results.in_step = True
            results.hook = f"{prefix}_step"
            batch_start = f"on_{prefix}_batch_start"
            batch_end = f"on_{prefix}_batch_end"
            total = sum(limits)
            batches = _sequential(loaders, limits, trainer.current_epoch)
            fetcher = DataLoaderIter(batches, total) if feeds_iterator else None
            fetched = 0
            while (item := _next_batch(batches, fetcher, process)) is not None:
                batch, batch_idx, dataloader_idx = item
                if fetcher is None:
                    fetched += 1
                    counts.is_last_batch = fetched >= total
                store_outputs(dataloader_idx)
                extra = (dataloader_idx,) if multiple else ()
                counts.increment_ready()
                connector.on_batch_start(results, batch, dataloader_idx if multiple else None)
                hooks.call(batch_start, batch, batch_idx, *extra)
                counts.increment_started()
                ran = _run_step(step, fetcher, item, with_batch_idx, multiple)
                if ran is None:
                    break  # the step found the data used up
                step_outputs, (batch, batch_idx, dataloader_idx) = ran
                if fetcher is not None:
                    extra = (dataloader_idx,) if multiple else ()
                    counts.is_last_batch = fetcher.done
                counts.increment_processed()
                hooks.call(batch_end, step_outputs, batch, batch_idx, *extra)
                connector.on_batch_end()
                counts.increment_completed()
                if not sanity:
                    connector.update_eval_step_metrics(batch_idx)
            store_outputs(len(loaders))
            connector.epoch_end_reached()
            results.dataloader_idx = None
            results.in_step = False
            results.hook = f"on_{prefix}_epoch_end"
            hooks.call(f"on_{prefix}_epoch_end")
            connector.on_epoch_end()
            epoch_end = connector.update_eval_epoch_metrics()
            everything: dict[str, Any] = {}
            for loader_outputs in outputs:
                everything.update(loader_outputs)
                loader_outputs.update(epoch_end)
            everything.update(epoch_end)
            connector.log_eval_end_metrics(everything)
            hooks.call(f"on_{prefix}_end")
            connector.reset_results()
    finally:
        results.dataloader_idx = None
        results.in_step = True
        results.hook = f"{prefix}_step"
        connector.set_results(previous)
        connector.first_loop_iter = previous_iter
    if sanity:
        return []
    return [{k: to_float(v) for k, v in loader_outputs.items()} for loader_outputs in outputs]


def run_prediction(trainer: Trainer, run: RunContext, loaders: Sequence[Any], limits: Sequence[float]) -> list[Any]:
    """Collect ``predict_step`` outputs (one list per loader when several are given) into `trainer.predict_loop`
    (none are kept with ``return_predictions=False``, as in Lightning)."""
    loop = trainer.predict_loop
    writers = [callback for callback in trainer.callbacks if isinstance(callback, BasePredictionWriter)]
    keep = loop.return_predictions or any(writer.interval.on_epoch for writer in writers)
    hooks = run.hooks
    step = run.step_function("predict_step")
    assert run.module is not None, "prediction runs on a set-up module"
    with_batch_idx = takes_batch_idx(run.module.predict_step)
    feeds_iterator = takes_dataloader_iter(run.module.predict_step, "predict_step")
    process = run.batch_processor
    multiple = len(loaders) > 1
    check_dataloader_idx(run.module, "predict", ["predict_step"], multiple and not feeds_iterator)
    check_dataloader_idx(run.module, "predict", ["on_predict_batch_start", "on_predict_batch_end"], multiple)
    outputs: list[list[Any]] = [[] for _ in loaders]
    loop.epoch_batch_indices = [[] for _ in loaders]
    with _eval_context(trainer, run, "predict"), _batch_indices_recorded(loaders if writers else []) as recorded:
        hooks.call("on_predict_start")
        hooks.call("on_predict_epoch_start")
        batches = _sequential(loaders, limits, None)
        fetcher = DataLoaderIter(batches, sum(limits)) if feeds_iterator else None
        while (item := _next_batch(batches, fetcher, process)) is not None:
            batch, batch_idx, dataloader_idx = item
            extra = (dataloader_idx,) if multiple else ()
            hooks.call("on_predict_batch_start", batch, batch_idx, *extra)
            ran = _run_step(step, fetcher, item, with_batch_idx, multiple)
            if ran is None:
                break
            prediction, (batch, batch_idx, dataloader_idx) = ran
            extra = (dataloader_idx,) if multiple else ()
            if recorded:
                recorder = recorded[dataloader_idx]
                seen = recorder.seen_batch_indices if recorder is not None else []
                loop.current_batch_indices = seen[batch_idx] if batch_idx < len(seen) else []
                loop.epoch_batch_indices[dataloader_idx].append(loop.current_batch_indices)
            hooks.call("on_predict_batch_end", prediction, batch, batch_idx, *extra)
            if keep:
                outputs[dataloader_idx].append(prediction)
        loop.keep(outputs, for_writers=keep)
        hooks.call("on_predict_epoch_end")
        hooks.call("on_predict_end")
    loop.keep(outputs)
    return outputs if multiple else outputs[0]


@contextlib.contextmanager
def _batch_indices_recorded(loaders: Sequence[Any]) -> Iterator[list[BatchIndexRecorder | None]]:
    """Per loader, a recorder of the sample indices of each batch it yields in this block (``None`` for a loader
    without a batch sampler); the loaders get their own batch samplers back afterwards."""
    recorders: list[BatchIndexRecorder | None] = []
    loaders = [loader.loader if isinstance(loader, FabricDataLoader) else loader for loader in loaders]
    for loader in loaders:
        batch_sampler = getattr(loader, "batch_sampler", None)
        recorder = BatchIndexRecorder(batch_sampler) if isinstance(loader, DataLoader) and batch_sampler else None
        if recorder is not None:
            # DataLoader refuses a new batch_sampler after __init__; it only reads it when an iterator starts.
            object.__setattr__(loader, "batch_sampler", recorder)
        recorders.append(recorder)
    try:
        yield recorders
    finally:
        for loader, recorder in zip(loaders, recorders, strict=True):
            if recorder is not None:
                object.__setattr__(loader, "batch_sampler", recorder.batch_sampler)


def _next_batch(
    batches: Iterator[Fetched], fetcher: DataLoaderIter | None, process: Callable[[Any, int], Any] | None
) -> Fetched | None:
    """The next ``(batch, batch_idx, dataloader_idx)`` the hooks before a step see; ``None`` once the data is used up.

    A step that takes ``dataloader_iter`` fetches its batch itself: the hooks before it see the last one fetched.
    """
    if fetcher is not None:
        return None if fetcher.done else (fetcher.batch, fetcher.batch_idx, fetcher.dataloader_idx)
    item = next(batches, None)
    if item is None or process is None:
        return item
    batch, batch_idx, dataloader_idx = item
    return process(batch, dataloader_idx), batch_idx, dataloader_idx


def _run_step(
    step: Callable[..., Any], fetcher: DataLoaderIter | None, item: Fetched, with_batch_idx: bool, multiple: bool
) -> tuple[Any, Fetched] | None:
    """Run a ``*_step`` on ``item``, or on the iterator when the step takes it; returns the step's output and the
    ``(batch, batch_idx, dataloader_idx)`` it ran on, or ``None`` when the step found the data used up."""
    if fetcher is None:
        batch, batch_idx, dataloader_idx = item
        extra = (dataloader_idx,) if multiple else ()
        return (step(batch, batch_idx, *extra) if with_batch_idx else step(batch, *extra)), item
    try:
        output = step(fetcher)
    except StopIteration:
        return None
    return output, (fetcher.batch, fetcher.batch_idx, fetcher.dataloader_idx)


def _loop_of(trainer: Trainer, stage: str) -> Any:
    """The loop object whose counters a pass increments (validation inside fit: the fit loop's)."""
    from fabricx.train.states import TrainerFn

    if stage == "validate":
        fitting = trainer.state.fn == TrainerFn.FITTING
        return trainer.fit_loop.epoch_loop.val_loop if fitting else trainer.validate_loop
    return trainer.test_loop if stage == "test" else trainer.predict_loop


def _sequential(loaders: Sequence[Any], limits: Sequence[float], epoch: int | None) -> Iterator[Fetched]:
    """The batches of each loader in turn, under its limit, as ``(batch, batch_idx, dataloader_idx)``."""
    for dataloader_idx, loader in enumerate(loaders):
        if epoch is not None:
            _set_epoch(loader, epoch)
        for batch_idx, batch in _limited(loader, limits[dataloader_idx]):
            yield batch, batch_idx, dataloader_idx


def _set_epoch(loader: Any, epoch: int) -> None:
    # As Lightning: an evaluation pass draws its order for the fit's current epoch (sanity check: 0).
    set_epoch = getattr(loader, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _limited(loader: Any, limit: float) -> Generator[tuple[int, Any], None, None]:
    if limit <= 0:
        return
    iterator = iter(loader)
    batch_idx = 0
    while batch_idx < limit:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield batch_idx, batch
        batch_idx += 1
