"""The Lightning Fabric surface people call, through fabricx and through Lightning Fabric on the same script.

* collectives (``all_reduce`` in place, ``all_gather`` shapes, ``broadcast``, ``barrier``), an IterableDataset
  under DDP, ``eval()``/``train()`` on a set-up DDP module and ``ThroughputMonitor`` on 2 ranks: one 2-process
  launch (torchrun, gloo) running ``_fabric_surface_job.py`` through both frameworks in the same processes; the
  same on one process here;
* ``Throughput`` / ``ThroughputMonitor``: the same update sequences through both, equal dicts;
* a DataLoader subclass with its own ``__iter__`` and state protocol: kept, with its epochs, as Lightning does;
* ``WandbLogger.experiment`` after ``finalize`` and the W&B calls (offline).

Tensors are compared with ``torch.equal`` and their dtypes; everything else with ``==``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _compare import assert_same

from fabricx.environments.local import find_free_port

JOB = Path(__file__).with_name("_fabric_surface_job.py")


# -- 2 processes: collectives, IterableDataset, eval/train ---------------------------------------------------
@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fabric_surface")
    env = {**os.environ}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FABRICX_GLOBAL_SEED"):
        env.pop(name, None)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={find_free_port()}", str(JOB), str(out),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the launch exited with {done.returncode}:\n{done.stderr[-4000:]}"
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_two_processes_collectives_iterable_data_and_train_flags_equal_lightning(two_process_results):
    for rank, results in enumerate(two_process_results):
        lightning, ours = results["lightning"], results["fabricx"]
        assert lightning["world_size"] == 2
        assert_same(lightning, {k: v for k, v in ours.items() if k != "subclass_ddp_resumed"}, f"rank {rank}")
        # What the comparison pins: in place (a script ignoring the return value logs the mean).
        assert bool(ours["ignored_return"] == 3.5) and ours["reduce_sum"]["same"]
        assert_same(ours["reduce_int_mean"]["returned"], torch.tensor([0, 2]))
        assert ours["gather_number"].shape == (2,)
        # The IterableDataset: each rank its own shard, again the next epoch; the whole stream on each rank.
        assert ours["rank_stream"] == [[[rank, rank + 2], [rank + 4, rank + 6], [rank + 8, rank + 10]]] * 2
        assert ours["whole_stream"] == [[[0, 1], [2, 3], [4, 5]]] * 2
        assert ours["training_flags"] == [(False, False, False), (True, True, True)]
        subclass = ours["subclass_ddp"]
        assert subclass["class"] == "EpochCountingLoader" and subclass["counted"] == 2
        assert subclass["epochs"][0] != subclass["epochs"][1] and len(subclass["epochs"][0]) == 4  # 10 of 20 each
        assert ours["subclass_ddp_resumed"] == subclass["epochs"][0][2:]
        computed = ours["throughput"]["computed"]
        if rank == 0:
            assert computed[-1]["samples_per_sec"] == 2 * computed[-1]["device/samples_per_sec"]
        else:
            assert computed == [{}] * 5 and ours["throughput"]["step"] == -1
    # The note about the IterableDataset, once, on rank 0 only.
    printed = [results["fabricx_printed"] for results in two_process_results]
    assert printed[0].count("IterableDataset") == 1 and "IterableDataset" not in printed[1]


def test_one_process_collectives_and_train_flags_equal_lightning():
    from lightning.fabric import Fabric as LightningFabric

    from fabricx import Fabric
    from tests.differential._fabric_surface_job import _tensors

    def script(fabric) -> dict:
        value = torch.tensor([1.0, 2.0])
        model = fabric.setup(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)))
        model.eval()
        evaluated = (model.training, model.module.training, model.module[1].training)
        model.train()
        fabric.barrier()
        return _tensors({
            "gather_number": fabric.all_gather(1.5),
            "gather_vector": fabric.all_gather(torch.tensor([1, 2])),
            "gather_nested": fabric.all_gather({"a": 3, "b": [torch.ones(2, 1)]}),
            "reduce_same": fabric.all_reduce(value) is value,
            "reduce_number": fabric.all_reduce(2, reduce_op="sum"),
            "broadcast": fabric.broadcast({"x": [1, 2]}),
            "flags": [evaluated, (model.training, model.module.training, model.module[1].training)],
        })

    lightning = script(LightningFabric(accelerator="cpu", devices=1))
    ours = script(Fabric(accelerator="cpu", devices=1))
    assert_same(lightning, ours)
    assert_same(ours["gather_number"], torch.tensor(1.5))
    assert ours["flags"] == [(False, False, False), (True, True, True)]


# -- Throughput / ThroughputMonitor ------------------------------------------------------------------------------
class _Raised:
    """What a call raised: equal to another when either's type is a subclass of the other's (fabricx may raise a
    subclass of Lightning's type, e.g. one that is both a ``ValueError`` and Lightning's ``AssertionError``)."""

    def __init__(self, error: BaseException) -> None:
        self.type = type(error)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Raised) and (issubclass(self.type, other.type) or issubclass(other.type, self.type))

    def __repr__(self) -> str:
        return f"raised {self.type.__name__}"


def _run_throughput(throughput_cls, calls: list[tuple[str, dict]], **init) -> list[Any]:
    """Every call's result (a dict, None) or what it raised, in order."""
    try:
        throughput = throughput_cls(**init)
    except (ValueError, AssertionError) as error:
        return [_Raised(error)]
    out: list[Any] = []
    for method, kwargs in calls:
        try:
            out.append(getattr(throughput, method)(**kwargs))
        except (ValueError, RuntimeError, IndexError) as error:
            out.append(_Raised(error))
    return out


