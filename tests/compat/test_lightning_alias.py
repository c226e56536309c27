"""`fabricx.compat.lightning.enable()`: Lightning's import names serve fabricx, in a fresh process each.

One process runs code written for Lightning (``import lightning.pytorch as pl``, ``pytorch_lightning``,
``lightning.fabric``) after ``enable()``: the classes are fabricx's, a small fit runs, names and modules fabricx
lacks raise ``ImportError`` naming them, and no module of Lightning's own is imported. Another imports Lightning
first: ``enable()`` then refuses, so the two never mix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_USER_CODE = textwrap.dedent(
    """
    import sys
    import fabricx.compat.lightning as alias

    alias.enable()
    import torch
    import lightning.pytorch as pl
    from lightning.fabric import Fabric
    from lightning.pytorch.callbacks import ModelCheckpoint
    from pytorch_lightning import LightningModule as PLModule
    from torch.utils.data import DataLoader, TensorDataset

    import fabricx
    import fabricx.accelerators
    import fabricx.train
    import fabricx.utilities.types
    from fabricx.compat.lightning.finder import AliasModule

    assert pl.LightningModule is PLModule is fabricx.train.TrainModule
    assert pl.Trainer is fabricx.train.Trainer and Fabric is fabricx.Fabric
    assert ModelCheckpoint is fabricx.callbacks.ModelCheckpoint
    from lightning.fabric.accelerators import TPUAccelerator  # Lightning's deprecated name of XLAAccelerator
    from lightning.pytorch.accelerators import TPUAccelerator as PLTPUAccelerator

    assert TPUAccelerator is PLTPUAccelerator is fabricx.accelerators.XLAAccelerator
    from lightning.fabric.utilities.types import _MAP_LOCATION_TYPE, _PATH  # private aliases libraries import

    assert _PATH == fabricx.utilities.types.PathLike and _MAP_LOCATION_TYPE == fabricx.utilities.types.MapLocation
    # What nn-template-core imports: its checkpoint I/O's base, the module builder, the logger base, a callback path.
    from lightning.pytorch.callbacks.progress.tqdm_progress import TQDMProgressBar
    from lightning.pytorch.core.saving import _load_state
    from lightning.pytorch.loggers.logger import Logger
    from lightning.pytorch.plugins import TorchCheckpointIO
    from fabricx.checkpoint.torch_checkpoint_io import TorchCheckpointIO as FabricxTorchIO
    from fabricx.train.checkpoint.lightning_files import module_from_state

    assert TorchCheckpointIO is FabricxTorchIO and _load_state is module_from_state
    # Lightning's hyper-parameter helpers, where its tests and libraries import them.
    from lightning.pytorch.core.mixins import HyperparametersMixin
    from lightning.pytorch.core.saving import load_hparams_from_yaml, save_hparams_to_yaml
    from lightning.pytorch.utilities import AttributeDict, is_picklable

    assert HyperparametersMixin is fabricx.train.HyperparametersMixin and AttributeDict is fabricx.train.AttributeDict
    assert load_hparams_from_yaml is fabricx.train.load_hparams_from_yaml and is_picklable is fabricx.train.is_picklable
    assert save_hparams_to_yaml is fabricx.train.save_hparams_to_yaml
    from lightning.pytorch.plugins import AsyncCheckpointIO
    from lightning.pytorch.plugins.io import AsyncCheckpointIO as IOAsyncCheckpointIO
    from lightning.pytorch.plugins.io import TorchCheckpointIO as IOTorchCheckpointIO
    from fabricx.checkpoint.async_checkpoint_io import AsyncCheckpointIO as FabricxAsyncIO

    assert AsyncCheckpointIO is IOAsyncCheckpointIO is FabricxAsyncIO and IOTorchCheckpointIO is FabricxTorchIO
    assert Logger is fabricx.loggers.Logger and TQDMProgressBar is fabricx.callbacks.TQDMProgressBar

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), data)
    assert trainer.global_step == 2

    try:
        from lightning.pytorch.callbacks import ModelPruning  # fabricx has none
    except ImportError as error:
        assert "ModelPruning" in str(error), error
    else:
        raise AssertionError("ModelPruning imported")
    from lightning.pytorch.callbacks import Checkpoint, LambdaCallback, ModelSummary
    from lightning.pytorch.utilities.model_summary import summarize

    import fabricx.callbacks
    from fabricx.train.module.summary import summarize as fabricx_summarize

    assert (Checkpoint, LambdaCallback, ModelSummary) == (
        fabricx.callbacks.Checkpoint, fabricx.callbacks.LambdaCallback, fabricx.callbacks.ModelSummary
    )
    assert summarize is fabricx_summarize
    try:
        import lightning.pytorch.cli  # no counterpart
    except ImportError as error:
        assert "lightning.pytorch.cli" in str(error), error
    else:
        raise AssertionError("lightning.pytorch.cli imported")

    roots = ("lightning", "pytorch_lightning", "lightning_fabric")
    served = [name for name in sys.modules if name.split(".")[0] in roots]
    assert served and all(isinstance(sys.modules[name], AliasModule) for name in served), served
    alias.disable()
    assert not alias.is_enabled() and "lightning.pytorch" not in sys.modules
    print("ALIAS OK")
    """
)

_LIGHTNING_FIRST = textwrap.dedent(
    """
    import lightning.pytorch
    import fabricx.compat.lightning as alias
    from fabricx.utilities.exceptions import FabricxError

    try:
        alias.enable()
    except FabricxError as error:
        assert "after Lightning was imported (lightning" in str(error), error
        assert "before anything imports Lightning" in str(error), error
        print("REFUSED")
    """
)


def _run(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ}
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed.stdout


def test_lightning_imports_resolve_to_fabricx_after_enable():
    assert "ALIAS OK" in _run(_USER_CODE)


def test_enable_refuses_once_lightning_is_imported():
    pytest.importorskip("lightning")
    assert "REFUSED" in _run(_LIGHTNING_FIRST)


# -- fabricx run --as-lightning ----------------------------------------------------------------------------------
def test_run_as_lightning_builds_the_alias_program(tmp_path):
    from fabricx.cli import RunOptions, build_torchrun_args

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    args = build_torchrun_args(RunOptions(script=str(script), accelerator="cpu", devices="1", as_lightning=True))
    assert args[-3:] == ["-m", "fabricx.compat.lightning", str(script)]  # torchrun runs the module, which runs it


@pytest.mark.distributed
def test_fabricx_run_as_lightning_serves_the_scripts_lightning_imports(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "import lightning.pytorch as pl\n"
        "import fabricx.train\n"
        "assert pl.Trainer is fabricx.train.Trainer\n"
        "print('served', sys.argv[1:])\n"
    )
    drop = ("FABRICX_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "TORCHELASTIC", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    command = [sys.executable, "-m", "fabricx", "run", "--as-lightning", "--accelerator", "cpu", "--devices", "1"]
    completed = subprocess.run(
        [*command, str(script), "--lr", "0.1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "served ['--lr', '0.1']" in completed.stdout
