"""``TrainModule``: a ``torch.nn.Module`` with the hooks a `fabricx.train.Trainer` calls."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Mapping
from typing import IO, TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from fabricx.strategies.strategy import optimizer_parameters
from fabricx.train.logging.module_logging import is_metric_collection, log_through_fabric, record
from fabricx.train.module.hparams import HyperparametersMixin
from fabricx.train.module.module_hooks import ModuleHooks
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.utilities.jit import jit_inspecting

_Module = TypeVar("_Module", bound="TrainModule")

if TYPE_CHECKING:

    from fabricx.fabric import Fabric
    from fabricx.train.trainer import Trainer


class TrainModule(HyperparametersMixin, ModuleHooks, nn.Module):
    """A module that knows how to train itself: a LightningModule ports by changing its base class.

    Override ``training_step`` and ``configure_optimizers`` (and ``validation_step``, ``test_step``,
    ``predict_step`` as needed); the ``on_*`` hooks are optional. Inside them, ``self.log`` records
    metrics, and ``self.fabric``, ``self.trainer``, ``self.device``, ``self.global_step`` and
    ``self.current_epoch`` describe the run.

    Example:
        ```python
        class Regressor(TrainModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(32, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.log("train_loss", loss, prog_bar=True)
                return loss

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        Trainer(max_epochs=3).fit(Regressor(), train_loader)
        ```
    """

    # What TorchScript must not compile (its properties, which describe the run, not the computation).
    __jit_unused_properties__: list[str] = [
        *("trainer", "fabric", "device", "dtype", "on_gpu", "global_step", "current_epoch", "global_rank"),
        *("local_rank", "logger", "loggers", "hparams", "hparams_initial", "example_input_array"),
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kept out of nn.Module's registries: the trainer is not a sub-module.
        self.__dict__["_trainer"] = None
        # Set by a plain Fabric's setup() (as on a LightningModule): self.fabric, self.log, self.logger, the ranks,
        # backward and self.optimizers() then go through that Fabric while no Trainer runs the module.
        self.__dict__["_fabric"] = None
        self.__dict__["_fabric_optimizers"] = []

    def __getstate__(self) -> dict[str, Any]:
        # As Lightning's: a pickled or deep-copied module leaves behind the Trainer or Fabric that ran it.
        return {**self.__dict__, "_trainer": None, "_fabric": None, "_fabric_optimizers": []}

    # -- where the module is running ------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module (an error when none is)."""
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            if jit_inspecting():  # TorchScript reads every attribute; Lightning's module answers None then
                return None  # type: ignore[return-value]
            raise FabricxError(
                f"{type(self).__qualname__} is not attached to a `Trainer`. Pass it to Trainer.fit/validate/test/"
                "predict; self.trainer exists only while one of them runs (or assign model.trainer = trainer)."
            )
        return trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        # As in Lightning: child TrainModules follow their parent.
        for child in self.children():
            if isinstance(child, TrainModule):
                child.trainer = trainer
        self.__dict__["_trainer"] = trainer

    @property
    def fabric(self) -> Fabric:
        """The `fabricx.Fabric` running this module: the Trainer's, or the plain Fabric that set it up.

        Example:
            ```python
            model = fabric.setup(MyTrainModule())
            assert model.fabric is fabric
            ```
        """
        fabric = self._plain_fabric()
        if fabric is None and self.__dict__.get("_trainer") is None and jit_inspecting():
            return None  # type: ignore[return-value]
        return fabric if fabric is not None else self.trainer.fabric

    @fabric.setter
    def fabric(self, fabric: Fabric | None) -> None:
        for child in self.children():
            if isinstance(child, TrainModule):
                child.fabric = fabric
        self.__dict__["_fabric"] = fabric

    def _plain_fabric(self) -> Fabric | None:
        """The Fabric that set this module up, while no Trainer runs it (``None`` otherwise)."""
        return self.__dict__.get("_fabric") if self.__dict__.get("_trainer") is None else None

    def _runner(self) -> Trainer | Fabric | None:
        """What runs this module: its Trainer, else the plain Fabric that set it up (``None``: neither)."""
        trainer = self.__dict__.get("_trainer")
        return self.__dict__.get("_fabric") if trainer is None else trainer

    @property
    def device(self) -> torch.device:
        """The device this process computes on (the device of the first parameter when not attached)."""
        trainer = self.__dict__.get("_trainer")
        if trainer is not None:
            return trainer.fabric.device
        fabric = self._plain_fabric()
        if fabric is not None:
            return fabric.device
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (0 when not attached)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.global_step if trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """The epoch being trained, counting from 0 (0 when not attached)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.current_epoch if trainer is not None else 0

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | os.PathLike,
        map_location: Any = None,
        hparams_file: str | os.PathLike | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the module from the hyper-parameters saved in a checkpoint (``kwargs`` override them),
        then load its weights. Reads fabricx checkpoints and Lightning ``.ckpt`` files.

        Hyper-parameters a code-free checkpoint could not hold (a module or a ``functools.partial`` passed to
        ``__init__``; saving warned about them) are passed again here: ``load_from_checkpoint(path, net=net)``.
        ``weights_only`` is Lightning's flag, accepted for its signature: fabricx never runs code from a file.

        Example:
            ```python
            model = Classifier.load_from_checkpoint("checkpoints/last", lr=0.01)
            ```
        """
        from fabricx.train.checkpoint.lightning_files import module_from_checkpoint

        return module_from_checkpoint(cls, checkpoint_path, map_location, hparams_file, strict, kwargs)

    # -- optimization ------------------------------------------------------------------------------------
    #: Set to ``False`` in ``__init__`` to step the optimizers yourself in ``training_step``.
    automatic_optimization: bool = True

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward under manual optimization, through the strategy and precision (loss scaling, DDP).

        Example:
            ```python
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            ```
        """
        fabric = self._plain_fabric()
        if fabric is not None:
            fabric.backward(loss, *args, **kwargs)
            return
        trainer = self.trainer
        if self.automatic_optimization:
            raise FabricxError(
                "manual_backward() is for manual optimization; this module has automatic_optimization=True, where "
                "the Trainer calls backward itself. Set self.automatic_optimization = False in __init__, or return "
                "the loss from training_step instead."
            )
        # DDP readies gradient sync at the end of forward, and this backward runs inside training_step's.
        trainer.strategy.before_manual_backward(loss)
        steps = trainer.run_context.steps
        assert steps is not None, "a Trainer builds its training steps with its run context"
        steps.backward(loss, *args, **kwargs)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """How the loss is back-propagated (override for custom behaviour; the default goes through the strategy)."""
        fabric = self._plain_fabric()
        if fabric is not None:
            fabric.backward(loss, *args, **kwargs)
            return
        self.trainer.fabric.backward(loss, *args, model=self.trainer.model, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require grad until `untoggle_optimizer()` (for several optimizers).

        Example:
            ```python
            self.toggle_optimizer(opt_g)
            self.manual_backward(g_loss)
            self.untoggle_optimizer(opt_g)
            ```
        """
        own = {id(p) for p in optimizer_parameters(optimizer)}
        saved: dict[int, bool] = {}
        for other in self.trainer.optimizers:
            for param in optimizer_parameters(other):
                if id(param) in own or id(param) in saved:
                    continue
                saved[id(param)] = param.requires_grad
                param.requires_grad = False
        self.__dict__["_toggled"] = saved
        self.__dict__["_toggled_optimizer"] = optimizer

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Undo `toggle_optimizer()` (the parameters' ``requires_grad`` as before)."""
        saved = self.__dict__.pop("_toggled", {})
        self.__dict__.pop("_toggled_optimizer", None)
        for other in self.trainer.optimizers:
            for param in optimizer_parameters(other):
                if id(param) in saved:
                    param.requires_grad = saved[id(param)]

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Generator[None, None, None]:
        """`toggle_optimizer()` for the duration of a ``with`` block."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def clip_gradients(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients of ``optimizer``'s parameters by norm (default) or by value.

        Example:
            ```python
            self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
            ```
        """
        fabric = self._plain_fabric()
        if fabric is not None:  # set up by a plain Fabric: its clip_gradients, as Lightning calls it
            by_value = _algorithm_name(gradient_clip_algorithm) == "value"
            clip_val, max_norm = (gradient_clip_val, None) if by_value else (None, gradient_clip_val)
            fabric.clip_gradients(self, optimizer, clip_val=clip_val, max_norm=max_norm)
            return
        trainer = self.trainer
        trainer_val = getattr(trainer, "gradient_clip_val", None)
        trainer_algorithm = getattr(trainer, "gradient_clip_algorithm", None)
        # As Lightning: the Trainer's setting applies unless given here; both given and different is refused.
        if gradient_clip_val is None:
            gradient_clip_val = trainer_val or 0.0
        elif trainer_val is not None and trainer_val != gradient_clip_val:
            raise MisconfigurationError(
                f"You have set `Trainer(gradient_clip_val={trainer_val!r})` and have passed "
                f"`clip_gradients(gradient_clip_val={gradient_clip_val!r})`. Please use only one of them."
            )
        if gradient_clip_algorithm is None:
            algorithm = trainer_algorithm or "norm"
        else:
            algorithm = _algorithm_name(gradient_clip_algorithm)
            if trainer_algorithm is not None and trainer_algorithm != algorithm:
                raise MisconfigurationError(
                    f"You have set `Trainer(gradient_clip_algorithm={trainer_algorithm!r})` and have passed "
                    f"`clip_gradients(gradient_clip_algorithm={algorithm!r}) Please use only one of them."
                )
        if not isinstance(gradient_clip_val, (int, float)):
            raise TypeError(f"`gradient_clip_val` should be an int or a float. Got {gradient_clip_val}.")
        if algorithm not in ("norm", "value"):
            raise MisconfigurationError(
                f"`gradient_clip_algorithm` {algorithm} is invalid. Allowed algorithms: ['value', 'norm']."
            )
        if gradient_clip_val == 0:
            return
        fabric = trainer.fabric
        model = self.trainer.model
        assert model is not None, "clip_gradients runs inside a Trainer stage, after the module is set up"
        inner = getattr(optimizer, "_fabric_optimizer", optimizer)
        if algorithm == "norm":
            fabric.clip_gradients(model, inner, max_norm=gradient_clip_val, error_if_nonfinite=False)
        else:
            fabric.clip_gradients(model, inner, clip_val=gradient_clip_val)

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Called before each automatic optimizer step with the Trainer's clipping settings."""
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Step ``optimizer``; ``optimizer_closure`` runs training_step, zero_grad and backward (automatic)."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Zero the gradients before the backward of a new accumulation window."""
        optimizer.zero_grad()

    def on_before_zero_grad(self, optimizer: Any) -> None: ...

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one LR scheduler (``metric`` for ``ReduceLROnPlateau``)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    # -- where the module runs (Lightning names) -----------------------------------------------------------
    @property
    def logger(self) -> Any:
        """The trainer's first logger (``None`` when none or not attached); set up by a Fabric, that Fabric's
        first logger (an ``IndexError`` when it has none, as in Lightning)."""
        fabric = self._plain_fabric()
        if fabric is not None:
            return fabric.loggers[0]
        trainer = self.__dict__.get("_trainer")
        return trainer.logger if trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The trainer's (or the setting-up Fabric's) loggers (empty when not attached)."""
        runner = self._runner()
        return list(runner.loggers) if runner is not None else []

    @property
    def global_rank(self) -> int:
        runner = self._runner()
        return runner.global_rank if runner is not None else 0

    @property
    def local_rank(self) -> int:
        runner = self._runner()
        return runner.local_rank if runner is not None else 0

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first floating-point parameter (the default dtype when there is none)."""
        for tensor in self.parameters():
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def example_input_array(self) -> Any:
        """An example input (the model summary shows sizes for it); set it in ``__init__``."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, value: Any) -> None:
        self.__dict__["_example_input_array"] = value

    def freeze(self: _Module) -> _Module:
        """No parameter requires grad, and the module is in eval mode; returns the module (as Lightning).

        Example:
            ```python
            frozen = model.freeze()  # frozen is model
            ```
        """
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self: _Module) -> _Module:
        """Every parameter requires grad, and the module is in train mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    #: Whether ``load_state_dict`` on checkpoint load is strict (Lightning's ``strict_loading``).
    strict_loading: bool = True

    def to_torchscript(
        self,
        file_path: str | os.PathLike | IO[bytes] | None = None,
        method: str | None = "script",
        example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The module compiled by TorchScript in eval mode (``method="script"``, or ``"trace"`` with
        ``example_inputs`` or `example_input_array`), saved to ``file_path`` when given.

        Example:
            ```python
            scripted = model.to_torchscript("model.pt")
            ```
        """
        from fabricx.train.module.module_export import compile_torchscript

        return compile_torchscript(self, file_path, method, example_inputs, kwargs)

    def to_onnx(
        self, file_path: str | os.PathLike | IO[bytes] | None = None, input_sample: Any = None, **kwargs: Any
    ) -> Any:
        """Export to ONNX with ``torch.onnx.export`` (``input_sample`` defaults to ``example_input_array``)."""
        from fabricx.train.module.module_export import export_onnx

        return export_onnx(self, file_path, input_sample, kwargs)

    def configure_sharded_model(self) -> None:
        """Lightning's older name of `configure_model()`."""

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather ``data`` (tensors, nested) from every process (a new leading dimension of size world_size)."""
        fabric = self._plain_fabric()
        if fabric is not None:
            return fabric.all_gather(data, group=group, sync_grads=sync_grads)
        trainer = self.__dict__.get("_trainer")
        if trainer is None or trainer.world_size == 1:
            return data  # as Lightning: one process gathers nothing
        return trainer.fabric.all_gather(data, group=group, sync_grads=sync_grads)

    # -- logging ---------------------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a metric: a tensor, a number, or a torchmetrics ``Metric``.

        ``on_step`` values go to the loggers every ``log_every_n_steps`` steps; ``on_epoch`` values are
        reduced over the epoch with ``reduce_fx`` (``"mean"`` weighted by batch size, ``"sum"``,
        ``"max"``, ``"min"``) and, with ``sync_dist=True``, across processes. A ``Metric`` is updated
        by you each step, then computed (synchronised across processes) at epoch end and reset.
        Defaults: ``on_step=True, on_epoch=False`` in ``training_step``, the reverse in
        validation/test and in epoch-end hooks. Logged with both, a metric appears as
        ``name_step`` and ``name_epoch``. ``enable_graph``, ``add_dataloader_idx``, ``metric_attribute``,
        ``rank_zero_only`` and ``sync_dist_group`` are accepted so LightningModule code runs unchanged;
        they have no effect (values are always detached; loaders are suffixed when there are several).

        Example:
            ```python
            self.log("val_acc", self.val_accuracy, prog_bar=True)
            ```
        """
        attached = self.__dict__
        trainer = attached.get("_trainer")
        fabric = attached.get("_fabric") if trainer is None else None  # `_plain_fabric()`, inline: every step
        if fabric is not None:  # as Lightning: straight to the Fabric's loggers (there is nothing to reduce)
            log_through_fabric(fabric, {name: value}, logger, f"self.log({name!r}, {value!r})")
            return
        # Positional: self.log runs several times a step, and keyword arguments cost a name match each.
        record(self, trainer, attached.get("_current_fx_name"), name, value, prog_bar, logger, on_step, on_epoch,
               reduce_fx, sync_dist, add_dataloader_idx, batch_size, metric_attribute)

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """`log()` every entry of ``dictionary`` with the same options.

        Example:
            ```python
            self.log_dict({"loss": loss, "acc": acc}, prog_bar=True)
            ```
        """
        fabric = self._plain_fabric()
        if fabric is not None:  # one call, so the loggers get the values as one step's metrics
            log_through_fabric(fabric, dict(dictionary), logger, f"self.log_dict({dict(dictionary)!r})")
            return
        if is_metric_collection(dictionary):
            # As Lightning: the collection's own names, without copying the states of its compute groups
            # (its items() is asked once, with these arguments: a copy per call would undo the groups).
            kwargs: dict[str, bool] = {"keep_base": False}
            if getattr(dictionary, "_enable_compute_groups", False):
                kwargs["copy_state"] = False
            items: Any = dictionary.items(**kwargs)  # type: ignore[call-arg]
        else:
            items = dictionary.items()
        for name, value in items:
            self.log(
                name,
                value,
                prog_bar,
                logger,
                on_step,
                on_epoch,
                reduce_fx,
                enable_graph,
                sync_dist,
                sync_dist_group,
                add_dataloader_idx,
                batch_size,
                rank_zero_only=rank_zero_only,
            )

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer (a list when ``configure_optimizers`` returned several); stepping it runs the
        trainer's hooks and counts toward ``global_step`` under manual optimization."""
        if self._plain_fabric() is not None:  # set up by a plain Fabric: the optimizers set up with this module
            optimizers = self.__dict__["_fabric_optimizers"]
            return optimizers[0] if len(optimizers) == 1 else list(optimizers)
        trainer = self.trainer
        wrapped = trainer.run_context.module_optimizers
        optimizers = wrapped if use_pl_optimizer else [o.optimizer for o in wrapped]
        if not optimizers:
            raise FabricxError(
                "self.optimizers() has nothing to return yet: the optimizers exist once Trainer.fit has called "
                "configure_optimizers (from on_fit_start on)."
            )
        return optimizers[0] if len(optimizers) == 1 else list(optimizers)

    def lr_schedulers(self) -> Any:
        """The LR scheduler (a list when there are several, ``None`` when there is none)."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only; through the progress bar while one draws, so the bar stays whole."""
        runner = self._runner()
        if runner is not None and not runner.is_global_zero:
            return
        bar = getattr(runner, "progress_bar_callback", None)
        if bar is not None and getattr(bar, "is_enabled", False):
            bar.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- steps (override) ------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute and return the loss (a tensor, or a dict with a ``"loss"`` key) for one batch."""
        raise NotImplementedError(
            f"{type(self).__name__} has no training_step. Define training_step(self, batch, batch_idx) "
            "returning the loss to train it with Trainer.fit."
        )

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one validation batch (log metrics with ``self.log``)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no validation_step, but validation data was given. Define "
            "validation_step(self, batch, batch_idx), or pass no val_dataloaders."
        )

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one test batch (log metrics with ``self.log``)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no test_step. Define test_step(self, batch, batch_idx) to use Trainer.test."
        )

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Return the prediction for one batch: ``(batch, batch_idx)``, and ``dataloader_idx`` when there are
        several prediction loaders, as in Lightning. The default calls ``self(batch)``.

        The steps take ``*args, **kwargs`` as Lightning's do, so an override may name and drop its parameters
        (``def training_step(self, train_batch)``) without a type checker calling it incompatible.
        """
        batch = kwargs.get("batch", args[0] if args else None)
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer; a list of optimizers; ``([optimizers], [schedulers])``; or
        ``{"optimizer": opt, "lr_scheduler": scheduler_or_config}`` where the config is
        ``{"scheduler": s, "interval": "step"|"epoch", "frequency": n, "monitor": "metric"}``."""
        raise NotImplementedError(
            f"{type(self).__name__} has no configure_optimizers. Define configure_optimizers(self) returning "
            "e.g. torch.optim.SGD(self.parameters(), lr=0.1)."
        )

    def _run_model(self) -> nn.Module:
        """What Lightning's mode hooks switch: the Trainer's set-up model (wrapper included), else this module."""
        trainer = self.__dict__.get("_trainer")
        model = trainer.model if trainer is not None else None
        return model if model is not None else self

    def on_validation_model_eval(self) -> None:
        """Put the model (``trainer.model``, this module inside it) in eval mode for validation."""
        self._run_model().eval()

    def on_validation_model_train(self) -> None:
        """Put the model back in train mode after validation inside fit."""
        self._run_model().train()

    def on_validation_model_zero_grad(self) -> None:
        """Drop gradients before validation inside fit (frees their memory)."""
        self.zero_grad()  # set_to_none=True, torch's default

    def on_test_model_eval(self) -> None:
        self._run_model().eval()

    def on_test_model_train(self) -> None:
        self._run_model().train()

    def on_predict_model_eval(self) -> None:
        self._run_model().eval()


def _algorithm_name(algorithm: Any) -> str:
    """A ``gradient_clip_algorithm`` as its lower-case name (Lightning's ``GradClipAlgorithmType`` gives its value)."""
    return str(getattr(algorithm, "value", algorithm)).lower()
