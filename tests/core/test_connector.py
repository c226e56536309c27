import pytest
import torch

from fabricx import Fabric
from fabricx.accelerators import CPUAccelerator, CUDAAccelerator
from fabricx.connector import Connector
from fabricx.environments import LocalEnvironment
from fabricx.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from fabricx.strategies import SingleDeviceStrategy
from fabricx.utilities.exceptions import MisconfigurationError


def test_auto_picks_cpu_single_device_here():
    connector = Connector()
    assert isinstance(connector.accelerator, CPUAccelerator)
    assert isinstance(connector.strategy, SingleDeviceStrategy)
    assert type(connector.precision) is Precision


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        (None, Precision),
        ("32", Precision),
        (32, Precision),
        ("64", DoublePrecision),
        ("64-true", DoublePrecision),
        ("16", MixedPrecision),
        ("bf16", MixedPrecision),
        ("16-mixed", MixedPrecision),
        ("bf16-mixed", MixedPrecision),
        ("16-true", HalfPrecision),
        ("bf16-true", HalfPrecision),
    ],
)
def test_every_precision_flag(flag, expected):
    assert type(Connector(accelerator="cpu", precision=flag).precision) is expected


def test_devices_on_cpu_means_processes():
    connector = Connector(accelerator="cpu", devices=2)
    assert connector.devices == 2
    assert type(connector.strategy).__name__ == "DDPStrategy"
    assert connector.strategy.world_size == 2


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"accelerator": "cuda"}, ["'cuda'", "cpu"]),
        ({"accelerator": "fpga"}, ["'fpga'", "cpu", "cuda"]),
        ({"devices": 0}, ["devices=0", ">= 1"]),
        ({"devices": "zero"}, ["'zero'"]),
        ({"precision": "17"}, ["'17'", "bf16-mixed", "32-true"]),
        ({"strategy": "ddp_turbo"}, ["'ddp_turbo'", "fsdp", "deepspeed_stage_3"]),
        ({"plugins": [Precision(), DoublePrecision()]}, ["Two precision plugins"]),
        (
            {"precision": "bf16-mixed", "plugins": DoublePrecision()},
            ["precision='bf16-mixed'", "DoublePrecision"],
        ),
        ({"plugins": object()}, ["plugins got", "Precision", "ClusterEnvironment"]),
        ({"num_nodes": 0}, ["num_nodes=0"]),
        ({"strategy": "single_device", "devices": 2}, ["single_device", "ddp"]),
    ],
)
def test_invalid_flags_name_what_was_given_and_allowed(kwargs, named):
    kwargs.setdefault("accelerator", "cpu")
    with pytest.raises(MisconfigurationError) as error:
        Connector(**kwargs)
    for text in named:
        assert text in str(error.value)


def test_instances_are_accepted():
    strategy = SingleDeviceStrategy(device="cpu")
    plugin = DoublePrecision()
    connector = Connector(accelerator=CPUAccelerator(), strategy=strategy, plugins=[plugin])
    assert connector.strategy is strategy
    assert connector.precision is plugin
    assert strategy.precision is plugin


def test_cluster_environment_plugin_reaches_parallel_strategy():
    environment = LocalEnvironment()
    connector = Connector(accelerator="cpu", devices=2, plugins=environment)
    assert connector.strategy.cluster_environment is environment


def test_cli_flags_fill_defaults_and_conflicts_are_refused(monkeypatch):
    monkeypatch.setenv("FABRICX_PRECISION", "bf16-mixed")
    assert type(Connector(accelerator="cpu").precision) is MixedPrecision
    assert Connector(accelerator="cpu", precision="bf16").precision.precision == "bf16-mixed"
    with pytest.raises(MisconfigurationError, match="conflicts with `fabricx run --precision bf16-mixed`"):
        Connector(accelerator="cpu", precision="64-true")


def test_cuda_device_parsing_with_mocked_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert CUDAAccelerator.parse_devices("0,2") == [0, 2]
    assert CUDAAccelerator.parse_devices(-1) == [0, 1, 2, 3]
    assert CUDAAccelerator.parse_devices("auto") == [0, 1, 2, 3]
    assert CUDAAccelerator.parse_devices(2) == [0, 1]
    assert CUDAAccelerator.parse_devices([3]) == [3]
    with pytest.raises(MisconfigurationError, match="valid indices are 0..3"):
        CUDAAccelerator.parse_devices([5])
    with pytest.raises(MisconfigurationError, match="more than once"):
        CUDAAccelerator.parse_devices([1, 1])
    assert CUDAAccelerator.get_parallel_devices([0, 2]) == [torch.device("cuda", 0), torch.device("cuda", 2)]


def test_fabric_exposes_resolved_objects():
    fabric = Fabric(accelerator="cpu", precision="bf16-true")
    assert fabric.device == torch.device("cpu")
    assert fabric.world_size == 1 and fabric.global_rank == 0 and fabric.is_global_zero
    assert fabric.local_rank == 0 and fabric.node_rank == 0
    assert isinstance(fabric.precision, HalfPrecision)
    assert isinstance(fabric.strategy, SingleDeviceStrategy)
    assert isinstance(fabric.accelerator, CPUAccelerator)


def test_srun_layout_is_used_when_devices_is_auto(monkeypatch):
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_NODELIST", "node[1-2]")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    strategy = Connector(accelerator="cpu").strategy
    assert type(strategy).__name__ == "DDPStrategy"
    assert (strategy.world_size, strategy.global_rank, strategy.local_rank, strategy.node_rank) == (4, 3, 1, 1)
    assert strategy.launcher is None  # srun started every process
