import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric, unwrap
from fabricx.loggers import CSVLogger
from fabricx.utilities.exceptions import FabricxError


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(8, 16)
        self.layer2 = nn.Linear(16, 1)
        self.calls = 0

    def forward(self, x):
        return self.layer2(torch.tanh(self.layer1(x)))

    def describe(self):
        return "net"


def _batches(steps=20, batch=8):
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(batch, 8, generator=generator), torch.randn(batch, 1, generator=generator))
        for _ in range(steps)
    ]


def _train_plain(clip):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in _batches():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


def _train_fabric(clip):
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    for x, y in _batches():
        loss = nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        if clip:
            fabric.clip_gradients(model, optimizer, max_norm=0.5)
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


@pytest.mark.parametrize("clip", [False, True])
def test_bit_identical_to_plain_pytorch(clip):
    plain, fabric = _train_plain(clip), _train_fabric(clip)
    assert plain.keys() == fabric.keys()
    for key in plain:
        assert torch.equal(plain[key], fabric[key]), key


def test_wrappers_look_like_the_users_objects():
    fabric = Fabric(accelerator="cpu")
    net = Net()
    optimizer = torch.optim.Adam(net.parameters())
    model, fabric_optimizer = fabric.setup(net, optimizer)
    assert model.describe() == "net"
    assert model.layer1 is net.layer1
    assert model.module is net and unwrap(model) is net
    assert list(model.state_dict()) == list(net.state_dict())
    assert isinstance(fabric_optimizer, torch.optim.Adam)
    assert unwrap(fabric_optimizer) is optimizer
    assert fabric_optimizer.param_groups is optimizer.param_groups
    model.calls = 5
    assert net.calls == 5


def test_setup_dataloaders_moves_nested_batches_and_is_stateful():
    fabric = Fabric(accelerator="cpu")
    dataset = TensorDataset(torch.arange(10.0), torch.arange(10))
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=4, collate_fn=lambda b: {"pair": b}))
    batch = next(iter(loader))
    assert isinstance(batch, dict) and len(batch["pair"]) == 4
    assert len(loader) == 3
    assert set(loader.state_dict()) >= {"epoch", "loader"}


def test_to_device_and_seed_everything():
    fabric = Fabric(accelerator="cpu")
    moved = fabric.to_device({"a": [torch.ones(1)], "b": 3})
    assert moved["b"] == 3 and moved["a"][0].device.type == "cpu"
    assert Fabric.seed_everything(7) == 7
    first = torch.rand(3)
    Fabric.seed_everything(7)
    assert torch.equal(first, torch.rand(3))


def test_init_module_empty_init_then_load_gives_saved_weights(tmp_path):
    fabric = Fabric(accelerator="cpu")
    reference = fabric.setup(Net())
    fabric.save(tmp_path / "ckpt", {"model": reference})
    with fabric.init_module(empty_init=True):
        model = Net()
    assert model.layer1.weight.is_meta
    model = fabric.setup(model)
    assert not model.layer1.weight.is_meta
    fabric.load(tmp_path / "ckpt", {"model": model})
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value)


def test_save_load_round_trip(tmp_path):
    Fabric.seed_everything(0)
    fabric = Fabric(accelerator="cpu", precision="16-mixed")
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler = fabric.setup(model, optimizer, scheduler=scheduler)
    for x, y in _batches(steps=3):
        fabric.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    fabric.precision.scaler.update(1234.0)
    state = {
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "step": 3,
        "name": "run",
        "nested": {"a": [1, 2.5]},
    }
    fabric.save(tmp_path / "ckpt", state)
    expected_model = {k: v.clone() for k, v in model.state_dict().items()}
    expected_optimizer = optimizer.state_dict()
    expected_rand = torch.rand(2)

    Fabric.seed_everything(1)
    fabric2 = Fabric(accelerator="cpu", precision="16-mixed")
    model2 = Net()
    optimizer2 = torch.optim.AdamW(model2.parameters(), lr=0.01)
    scheduler2 = torch.optim.lr_scheduler.StepLR(optimizer2, step_size=2, gamma=0.5)
    model2, optimizer2, scheduler2 = fabric2.setup(model2, optimizer2, scheduler=scheduler2)
    state2 = {
        "model": model2,
        "optimizer": optimizer2,
        "scheduler": scheduler2,
        "step": 0,
        "name": None,
        "nested": None,
    }
    remainder = fabric2.load(tmp_path / "ckpt", state2)
    assert remainder == {}
    for key, value in expected_model.items():
        assert torch.equal(model2.state_dict()[key], value)
    loaded_optimizer = optimizer2.state_dict()
    for index, entry in expected_optimizer["state"].items():
        assert torch.equal(loaded_optimizer["state"][index]["exp_avg"], entry["exp_avg"])
    assert scheduler2.last_epoch == 3 and scheduler2.get_last_lr() == scheduler.get_last_lr()
    assert fabric2.precision.scaler.get_scale() == 1234.0
    assert state2["step"] == 3 and state2["name"] == "run" and state2["nested"] == {"a": [1, 2.5]}
    assert torch.equal(torch.rand(2), expected_rand), "RNG states are restored"

    everything = fabric2.load(tmp_path / "ckpt")
    assert everything["step"] == 3 and set(everything["model"]) == set(expected_model)


