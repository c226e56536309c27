"""DeepSpeed engine files are read weights-only with DeepSpeed's own types allowed: a pickle payload in
them is refused (a marker file proves nothing ran), ``allow_pickle=True`` is the explicit opt-in, and
the tag folders named in ``meta.json`` stay inside the checkpoint.

The in-process checks use hand-made engine files; one fresh process runs a real single-rank DeepSpeed
engine through ``fabric.save``/``fabric.load`` (genuine files load, a tampered one is refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from fabricx.checkpoint.consolidate import consolidate_checkpoint
from fabricx.checkpoint.deepspeed_consolidate import consolidate_deepspeed_checkpoint, deepspeed_model_states
from fabricx.checkpoint.format import write_checkpoint
from fabricx.environments.local import find_free_port
from fabricx.utilities.exceptions import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("deepspeed")


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(self.marker),))


def _engine_checkpoint(path: Path, files: dict[str, Any], models: Any = None) -> Path:
    models = {"model": {"optimizer": None}} if models is None else models
    write_checkpoint(path, {"step": 1}, None, extra_meta={"deepspeed": {"zero_stage": 0, "models": models}})
    folder = path / "deepspeed" / "model"
    folder.mkdir(parents=True)
    for name, content in files.items():
        torch.save(content, folder / name)
    return path


def test_deepspeed_types_load_weights_only(tmp_path: Path) -> None:
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    state = {
        "module": {"w": torch.arange(3.0, dtype=torch.bfloat16)},
        "scalers": [LossScaler(1.0), DynamicLossScaler(2.0**16, 1000, 1.0, 2, True)],
        "stage": ZeroStageEnum(2),
    }
    path = _engine_checkpoint(tmp_path / "ckpt", {"mp_rank_00_model_states.pt": state})
    weights = consolidate_deepspeed_checkpoint(path)
    assert torch.equal(weights["w"], torch.arange(3.0)) and weights["w"].dtype == torch.float32


@pytest.mark.parametrize("zero", [False, True], ids=["stage0", "zero"])
def test_pickle_payload_in_engine_files_is_refused(zero: bool, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    files = {"mp_rank_00_model_states.pt": {"module": {"w": torch.ones(2)}, "x": _Payload(marker)}}
    if zero:
        files = {
            "zero_pp_rank_0_mp_rank_00_model_states.pt": files["mp_rank_00_model_states.pt"],
            "zero_pp_rank_0_mp_rank_00_optim_states.pt": {"optimizer_state_dict": {}},
        }
    path = _engine_checkpoint(tmp_path / "ckpt", files)
    with pytest.raises(CheckpointError, match="Refusing to load the DeepSpeed file .*allow_pickle=True") as error:
        consolidate_checkpoint(path, tmp_path / "out")
    assert "model_states.pt" in str(error.value)
    with pytest.raises(CheckpointError, match="Refusing to load"):
        deepspeed_model_states(path)
    assert not marker.exists() and not (tmp_path / "out").exists()
    # The explicit opt-in for trusted files unpickles (and so runs the payload).
    if not zero:
        consolidate_deepspeed_checkpoint(path, allow_pickle=True)
        assert marker.exists()


@pytest.mark.parametrize("models", [{"../outside": {}}, {"/tmp": {}}, {"a/b": {}}, [7], [".."]])
def test_tags_in_meta_json_stay_inside(models: Any, tmp_path: Path) -> None:
    path = _engine_checkpoint(
        tmp_path / "ckpt", {"mp_rank_00_model_states.pt": {"module": {"w": torch.ones(2)}}}, models=models
    )
    (tmp_path / "outside").mkdir()
    with pytest.raises(CheckpointError, match="only a plain name"):
        consolidate_checkpoint(path, tmp_path / "out")


def test_symlinked_tag_folder_or_file_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch.save({"module": {"w": torch.ones(2)}}, elsewhere / "mp_rank_00_model_states.pt")
    path = _engine_checkpoint(tmp_path / "ckpt", {})
    (path / "deepspeed" / "model").rmdir()
    (path / "deepspeed" / "model").symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match="symbolic link"):
        consolidate_checkpoint(path, tmp_path / "out")
    (path / "deepspeed" / "model").unlink()
    (path / "deepspeed" / "model").mkdir()
    (path / "deepspeed" / "model" / "mp_rank_00_model_states.pt").symlink_to(elsewhere / "mp_rank_00_model_states.pt")
    with pytest.raises(CheckpointError, match="symbolic link"):
        consolidate_checkpoint(path, tmp_path / "out2")


def test_engine_loads_go_through_the_weights_only_reader(tmp_path: Path) -> None:
    # DeepSpeed's engine reads every file through its checkpoint engine (TorchCheckpointEngine: torch.load with
    # weights_only=False); safe_engine_loading swaps that reader for the weights-only one while a load runs.
    from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

    from fabricx.checkpoint.deepspeed_files import safe_engine_loading

    class Engine:
        checkpoint_engine = TorchCheckpointEngine()

    engine = Engine()
    marker = tmp_path / "executed"
    torch.save({"optimizer_state_dict": {}, "x": _Payload(marker)}, tmp_path / "optim_states.pt")
    torch.save({"module": {"w": torch.ones(2)}}, tmp_path / "model_states.pt")
    original = engine.checkpoint_engine
    with safe_engine_loading(engine):
        genuine = engine.checkpoint_engine.load(str(tmp_path / "model_states.pt"))
        assert torch.equal(genuine["module"]["w"], torch.ones(2))
        with pytest.raises(CheckpointError, match="Refusing to load the DeepSpeed file .*optim_states.pt"):
            engine.checkpoint_engine.load(str(tmp_path / "optim_states.pt"), map_location=lambda s, loc: s)
    assert engine.checkpoint_engine is original and not marker.exists()


_ENGINE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    from torch import nn
    from fabricx import Fabric
    from fabricx.strategies.deepspeed import DeepSpeedStrategy
    from fabricx.utilities.exceptions import CheckpointError

    class Payload:
        def __reduce__(self):
            return (Path.touch, (Path(sys.argv[2]),))

    torch.set_num_threads(1)
    root, marker = Path(sys.argv[1]), Path(sys.argv[2])
    fabric = Fabric(accelerator="cpu", devices=1, strategy=DeepSpeedStrategy(stage=2, timeout=60))
    torch.manual_seed(0)
    net = nn.Linear(4, 2)
    model, optimizer = fabric.setup(net, torch.optim.AdamW(net.parameters(), lr=0.1))
    fabric.backward(model(torch.randn(3, 4)).sum())
    optimizer.step()
    fabric.save(root / "ckpt", {"model": model, "optimizer": optimizer, "step": 5})
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    fabric.backward(model(torch.randn(3, 4)).sum())
    optimizer.step()
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(root / "ckpt", state)
    out = {"genuine": state["step"] == 5 and all(torch.equal(saved[k], v) for k, v in model.state_dict().items())}
    optim = next((root / "ckpt" / "deepspeed" / "model").glob("*optim_states.pt"))
    content = torch.load(optim, weights_only=False)
    content["payload"] = Payload()
    torch.save(content, optim)
    try:
        fabric.load(root / "ckpt", state)
        out["tampered"] = "loaded"
    except CheckpointError as error:
        out["tampered"] = "CheckpointError: " + str(error)
    out["marker"] = marker.exists()
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.slow  # a real engine in a fresh process: about a minute on a loaded machine
@pytest.mark.timeout(300)
def test_fabric_load_under_deepspeed_reads_engine_files_weights_only(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(find_free_port()),
        "DS_ACCELERATOR": "cpu",
    }
    marker = tmp_path / "executed"
    done = subprocess.run(
        [sys.executable, "-c", _ENGINE_SCRIPT, str(tmp_path), str(marker)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=tmp_path,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout[-2000:], done.stderr[-3000:])
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["genuine"] is True
    assert result["tampered"].startswith("CheckpointError: Refusing to load the DeepSpeed file"), result
    assert "optim_states.pt" in result["tampered"]
    assert result["marker"] is False


def test_command_line_refuses_then_opts_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fabricx.cli import main

    marker = tmp_path / "executed"
    files = {"mp_rank_00_model_states.pt": {"module": {"w": torch.ones(2)}, "x": _Payload(marker)}}
    path = _engine_checkpoint(tmp_path / "ckpt", files)
    assert main(["consolidate", str(path), "-o", str(tmp_path / "out")]) == 1
    assert "Refusing to load the DeepSpeed file" in capsys.readouterr().err and not marker.exists()
    assert main(["consolidate", str(path), "-o", str(tmp_path / "out"), "--allow-pickle"]) == 0
    assert marker.exists() and (tmp_path / "out" / "meta.json").exists()


def test_fabric_load_weights_only_false_is_the_opt_in_for_engine_files(tmp_path: Path) -> None:
    from fabricx.checkpoint.deepspeed_files import load_engine_file
    from fabricx.checkpoint.unsafe_pickle import allow_unsafe_pickle

    marker = tmp_path / "executed"
    torch.save({"module": {}, "x": _Payload(marker)}, tmp_path / "model_states.pt")
    with pytest.raises(CheckpointError, match="Refusing to load"):
        load_engine_file(tmp_path / "model_states.pt")
    assert not marker.exists()
    with pytest.warns(UserWarning, match="weights_only=False"), allow_unsafe_pickle(tmp_path):
        load_engine_file(tmp_path / "model_states.pt")
    assert marker.exists()