def _sequences() -> dict[str, tuple[dict, list[tuple[str, dict]]]]:
    generator = torch.Generator().manual_seed(3)
    steps = torch.rand(12, generator=generator).add(0.05).cumsum(0).tolist()  # irregular, increasing times
    sizes = torch.randint(1, 9, (12,), generator=generator).cumsum(0).tolist()
    full = []
    for i, (t, samples) in enumerate(zip(steps, sizes, strict=True)):
        full.append(("update", {"time": t, "batches": i + 1, "samples": samples, "lengths": 7 * samples,
                                "flops": 1000.0 + 37 * i}))  # fmt: skip
        full.append(("compute", {}))
    sometimes_flops = [
        ("update", {"time": t, "batches": i + 1, "samples": s, **({"flops": 3 * i + 1} if i % 2 else {})})
        for i, (t, s) in enumerate(zip(steps, sizes, strict=True))
    ] + [("compute", {})]
    errors = [
        ("compute", {}),  # nothing yet
        ("update", {"time": 1.0, "batches": 1, "samples": 4, "lengths": 8}),
        ("update", {"time": 1.0, "batches": 2, "samples": 8, "lengths": 16}),  # time did not increase
        ("update", {"time": 2.0, "batches": 3, "samples": 2}),  # fewer samples than batches
        ("update", {"time": 3.0, "batches": 3, "samples": 9, "lengths": 4}),  # fewer lengths than samples
        ("update", {"time": 4.0, "batches": 4, "samples": 12}),
        ("update", {"time": 5.0, "batches": 5, "samples": 16, "lengths": 40}),  # lengths missing in one update
        ("update", {"time": 6.0, "batches": 5, "samples": 20}),  # batches did not increase
        ("compute", {}),
        ("reset", {}),
        ("update", {"time": 0.5, "batches": 1, "samples": 2}),
        ("update", {"time": 0.75, "batches": 2, "samples": 4}),
        ("compute", {}),
    ]
    return {
        "window_wraps": ({"window_size": 3, "available_flops": 5000.0}, full),
        "world_size_4": ({"window_size": 4, "world_size": 4, "available_flops": 1e4, "separator": "|"}, full),
        "world_size_2_no_mfu": ({"window_size": 2, "world_size": 2}, full),
        "flops_sometimes": ({"window_size": 3}, sometimes_flops),
        "errors": ({"window_size": 2}, errors),
        "lengths_missing": ({"window_size": 4}, errors[1:2] + errors[5:7] + errors[8:9]),
        "window_of_one": ({"window_size": 1}, []),
        "no_devices": ({"world_size": 0}, []),
    }


@pytest.mark.parametrize("name", list(_sequences()))
def test_throughput_equals_lightnings_for_the_same_updates(name):
    from lightning.fabric.utilities import Throughput as LightningThroughput

    from fabricx.utilities import Throughput

    init, calls = _sequences()[name]
    expected = _run_throughput(LightningThroughput, calls, **init)
    got = _run_throughput(Throughput, calls, **init)
    assert_same(expected, got, name)
    if name == "window_wraps":  # the comparison compared rates, not only totals
        assert {"device/samples_per_sec", "device/items_per_sec", "device/mfu"} <= set(got[-1])
    if name == "errors":
        assert [type(x).__name__ for x in got].count("_Raised") == 5
    if name == "lengths_missing":
        assert got[2] == _Raised(RuntimeError(""))


