"""``BaseFinetuning`` and ``BackboneFinetuning``: freeze parts of a model, then unfreeze them into new param groups."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module, ModuleDict
from torch.optim import Optimizer

from fabricx._compat.torch_internals import batch_norm_base
from fabricx.train.callbacks.base import Callback
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

log = logging.getLogger(__name__)

Modules = Module | Iterable[Any]


class BaseFinetuning(Callback):
    """Base for fine-tuning callbacks: override ``freeze_before_training`` and ``finetune_function``.

    ``freeze_before_training(module)`` runs in ``setup``, before ``configure_optimizers``, so the
    optimizer can be built from the trainable parameters only. ``finetune_function(module, epoch,
    optimizer)`` runs at every epoch start for each optimizer; unfreeze there with
    `unfreeze_and_add_param_group()`. The param groups added are stored in checkpoints (by
    parameter name) and rebuilt when ``fit`` resumes.

    Example:

    ```python
    class UnfreezeAt(BaseFinetuning):
        def freeze_before_training(self, module):
            self.freeze(module.feature_extractor)

        def finetune_function(self, module, epoch, optimizer):
            if epoch == 10:
                features = module.feature_extractor
                self.unfreeze_and_add_param_group(features, optimizer)
    ```
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        # What is frozen after the last freeze or unfreeze (`setup`, each epoch start): the names of the parameters
        # that do not train and of the batch norms that do not track statistics. Restored with the param groups:
        # `setup` froze the module as before training again (Lightning's resumed run leaves what it had unfrozen
        # frozen, its parameters in the optimizer without gradients).
        self._frozen: dict[str, list[str]] | None = None
        self._restored_frozen: dict[str, list[str]] | None = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"internal_optimizer_metadata": self._internal_optimizer_metadata}
        if self._frozen is not None:
            state["frozen"] = self._frozen  # not in Lightning's files
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        # Checkpoints of old Lightning versions hold the metadata itself.
        self._internal_optimizer_metadata = state_dict.get("internal_optimizer_metadata", state_dict)
        self._restored_frozen = state_dict.get("frozen")

    def _note_frozen(self, pl_module: Module) -> None:
        self._frozen = {
            "parameters": [name for name, param in pl_module.named_parameters() if not param.requires_grad],
            "batch_norms": [
                name for name, module in pl_module.named_modules()
                if isinstance(module, batch_norm_base()) and not module.track_running_stats
            ],
        }

    def _restore_frozen(self, pl_module: Module, frozen: dict[str, list[str]]) -> None:
        parameters, batch_norms = set(frozen["parameters"]), set(frozen["batch_norms"])
        for name, param in pl_module.named_parameters():
            param.requires_grad = name not in parameters
        for name, module in pl_module.named_modules():
            if isinstance(module, batch_norm_base()):
                module.track_running_stats = name not in batch_norms
        self._frozen = frozen

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        self.freeze_before_training(pl_module)
        self._note_frozen(pl_module)
        if getattr(getattr(trainer, "strategy", None), "engine_owns_optimizer", False):
            raise NotImplementedError(
                "The Finetuning callback does not support running with the DeepSpeed strategy."
                " Choose a different strategy or disable the callback."
            )

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self._restarting:
            return
        by_name = dict(pl_module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(index)
            if groups:
                optimizer.param_groups = _groups_with(groups, lambda name: by_name[name])
        if self._restored_frozen is not None:
            self._restore_frozen(pl_module, self._restored_frozen)
            self._restored_frozen = None
        self._restarting = False

    def on_train_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        for index, optimizer in enumerate(trainer.optimizers):
            groups_before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, index, groups_before, optimizer.param_groups)
        self._note_frozen(pl_module)

    def finetune_function(self, pl_module: TrainModule, epoch: int, optimizer: Optimizer) -> None:
        """Unfreeze what should train from ``epoch`` on (called at every epoch start, per optimizer)."""
        raise NotImplementedError

    def freeze_before_training(self, pl_module: TrainModule) -> None:
        """Freeze what should not train at first (called before ``configure_optimizers``)."""
        raise NotImplementedError

    def _store(self, module: Module, index: int, groups_before: int, groups: list[dict[str, Any]]) -> None:
        names = {param: name for name, param in module.named_parameters()}
        if index not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[index] = _groups_with(groups, lambda param: names[param])
        elif groups_before != len(groups):
            self._internal_optimizer_metadata[index].extend(
                _groups_with(groups[groups_before:], lambda param: names[param])
            )

    @staticmethod
    def flatten_modules(modules: Modules) -> list[Module]:
        """The leaf modules of ``modules`` plus the modules that hold parameters themselves."""
        if isinstance(modules, ModuleDict):
            modules = modules.values()
        if isinstance(modules, Module):
            candidates: Iterable[Module] = modules.modules()
        else:
            candidates = [leaf for item in modules for leaf in BaseFinetuning.flatten_modules(item)]
        return [m for m in candidates if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Generator:
        """The parameters of ``modules`` with this ``requires_grad`` (batch norms skipped unless ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, batch_norm_base()) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Let every parameter of ``modules`` train (batch norms track running statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, batch_norm_base()):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: Module) -> None:
        """Stop ``module``'s own parameters from training (a batch norm also stops tracking statistics)."""
        if isinstance(module, batch_norm_base()):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their batch norms keep training."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, batch_norm_base()) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable) -> list:
        """``params`` without those ``optimizer`` already optimizes (with a warning naming them)."""
        kept, skipped = [], []
        for param in params:
            present = any(torch.equal(p, param) for group in optimizer.param_groups for p in group["params"])
            (skipped if present else kept).append(param)
        if skipped:
            rank_zero_warn(
                "The provided params to be frozen already exist within another group of this optimizer."
                " Those parameters will be skipped.\n"
                "HINT: Did you init your optimizer in `configure_optimizer` as such:\n"
                f" {type(optimizer)}(filter(lambda p: p.requires_grad, self.parameters()), ...) ",
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new param group.

        Without ``lr`` the group starts at the first group's rate divided by ``initial_denom_lr``.
        """
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        params = BaseFinetuning.filter_on_optimizer(optimizer, params)
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})


def _groups_with(groups: list[dict[str, Any]], convert: Callable[[Any], Any]) -> list[dict[str, Any]]:
    # Param groups with each parameter replaced (by its name for a checkpoint, back to the tensor on resume).
    return [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [convert(p) for p in group["params"]]}
        for group in groups
    ]


def multiplicative(epoch: int) -> float:
    """The default ``lambda_func`` of `BackboneFinetuning`: the backbone's rate doubles every epoch."""
    return 2.0


class BackboneFinetuning(BaseFinetuning):
    """Train ``module.backbone`` from ``unfreeze_backbone_at_epoch`` on, at a rate that grows by ``lambda_func``.

    The backbone starts at ``backbone_initial_lr`` (or the current rate times ``backbone_initial_ratio_lr``)
    in a new param group; each later epoch multiplies it by ``lambda_func(epoch + 1)``, and with
    ``should_align`` it never exceeds the rest of the model's rate.

    Example:

    ```python
    finetuning = BackboneFinetuning(
        unfreeze_backbone_at_epoch=5, lambda_func=lambda epoch: 1.5
    )
    Trainer(callbacks=[finetuning])
    ```
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), Module):
            raise MisconfigurationException(
                "The LightningModule should have a nn.Module `backbone` attribute"
                f" (BackboneFinetuning freezes and unfreezes it; {type(pl_module).__name__} has none)."
            )
        super().on_fit_start(trainer, pl_module)

    def freeze_before_training(self, pl_module: TrainModule) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: TrainModule, epoch: int, optimizer: Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None, "set when the backbone was unfrozen"
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        else:
            return
        self.previous_backbone_lr = backbone_lr
        if self.verbose:
            rounding = self.rounding
            log.info(f"Current lr: {round(current_lr, rounding)}, Backbone lr: {round(backbone_lr, rounding)}")
