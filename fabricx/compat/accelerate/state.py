"""Saving and loading for the Accelerate adapter: weights export, ``save``, and ``save_state``/``load_state``
with automatic checkpoint names over `fabricx.Fabric` checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from fabricx.checkpoint.manager import CheckpointManager
from fabricx.checkpoint.safe_read import read_regular
from fabricx.compat.accelerate.data import SkipBatchesLoader
from fabricx.compat.accelerate.io import save_object, save_state_dict
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.compat.accelerate.config import DataLoaderConfiguration, ProjectConfiguration
    from fabricx.fabric import Fabric

__all__ = ["StateMixin"]


_LOCATION_NOTE = "fabricx-checkpoint-location.txt"


def _key(base: str, index: int) -> str:
    return base if index == 0 else f"{base}_{index}"


class StateMixin:
    """``Accelerator`` methods that write and read models and training state."""

    _fabric: Fabric
    project_configuration: ProjectConfiguration
    dataloader_config: DataLoaderConfiguration
    _models: list[Any]
    _optimizers: list[Any]
    _schedulers: list[Any]
    _dataloaders: list[Any]
    _custom_objects: list[Any]
    _step_was_skipped: bool
    step: int
    is_main_process: bool
    save_iteration: int

    def wait_for_everyone(self) -> None:
        """Wait until every process gets here.

        Example:
            ```python
            accelerator.wait_for_everyone()
            ```
        """
        self._fabric.barrier()

    def unwrap_model(
        self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> nn.Module:
        """The user's own module behind a prepared model.

        Example:
            ```python
            unwrapped_model = accelerator.unwrap_model(model)
            ```
        """
        return unwrap(model)

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The model's full state dict (gathered from every process where the strategy shards it).

        Example:
            ```python
            state = accelerator.get_state_dict(model)
            ```
        """
        return self._fabric.strategy.get_module_state_dict(_user_module(model))

    def save_model(
        self,
        model: nn.Module,
        save_directory: str | os.PathLike[str],
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Write the model's weights into ``save_directory`` on the main process: ``model.safetensors``
        (or shards ``model-00001-of-0000N.safetensors`` with ``model.safetensors.index.json`` when larger
        than ``max_shard_size``, an int of bytes or a string like ``"5GB"``); with
        ``safe_serialization=False``, ``pytorch_model.bin`` (sharded likewise). Every process must call it.

        Example:
            ```python
            accelerator.wait_for_everyone()
            accelerator.save_model(model, "export/", max_shard_size="1GB")
            ```
        """
        state_dict = self.get_state_dict(model)
        if self.is_main_process:
            save_state_dict(state_dict, save_directory, max_shard_size, safe_serialization)
        self.wait_for_everyone()

    def save(self, obj: Any, f: str | os.PathLike[str] | Any, safe_serialization: bool = False) -> None:
        """Write ``obj`` to ``f`` on the main process only (``torch.save``; a safetensors file with
        ``safe_serialization=True``). Usable as transformers' ``save_function``.

        Example:
            ```python
            accelerator.save(unwrapped_model.state_dict(), "weights.pt")
            ```
        """
        if self.is_main_process:
            save_object(obj, f, safe_serialization=safe_serialization)

    # -- checkpoints -----------------------------------------------------------------------------------
    def register_for_checkpointing(self, *objects: Any) -> None:
        """Also store and restore these objects (anything with ``state_dict``/``load_state_dict``) in
        `save_state()`/`load_state()`, in registration order.

        Example:
            ```python
            accelerator.register_for_checkpointing(my_counter)
            ```
        """
        invalid = [
            f"#{i} ({type(obj).__name__})"
            for i, obj in enumerate(objects)
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)))
        ]
        if invalid:
            raise ValueError(
                f"register_for_checkpointing() needs objects with state_dict() and load_state_dict(); "
                f"{', '.join(invalid)} lack them. Add those two methods or leave the objects out."
            )
        self._custom_objects.extend(objects)

    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        async_save: bool = False,
        **kwargs: Any,
    ) -> str:
        """Save models, optimizers, schedulers, the grad scaler, every process's random state, prepared
        loaders' positions (with ``use_stateful_dataloader=True``) and registered objects.

        With ``automatic_checkpoint_naming`` the folder is ``project_dir/checkpoints/checkpoint_{n}``,
        ``n`` one past the highest on disk, and only the newest ``total_limit`` are kept. Every process
        must call it; returns the folder. ``async_save=True`` (a fabricx addition) writes it in the
        background (see ``Fabric.save``); retention then runs once it is committed.

        Example:
            ```python
            path = accelerator.save_state()
            ```
        """
        manager = self._manager()
        if manager is not None:
            if output_dir is not None:
                rank_zero_warn(
                    f"save_state({output_dir!r}) ignores the folder: automatic_checkpoint_naming=True writes to "
                    f"{manager.directory}/checkpoint_<n>. Turn automatic naming off to choose the folder."
                )
            # The one manager names, reserves and retains, as for Fabric.save_checkpoint.
            index = self._next_checkpoint_index()
            mode = "async" if async_save else "sync"
            path = self._fabric.checkpointer.save_next(manager, self._checkpoint_state(), mode=mode, index=index)
            self.project_configuration.iteration = index + 1
            self.wait_for_everyone()  # rank 0's retention is done before any process looks at the folder
            return str(path)
        if output_dir is None:
            raise ValueError(
                "save_state() needs an output_dir, or ProjectConfiguration(project_dir=..., "
                "automatic_checkpoint_naming=True) to choose one."
            )
        path = self._shared_folder(Path(output_dir), writing=True)
        self._fabric.save(path, self._checkpoint_state(), async_save=async_save)
        return str(path)

    def load_state(self, input_dir: str | os.PathLike[str] | None = None, strict: bool = True, **kwargs: Any) -> str:
        """Restore what `save_state()` wrote, into the prepared and registered objects. Without
        ``input_dir`` (automatic naming) the numerically newest complete checkpoint is loaded. Returns
        the folder loaded.

        Example:
            ```python
            accelerator.load_state()  # newest project_dir/checkpoints/checkpoint_<n>
            ```
        """
        if input_dir is None:
            manager = self._manager()
            if manager is None:
                raise ValueError(
                    "load_state() needs an input_dir, or ProjectConfiguration(project_dir=..., "
                    "automatic_checkpoint_naming=True) to find the newest checkpoint."
                )
            latest = self._fabric.checkpointer.latest(manager)  # waits for an asynchronous save_state() too
            if latest is None:
                raise FileNotFoundError(
                    f"load_state() found no complete checkpoint in {manager.directory}. Save one with "
                    "save_state() first, or pass input_dir=... ."
                )
            path = latest
        else:
            self._fabric.checkpointer.wait()  # an asynchronous save_state() may still be writing this folder
            path = os.fspath(input_dir)
            if not os.path.isdir(path):
                raise FileNotFoundError(f"load_state({path!r}): no such checkpoint folder.")
            path = os.fspath(self._shared_folder(Path(path), writing=False))
        self._fabric.load(path, self._checkpoint_state(), strict=strict)
        self._step_was_skipped = False
        self.step = self._fabric.accumulation_state.counter  # the micro-batch count, as Accelerate restores it
        return str(path)

    def _shared_folder(self, folder: Path, writing: bool) -> Path:
        """The one folder every process writes to (or reads from) when each passed its own.

        A fabricx checkpoint is one folder shared by all processes. When the processes name different
        folders (e.g. each its own temporary directory), the main process's folder holds the checkpoint
        and every other folder gets a note of where it is, so ``load_state`` on that folder finds it.
        """
        if self._fabric.world_size == 1:
            return folder
        mine = folder.resolve()
        if not writing and (mine / _LOCATION_NOTE).is_file() and not (mine / "meta.json").exists():
            note = read_regular(mine / _LOCATION_NOTE, "the checkpoint location note")
            mine = Path(note.decode("utf-8", errors="replace").strip())
        folders: list[Any] = [None] * self._fabric.world_size
        torch.distributed.all_gather_object(folders, str(mine))
        main = Path(folders[0])
        if writing and mine != main:
            mine.mkdir(parents=True, exist_ok=True)
            (mine / _LOCATION_NOTE).write_text(f"{main}\n")
        return main

    def _manager(self) -> CheckpointManager | None:
        config = self.project_configuration
        if not config.automatic_checkpoint_naming:
            return None
        if config.project_dir is None:
            raise MisconfigurationError(
                "automatic_checkpoint_naming=True needs ProjectConfiguration(project_dir=...) to know where to "
                "write checkpoints."
            )
        return CheckpointManager(config.project_dir, total_limit=config.total_limit)

    def _next_checkpoint_index(self) -> int:
        # Decided on one process: the others may scan while it is committing.
        index = self.save_iteration if self.is_main_process else None
        return int(cast("int", self._fabric.broadcast(index)))  # rank 0's index reaches every rank

    def _checkpoint_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for base, objects in (
            ("model", self._models),
            ("optimizer", self._optimizers),
            ("scheduler", self._schedulers),
        ):
            for index, obj in enumerate(objects):
                state[_key(base, index)] = obj
        if self.dataloader_config.use_stateful_dataloader:
            for index, loader in enumerate(self._dataloaders):
                state[_key("dataloader", index)] = loader
        for index, obj in enumerate(self._custom_objects):
            state[f"custom_checkpoint_{index}"] = obj
        return state

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> SkipBatchesLoader:
        """Iterate ``dataloader`` without its first ``num_batches`` batches (resuming without a stateful loader).

        Example:
            ```python
            for batch in accelerator.skip_first_batches(loader, resume_step): ...
            ```
        """
        return SkipBatchesLoader(dataloader, num_batches)


def _user_module(model: nn.Module) -> nn.Module:
    inner = unwrap(model)
    return getattr(inner, "module", inner) if isinstance(inner, torch.nn.parallel.DistributedDataParallel) else inner