def test_throughput_monitor_logs_what_lightnings_logs():
    from lightning.fabric import Fabric as LightningFabric
    from lightning.fabric.loggers import Logger as LightningLogger
    from lightning.fabric.utilities import ThroughputMonitor as LightningMonitor
    from lightning.fabric.utilities import measure_flops as lightning_measure_flops

    from fabricx import Fabric
    from fabricx.loggers import Logger
    from fabricx.utilities import ThroughputMonitor, measure_flops

    def recorder(base):
        class Recorder(base):
            name, version = "rec", 0
            logged: list

            def log_metrics(self, metrics, step=None):
                self.logged.append((step, dict(metrics)))

            def log_hyperparams(self, params, *args, **kwargs):
                pass

        recorder = Recorder()
        recorder.logged = []
        return recorder

    def script(fabric_cls, monitor_cls, flops_fn, logger) -> dict:
        fabric = fabric_cls(accelerator="cpu", devices=1, loggers=logger)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
        x = torch.randn(4, 6)
        flops = flops_fn(model, lambda: model(x), lambda y: y.sum())
        grads = [p.grad.clone() for p in model.parameters()]  # what the counted backward left behind
        monitor = monitor_cls(fabric, window_size=3, separator=".")
        returned = []
        for step in range(1, 8):
            monitor.update(time=0.3 * step + 0.01 * step**2, batches=step, samples=4 * step, flops=flops)
            if step % 2 == 0:
                returned.append(monitor.compute_and_log(step=None if step < 6 else 100 + step))
        try:
            monitor_cls(fabric, available_flops=1.0)
            refused = None
        except TypeError:
            refused = "TypeError"
        return {"flops": flops, "grads": grads, "returned": returned, "logged": logger.logged,
                "step": monitor.step, "available_flops": monitor.available_flops, "refused": refused}  # fmt: skip

    expected = script(LightningFabric, LightningMonitor, lightning_measure_flops, recorder(LightningLogger))
    got = script(Fabric, ThroughputMonitor, measure_flops, recorder(Logger))
    assert_same(expected, got)
    assert [step for step, _ in got["logged"]] == [0, 1, 106] and "device.flops_per_sec" in got["returned"][-1]