def test_load_returns_unrestored_entries_and_honours_strict(tmp_path):
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup(Net())
    fabric.save(tmp_path / "ckpt", {"model": model, "epoch": 4, "extra": [1, 2]})
    remainder = fabric.load(tmp_path / "ckpt", {"model": model})
    assert remainder == {"epoch": 4, "extra": [1, 2]}
    with pytest.raises(KeyError, match="missing_key"):
        fabric.load(tmp_path / "ckpt", {"model": model, "missing_key": 0})
    assert fabric.load(tmp_path / "ckpt", {"model": model, "missing_key": 0}, strict=False) == {
        "epoch": 4,
        "extra": [1, 2],
    }


def test_save_filter(tmp_path):
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup(Net())
    fabric.save(tmp_path / "ckpt", {"model": model}, filter={"model": lambda name, value: "layer1" in name})
    assert set(fabric.load(tmp_path / "ckpt")["model"]) == {"layer1.weight", "layer1.bias"}


def test_load_raw_reads_a_plain_torch_save(tmp_path):
    fabric = Fabric(accelerator="cpu")
    source = Net()
    torch.save(source.state_dict(), tmp_path / "weights.pt")
    model = fabric.setup(Net())
    fabric.load_raw(tmp_path / "weights.pt", model)
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value)


def test_clip_gradients_arguments_and_nonfinite():
    fabric = Fabric(accelerator="cpu")
    net = Net()
    model, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="exactly one of clip_val or max_norm"):
        fabric.clip_gradients(model, optimizer)
    with pytest.raises(ValueError, match="exactly one of clip_val or max_norm"):
        fabric.clip_gradients(model, optimizer, clip_val=1.0, max_norm=1.0)
    fabric.backward(model(torch.randn(2, 8)).sum())
    norm = fabric.clip_gradients(model, optimizer, max_norm=1e-3)
    assert norm > 1e-3
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in net.parameters()]))
    assert total <= 1e-3 * 1.01
    net.layer1.weight.grad[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="non-finite"):
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
    fabric.clip_gradients(model, optimizer, max_norm=1.0, error_if_nonfinite=False)


def test_setup_misuse_is_refused():
    fabric = Fabric(accelerator="cpu")
    net = Net()
    model = fabric.setup(net)
    again = fabric.setup(net)  # as in Lightning: one device leaves the module as it was, so this is harmless
    assert again.module is net and again is not model
    with pytest.raises(ValueError, match="A model should be passed only once") as refused:
        fabric.setup(model)
    assert isinstance(refused.value, FabricxError)
    other = Net()
    with pytest.raises(FabricxError, match="not in the module"):
        fabric.setup(Net(), torch.optim.SGD(other.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="DataLoader"):
        fabric.setup_dataloaders([1, 2, 3])


def test_call_logs_and_launch_single_process(tmp_path):
    class Recorder:
        def __init__(self):
            self.seen = []

        def on_thing(self, value):
            self.seen.append(value)

    recorder = Recorder()
    logger = CSVLogger(tmp_path, name="run")
    fabric = Fabric(accelerator="cpu", callbacks=[recorder, object()], loggers=logger)
    fabric.call("on_thing", value=3)
    assert recorder.seen == [3]
    assert fabric.logger is logger and fabric.loggers == [logger]
    fabric.log("loss", torch.tensor(0.5), step=1)
    fabric.log_dict({"acc": 0.9}, step=2)
    logger.finalize("success")
    text = (tmp_path / "run" / "version_0" / "metrics.csv").read_text()
    assert "loss" in text and "0.5" in text and "acc" in text
    assert fabric.launch(lambda f, x: x * 2, 21) == 42


def test_no_backward_sync_needs_setup_module():
    fabric = Fabric(accelerator="cpu")
    with pytest.raises(TypeError, match="fabric.setup"), fabric.no_backward_sync(Net()):
        pass
    model = fabric.setup(Net())
    with fabric.no_backward_sync(model):
        fabric.backward(model(torch.randn(1, 8)).sum())
    assert model.layer1.weight.grad is not None


def test_collectives_are_identity_on_one_process():
    fabric = Fabric(accelerator="cpu")
    assert fabric.all_gather(torch.tensor([1, 2])).shape == (2,)  # no new dimension, as Lightning
    assert fabric.all_reduce(torch.tensor(3.0)) == 3.0
    assert fabric.broadcast({"a": 1}) == {"a": 1}
    fabric.barrier()
    with fabric.rank_zero_first():
        pass


def test_import_is_light():
    script = (
        "import sys, fabricx\n"
        "names = ('torch._dynamo', 'deepspeed', 'tensorboard', 'rich', 'torchmetrics')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "print(heavy)\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fabricx"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    for heavy in ("torch._dynamo", "deepspeed", "tensorboard", "rich", "torchmetrics"):
        assert f"| {heavy}\n" not in importtime and f" {heavy}." not in importtime.replace("torch.", "")


def test_setting_up_a_module_again_is_refused_where_the_strategy_changes_it():
    from fabricx.strategies import SingleDeviceStrategy

    class ShardsInPlace(SingleDeviceStrategy):
        allows_repeated_module_setup = False

    fabric = Fabric(strategy=ShardsInPlace())
    net = Net()
    fabric.setup(net)
    with pytest.raises(ValueError, match="Net was already set up by this Fabric.*cannot be set up twice"):
        fabric.setup(net)
    optimizer = torch.optim.SGD(Net().parameters(), lr=0.1)
    wrapped = fabric.setup_optimizers(optimizer)
    with pytest.raises(ValueError, match="An optimizer should be passed only once to the `setup_optimizers`"):
        fabric.setup_optimizers(wrapped)
