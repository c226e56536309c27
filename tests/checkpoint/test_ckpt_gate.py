"""Every reader of every layout goes through the gate, `fabricx.checkpoint.safe_read`.

For each layout (single file, directory, ``dcp`` with its ``meta.pt``, ``deepspeed`` stage 0 and ZeRO, the
Trainer's Lightning ``.ckpt``, the Accelerate adapter's folders) a real checkpoint is loaded twice:

* with the gate's one admission function watched: the load works, and every file of the checkpoint was
  admitted (a reader that opened a file on its own would leave it out);
* with the gate refusing everything: the load fails with the gate's error (a reader that bypassed it
  would load anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint import safe_read
from fabricx.utilities.exceptions import CheckpointError


def _fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def _state() -> dict[str, Any]:
    model = nn.Linear(3, 2)
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "step": 4}


def _saved(tmp_path: Path, layout: str | None) -> tuple[Path, Callable[[], Any]]:
    fabric = _fabric()
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / ("ckpt.pth" if layout == "single_file" else "ckpt")
    extra = {} if layout in (None, "single_file") else {"layout": layout}
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": 4}, **extra)

    def load() -> Any:
        state = _state()
        _fabric().load(path, state)
        assert state["step"] == 4

    return path, load


def _deepspeed(tmp_path: Path, zero: bool) -> tuple[Path, Callable[[], Any]]:
    """A folder as DeepSpeed writes it (``checkpoint/`` with its engine files), read into a plain model."""
    pytest.importorskip("deepspeed")
    folder = tmp_path / "ds"
    tag = folder / "checkpoint"
    tag.mkdir(parents=True)
    weights = {"weight": torch.arange(6.0).reshape(2, 3), "bias": torch.zeros(2)}
    common = {"buffer_names": [], "ds_version": "0.19.8", "dp_world_size": 1, "mp_world_size": 1}
    if zero:
        shapes = {name: t.shape for name, t in weights.items()}
        model_file = {**common, "module": {}, "param_shapes": [shapes], "shared_params": {},
                      "frozen_param_shapes": None, "frozen_param_fragments": None,
                      "ds_config": {"zero_optimization": {"stage": 2}}}  # fmt: skip
        flat = torch.cat([t.flatten() for t in weights.values()])
        optim = {"optimizer_state_dict": {"zero_stage": 2, "partition_count": 1,
                                          "single_partition_of_fp32_groups": [flat]}}  # fmt: skip
        torch.save(model_file, tag / "zero_pp_rank_0_mp_rank_00_model_states.pt")
        torch.save(optim, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    else:
        torch.save({**common, "module": weights, "ds_config": {}}, tag / "mp_rank_00_model_states.pt")

    def load() -> Any:
        model = nn.Linear(3, 2)
        _fabric().load(folder, {"model": model})
        assert torch.equal(model.weight.detach(), weights["weight"])

    return folder, load


def _lightning_ckpt(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    import fabricx.train as ft

    class Module(ft.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(3, 2)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = ft.Trainer(default_root_dir=tmp_path, max_epochs=1, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Module(), torch.utils.data.DataLoader(torch.ones(4, 3), batch_size=2))
    path = next((tmp_path / "checkpoints").glob("*.ckpt"))

    def load() -> Any:
        loaded = Module.load_from_checkpoint(path)
        assert torch.equal(loaded.layer.weight, trainer.lightning_module.layer.weight)

    return path, load


def _adapter_folder(tmp_path: Path) -> tuple[Path, Callable[[], Any]]:
    from fabricx.compat.accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 2))
    folder = tmp_path / "state"
    accelerator.save_state(folder)
    weight = model.weight.detach().clone()

    def load() -> Any:
        with torch.no_grad():
            model.weight.zero_()
        accelerator.load_state(folder)
        assert torch.equal(model.weight.detach(), weight)

    return folder, load


_LAYOUTS: dict[str, Callable[[Path], tuple[Path, Callable[[], Any]]]] = {
    "single_file": lambda tmp: _saved(tmp, "single_file"),
    "directory": lambda tmp: _saved(tmp, None),
    "dcp": lambda tmp: _saved(tmp, "dcp"),
    "deepspeed_stage0": lambda tmp: _deepspeed(tmp, zero=False),
    "deepspeed_zero": lambda tmp: _deepspeed(tmp, zero=True),
    "lightning_ckpt": _lightning_ckpt,
    "adapter_folder": _adapter_folder,
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_every_reader_admits_every_file_through_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    path, load = _LAYOUTS[layout](tmp_path)
    files = {p.resolve() for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()}
    assert files
    admitted: set[Path] = set()
    admit = safe_read._admit

    def watched(file: Path, *args: Any) -> Any:
        admitted.add(Path(file).resolve())
        return admit(file, *args)

    monkeypatch.setattr(safe_read, "_admit", watched)
    load()
    assert files <= admitted, sorted(str(f) for f in files - admitted)

    def refusing(file: Path, *args: Any) -> Any:
        raise CheckpointError(f"refused by the gate: {file}")

    monkeypatch.setattr(safe_read, "_admit", refusing)
    with pytest.raises(CheckpointError, match="refused by the gate"):
        load()
