import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.hidden = nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight


def test_project_checkpoints_continue_numbering_and_keep_last_k(tmp_path):
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup(nn.Linear(2, 2))
    manager = CheckpointManager(tmp_path, total_limit=2)
    for step in range(3):
        state = {"model": model, "step": step}
        assert fabric.save_checkpoint(manager, state).name == f"checkpoint_{step}"
    assert [p.name for p in manager.list_complete()] == ["checkpoint_1", "checkpoint_2"]

    restarted = Fabric(accelerator="cpu")
    model2 = restarted.setup(nn.Linear(2, 2))
    state = {"model": model2, "step": -1}
    assert restarted.load_latest(tmp_path, state).name == "checkpoint_2"
    assert state["step"] == 2
    assert torch.equal(model2.weight, model.weight)
    assert restarted.save_checkpoint(CheckpointManager(tmp_path, total_limit=2), state).name == "checkpoint_3"
    assert Fabric(accelerator="cpu").load_latest(tmp_path / "empty", {"step": 0}) is None


def test_weight_export_keeps_ties_and_shards(tmp_path):
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup(Tied())
    fabric.save_weights(model, tmp_path / "export", max_shard_size=4000)
    assert (tmp_path / "export" / "model.safetensors.index.json").exists()
    fresh = Tied()
    fabric.load_weights(fresh, tmp_path / "export")
    assert fresh.head.weight is fresh.embed.weight
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value)


def test_validation_loader_between_batches_does_not_change_accumulation_windows():
    fabric = Fabric(accelerator="cpu", grad_accum_steps=4)
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    train = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.ones(10, 1)), batch_size=1))
    val = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.ones(3, 1)), batch_size=1))
    steps = []
    weight_before = model.weight.detach().clone()
    for index, (x,) in enumerate(train):
        with fabric.accumulate(model):
            fabric.backward(model(x).sum())
            if fabric.sync_gradients:
                steps.append((index, model.weight.grad.item()))
            optimizer.step()
            optimizer.zero_grad()
        for _ in val:  # a validation pass between training batches
            pass
    # windows of 4, 4 and a last one of 2; each window's gradient is the mean over its batches
    assert [index for index, _ in steps] == [3, 7, 9]
    assert all(abs(grad - 1.0) < 1e-6 for _, grad in steps)
    assert not torch.equal(model.weight, weight_before)