# -- a DataLoader subclass with its own iteration and state ------------------------------------------------------
class EpochStream(torch.utils.data.IterableDataset):
    """A stream reshuffled each epoch (as streaming datasets are), told its epoch by its loader."""

    def __init__(self, length: int) -> None:
        self.length, self.epoch = length, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.length, generator=torch.Generator().manual_seed(100 + self.epoch))
        return iter(order.tolist())

    def state_dict(self, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict:
        return {"epoch": self.epoch, "samples": num_samples_yielded, "workers": num_workers, "batch": batch_size}


class StreamLoader(torch.utils.data.DataLoader):
    """Like a streaming loader: its own epochs and ``__iter__``; ``state_dict()`` asks the dataset with arguments."""

    def __init__(self, dataset: EpochStream, batch_size: int) -> None:
        super().__init__(dataset, batch_size=batch_size)
        self.current_epoch, self.num_samples_yielded, self._restored = 0, 0, False

    def __iter__(self):
        if self._restored:  # continue the saved epoch where it stopped
            self._restored, skip = False, self.num_samples_yielded
        else:
            self.current_epoch += 1
            self.num_samples_yielded, skip = 0, 0
        self.dataset.set_epoch(self.current_epoch)
        for index, batch in enumerate(super().__iter__()):
            if index * self.batch_size < skip:
                continue
            self.num_samples_yielded += len(batch)
            yield batch

    def state_dict(self) -> dict:
        return {
            "dataset": self.dataset.state_dict(self.num_samples_yielded, self.num_workers, self.batch_size),
            "current_epoch": self.current_epoch,
            "num_samples_yielded": self.num_samples_yielded,
        }

    def load_state_dict(self, state: dict) -> None:
        self.current_epoch, self.num_samples_yielded = state["current_epoch"], state["num_samples_yielded"]
        self._restored = True


class ArgumentStateLoader(StreamLoader):
    """A loader whose own ``state_dict`` needs arguments (a checkpoint cannot call it as ``state_dict()``)."""

    def state_dict(self, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict:  # type: ignore[override]
        return {"samples": num_samples_yielded}


def _stream_script(fabric, path: Path) -> dict:
    """Three epochs of a train and a validation stream, a save in the middle of epoch 2, then a resume."""
    train_raw, val_raw = StreamLoader(EpochStream(12), batch_size=3), StreamLoader(EpochStream(6), batch_size=3)
    if fabric is not None:
        train, val = fabric.setup_dataloaders(train_raw, val_raw)
    else:
        train, val = train_raw, val_raw
    seen: dict[str, list] = {"train": [], "val": []}
    for epoch in range(3):
        for index, batch in enumerate(train):
            seen["train"].append(batch.tolist())
            if fabric is not None and (epoch, index) == (1, 1):
                fabric.save(path, {"loader": train})
        seen["val"].append([batch.tolist() for batch in val])
    out = {"seen": seen, "epochs": [train_raw.current_epoch, val_raw.current_epoch]}
    if fabric is not None:
        fresh_raw = StreamLoader(EpochStream(12), batch_size=3)
        fresh = fabric.setup_dataloaders(fresh_raw)
        fabric.load(path, {"loader": fresh})
        out["resumed"] = [batch.tolist() for batch in fresh]
        out["resumed_epoch"] = fresh_raw.current_epoch
        arguments = fabric.setup_dataloaders(ArgumentStateLoader(EpochStream(6), batch_size=3))
        next(iter(arguments))
        try:
            fabric.save(path.with_name("arguments.ckpt"), {"loader": arguments})
            out["saved_a_loader_whose_state_dict_needs_arguments"] = True
        except TypeError:
            out["saved_a_loader_whose_state_dict_needs_arguments"] = False
    return out


def test_dataloader_subclass_with_its_own_protocol_is_kept_as_lightning_keeps_it(tmp_path):
    from lightning.fabric import Fabric as LightningFabric

    from fabricx import Fabric
    from fabricx.data.loader import has_own_protocol

    plain = _stream_script(None, tmp_path / "plain.ckpt")
    lightning = _stream_script(LightningFabric(accelerator="cpu", devices=1), tmp_path / "lightning.ckpt")
    with pytest.warns(UserWarning, match=r"state_dict\(\) takes arguments"):
        ours = _stream_script(Fabric(accelerator="cpu", devices=1), tmp_path / "fabricx.ckpt")
    # Each validation pass reads the stream's next epoch, as with plain torch and Lightning.
    assert plain["seen"]["val"][0] != plain["seen"]["val"][1]
    assert_same(plain["seen"], lightning["seen"])
    assert_same(plain["seen"], ours["seen"])
    assert plain["epochs"] == lightning["epochs"] == ours["epochs"] == [3, 3]
    # The loader's own state, saved mid-epoch and loaded, resumes it as the loader's own protocol does.
    assert lightning["resumed"] == ours["resumed"] == plain["seen"]["train"][6:8]
    assert lightning["resumed_epoch"] == ours["resumed_epoch"] == 2
    # Lightning calls state_dict() and fails; fabricx keeps its counters and says the loader's own state is not in.
    assert not lightning["saved_a_loader_whose_state_dict_needs_arguments"]
    assert ours["saved_a_loader_whose_state_dict_needs_arguments"]
    assert has_own_protocol(StreamLoader(EpochStream(2), 1)) and not has_own_protocol(torch.utils.data.DataLoader([1]))


# -- WandbLogger ------------------------------------------------------------------------------------------------
def _wandb_history(save_dir: Path) -> dict[str, list]:
    """``{run id: [(step, {key: value or media type})]}`` from every offline run log under ``save_dir``."""
    import glob
    import json

    from tests.loggers.test_trackers import _wandb_records

    runs: dict[str, list] = {}
    for run_file in sorted(glob.glob(str(save_dir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        run_id = Path(run_file).stem.removeprefix("run-")
        # W&B's service process writes the log on its own schedule: complete once its exit record is in.
        deadline = time.monotonic() + 60
        while not any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(run_file)):
            assert time.monotonic() < deadline, f"the W&B run log {run_file} never got its exit record"
            time.sleep(0.2)
        for record in _wandb_records(run_file):
            if record.WhichOneof("record_type") != "history":
                continue
            row = {}
            for item in record.history.item:
                key, value = item.key or "/".join(item.nested_key), json.loads(item.value_json)
                if key.endswith("/_type"):  # a media object: compared by its type (its files hold random names)
                    row[key.removesuffix("/_type")] = value
                elif not key.startswith("_") and "/" not in key.removeprefix("trainer/"):
                    row[key] = value["_type"] if isinstance(value, dict) and "_type" in value else value
            runs.setdefault(run_id, []).append(row)
    return runs


def _wandb_script(logger_cls, fabric_cls, save_dir: Path) -> dict:
    import numpy as np
    import wandb

    logger = logger_cls(project="surface", save_dir=save_dir, offline=True)
    fabric = fabric_cls(accelerator="cpu", devices=1, loggers=logger)
    fabric.log("loss", 1.0, step=0)
    before = logger.experiment.id
    logger.finalize("success")
    after = logger.experiment.id  # the same run, not a new one
    logger.watch(torch.nn.Linear(2, 2), log="all", log_freq=1)
    logger.log_table("table", columns=["a", "b"], data=[[1, "x"], [2, "y"]], step=1)
    logger.log_text("text", columns=["t"], data=[["hello"]], step=1)
    logger.log_image("image", [np.zeros((4, 4, 3), dtype=np.uint8)], step=2, caption=["black"])
    logger.log_metrics({"loss": 0.5}, step=3)
    errors = []
    not_a_list, too_few_captions = np.zeros((2, 2)), {"caption": ["a"]}
    for call in (lambda: logger.log_image("i", not_a_list), lambda: logger.log_image("i", [1, 2], **too_few_captions)):
        try:
            call()
        except (TypeError, ValueError) as error:
            errors.append(type(error).__name__)
    wandb.finish()
    return {"same_run": before == after, "errors": errors, "history": list(_wandb_history(save_dir).values())}


def test_wandb_logger_after_finalize_and_its_media_calls_equal_lightnings(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from lightning.fabric import Fabric as LightningFabric
    from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

    from fabricx import Fabric
    from fabricx.loggers import WandbLogger

    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(name, value)
    lightning = _wandb_script(LightningWandbLogger, LightningFabric, tmp_path / "lightning")
    ours = _wandb_script(WandbLogger, Fabric, tmp_path / "fabricx")
    assert lightning["same_run"] and ours["same_run"]
    assert lightning["errors"] == ours["errors"] == ["TypeError", "ValueError"]
    # One run in each (fabricx's log spans two files of the same run id: before and after finalize).
    (expected,) = lightning["history"]
    (got,) = ours["history"]
    assert got == expected
    assert [row.get("trainer/global_step") for row in got] == [0, 1, 1, 2, 3]
    assert got[1]["table"] == "table-file" and got[3]["image"] == "images/separated"


_DEVICE_NAMES = [
    "NVIDIA H200 SXM1", "NVIDIA H200 NVL1", "NVIDIA H200", "h100-nvl", "h100-hbm3", "NVIDIA H100 PCIe", "h100-hbm2e",
    "NVIDIA H100", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4080 SUPER", "Tesla L40",
    "NVIDIA L4", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080 Ti", "NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3060",
    "NVIDIA A6000", "NVIDIA A40", "NVIDIA A10G", "NVIDIA GeForce RTX 2080 SUPER", "NVIDIA GeForce RTX 2080 Ti",
    "NVIDIA GeForce RTX 2080", "NVIDIA GeForce RTX 2070 Super", "Quadro RTX 5000 with Max-Q Design", "Tesla T4",
    "TITAN RTX", "Tesla V100-SXm2-32GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "CocoNut",
]  # fmt: skip


@pytest.mark.parametrize("capability", [(7, 0), (9, 0)])
def test_get_available_flops_gives_lightnings_figures_and_warnings(capability):
    import warnings
    from unittest import mock

    from lightning.fabric.utilities.throughput import get_available_flops as lightning_flops

    from fabricx.utilities import get_available_flops

    def table(function) -> list:
        rows = []
        for name in _DEVICE_NAMES:
            for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int8, "int4", "bf16"):
                for matmul in ("highest", "high"):
                    with (
                        mock.patch("torch.cuda.get_device_name", return_value=name),
                        mock.patch("torch.cuda.get_device_capability", return_value=capability),
                        mock.patch("torch.get_float32_matmul_precision", return_value=matmul),
                        warnings.catch_warnings(record=True) as caught,
                    ):
                        warnings.simplefilter("always")
                        value = function(torch.device("cuda", 0), dtype)
                    rows.append((name, str(dtype), matmul, value, [str(w.message) for w in caught]))
        rows.append(("cpu", None, None, function(torch.device("cpu"), torch.float32), []))
        return rows

    expected, got = table(lightning_flops), table(get_available_flops)
    assert got == expected
    assert ("NVIDIA A100-SXM4-40GB", "torch.bfloat16", "high", 312_000_000_000_000, []) in got
