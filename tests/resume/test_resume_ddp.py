"""DDP (2 gloo ranks, spawn): bit-exact resumption with shuffling and with accumulation, a changed
number of processes, and accumulation semantics (no all-reduce off a boundary, large-batch equality).

Launch one runs every uninterrupted run, every interrupted first half and the accumulation check;
launch two (fresh processes) resumes all of them and also loads single-process checkpoints on two
ranks. Loading the two-rank checkpoints into one process happens in the test process. Two launches
in all, shared by the tests through a module fixture.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DataLoader, Dataset, TensorDataset

from fabricx import Fabric
from fabricx.strategies import DDPStrategy

SAMPLES, BATCH, EPOCHS, WORLD = 48, 4, 2, 2
PER_RANK_BATCHES = SAMPLES // (BATCH * WORLD)  # 6 per epoch: accumulation windows of 4 and 2
ACCUM = 4


class NoisyDataset(Dataset):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        base = torch.linspace(-1, 1, 4) * (index / SAMPLES)
        return index, base + 0.05 * torch.randn(4), base.sum(0, keepdim=True)


def _build(fabric: Fabric):
    torch.set_num_threads(1)
    fabric.seed_everything(1234)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(NoisyDataset(), batch_size=BATCH, shuffle=True))
    return {"model": model, "optimizer": optimizer, "loader": loader, "step": 0, "epoch": 0}


def train(fabric: Fabric, accumulate: bool, checkpoint: str | None = None, stop=None, resume: bool = False) -> dict:
    state = _build(fabric)
    if resume:
        torch.manual_seed(999 + fabric.global_rank)
        fabric.load(checkpoint, state)
    model, optimizer, loader = state["model"], state["optimizer"], state["loader"]
    seen: list[int] = []
    for epoch in range(state["epoch"], EPOCHS):
        for ids, x, y in loader:
            context = fabric.accumulate(model) if accumulate else _nothing()
            with context:
                fabric.backward(nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
            seen.extend(ids.tolist())
            state["step"] += 1
            if state["step"] == stop:
                fabric.save(checkpoint, state)
                return {"seen": seen}
        state["epoch"] = epoch + 1
    return {"seen": seen, "weights": [p.detach().clone() for p in model.parameters()], "step": state["step"]}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *args):
        return False


def accumulation_check(fabric: Fabric) -> dict:
    """N=4 over 10 batches per rank: count all-reduces per micro-batch with a DDP comm hook, and
    compare each boundary's gradients with ONE step on the window's samples of both ranks."""
    generator = torch.Generator().manual_seed(5)
    x_all, y_all = torch.randn(40, 3, generator=generator), torch.randn(40, 1, generator=generator)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    calls: list[int] = []

    def counting_hook(state, bucket):
        calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)

    model._forward_module.register_comm_hook(None, counting_hook)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.arange(40), x_all, y_all), batch_size=2))
    per_batch_calls: list[int] = []
    max_grad_error = 0.0
    window: list[torch.Tensor] = []
    for batch_ids, x, y in loader:  # 20 samples per rank: 10 batches
        before = len(calls)
        with fabric.accumulate(model):
            fabric.backward(nn.functional.mse_loss(model(x), y))
            window.append(batch_ids)
            if fabric.sync_gradients:
                union = fabric.all_gather(torch.cat(window)).flatten()
                reference = copy.deepcopy(model.module)
                nn.functional.mse_loss(reference(x_all[union]), y_all[union]).backward()
                for p, want in zip(model.parameters(), reference.parameters(), strict=True):
                    max_grad_error = max(max_grad_error, (p.grad - want.grad).abs().max().item())
                window = []
            optimizer.step()
            optimizer.zero_grad()
        per_batch_calls.append(len(calls) - before)
    before = len(calls)  # control: a backward outside accumulate() synchronises
    fabric.backward(nn.functional.mse_loss(model(x_all[:2]), y_all[:2]))
    control_calls = len(calls) - before
    gathered = fabric.all_gather(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return {
        "per_batch_calls": per_batch_calls,
        "control_calls": control_calls,
        "max_grad_error": max_grad_error,
        "ranks_agree": bool(torch.equal(gathered[0], gathered[1])),
    }


def phase_one(fabric: Fabric, plan: list[dict], out: str) -> None:
    results = {"full": {}, "first": {}}
    for accumulate in (False, True):
        results["full"][accumulate] = train(fabric, accumulate)
    for scenario in plan:
        name, accumulate = scenario["name"], scenario["accumulate"]
        results["first"][name] = train(fabric, accumulate, scenario["checkpoint"], scenario["stop"])
    results["accumulation"] = accumulation_check(fabric)
    torch.save(results, Path(out) / f"one_rank{fabric.global_rank}.pt")


def phase_two(fabric: Fabric, plan: list[dict], out: str, single_end: str, single_mid: str) -> None:
    results = {"resumed": {}}
    for scenario in plan:
        name, accumulate = scenario["name"], scenario["accumulate"]
        results["resumed"][name] = train(fabric, accumulate, scenario["checkpoint"], resume=True)
    # A checkpoint written by ONE process at an epoch's last batch, inside its loop: on both ranks the loop's
    # continuation reads nothing (an uninterrupted run's loop ends its epoch there), then the next epoch follows.
    state = _build(fabric)
    fabric.load(single_end, state)
    continuation = len(list(iter(state["loader"])))
    batch_ids = next(iter(state["loader"]))[0].tolist()
    results["from_single_end"] = {"continuation": continuation, "epoch": state["loader"].epoch, "first_ids": batch_ids}
    # ... and in the middle of an epoch: the ranks share the rest of that epoch's order.
    state = _build(fabric)
    fabric.load(single_mid, state)
    loader = state["loader"]
    rest = [i for ids, *_ in loader for i in ids.tolist()]
    results["from_single_mid"] = {"epoch": loader.epoch, "rest": rest, "single_order": _single_order(single_mid)}
    torch.save(results, Path(out) / f"two_rank{fabric.global_rank}.pt")


def _single_order(path: str) -> list[int]:
    """The order of the epoch the one-process run was in when it saved ``path`` (rebuilt from its seed)."""
    from fabricx.data.elastic import saved_epoch_order

    single = Fabric(accelerator="cpu", devices=1)
    state = single.load(path)
    return saved_epoch_order(state["loader"]["position"]["order"])


def _ddp_fabric() -> Fabric:
    strategy = DDPStrategy(start_method="spawn", timeout=60)
    return Fabric(accelerator="cpu", devices=WORLD, strategy=strategy, grad_accum_steps=ACCUM)


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """Both launches, shared by the tests below: (launch-one results, launch-two results, plan, folder)."""
    tmp_path = tmp_path_factory.mktemp("ddp_resume")
    rng = random.Random()
    mid = rng.randrange(1, 2 * PER_RANK_BATCHES)
    mid = mid if mid != PER_RANK_BATCHES else mid + 1
    plan = [
        {"name": "shuffle-mid", "accumulate": False, "stop": mid},
        {"name": "shuffle-epoch-end", "accumulate": False, "stop": PER_RANK_BATCHES},
        {"name": "accum-mid", "accumulate": True, "stop": rng.choice([4, PER_RANK_BATCHES + 4])},
        {"name": "accum-epoch-end", "accumulate": True, "stop": PER_RANK_BATCHES},
    ]
    for scenario in plan:
        scenario["checkpoint"] = str(tmp_path / scenario["name"])
    # Single-process checkpoints for the world-size change (written here, loaded on two ranks).
    single = Fabric(accelerator="cpu", devices=1, grad_accum_steps=ACCUM)
    train(single, False, str(tmp_path / "single-end"), stop=SAMPLES // BATCH)  # one full epoch
    train(single, False, str(tmp_path / "single-mid"), stop=3)

    _ddp_fabric().launch(phase_one, plan, str(tmp_path))
    _ddp_fabric().launch(phase_two, plan, str(tmp_path), str(tmp_path / "single-end"), str(tmp_path / "single-mid"))
    one = [torch.load(tmp_path / f"one_rank{r}.pt") for r in range(WORLD)]
    two = [torch.load(tmp_path / f"two_rank{r}.pt") for r in range(WORLD)]
    return one, two, plan, tmp_path


def test_ddp_resume_in_new_processes_is_bit_exact(ddp_runs):
    one, two, plan, _ = ddp_runs
    for accumulate in (False, True):
        # the ranks split each epoch: together they see every sample once per epoch
        per_epoch = PER_RANK_BATCHES * BATCH
        for epoch in range(EPOCHS):
            chunks = [one[r]["full"][accumulate]["seen"][epoch * per_epoch :][:per_epoch] for r in range(WORLD)]
            union = sorted(i for chunk in chunks for i in chunk)
            assert union == list(range(SAMPLES))
        orders = [one[r]["full"][accumulate]["seen"] for r in range(WORLD)]
        assert orders[0][:per_epoch] != orders[0][per_epoch:], "epoch 1 must reshuffle"
    for scenario in plan:
        name, stop = scenario["name"], scenario["stop"]
        for rank in range(WORLD):
            label = f"{name} stopped after step {stop}, rank {rank}"
            reference = one[rank]["full"][scenario["accumulate"]]
            first = one[rank]["first"][name]["seen"]
            resumed = two[rank]["resumed"][name]
            assert first == reference["seen"][: stop * BATCH], label
            assert resumed["seen"] == reference["seen"][stop * BATCH :], label
            assert resumed["step"] == reference["step"], label
            for expected, got in zip(reference["weights"], resumed["weights"], strict=True):
                assert torch.equal(expected, got), label
        # across ranks: no sample of the remaining run seen twice within an epoch, none missing
        seen_after = [two[r]["resumed"][name]["seen"] for r in range(WORLD)]
        expected_after = [one[r]["full"][scenario["accumulate"]]["seen"][stop * BATCH :] for r in range(WORLD)]
        assert sorted(i for part in seen_after for i in part) == sorted(i for part in expected_after for i in part)


def test_ddp_resume_on_a_different_number_of_processes(ddp_runs):
    one, two, plan, tmp_path = ddp_runs
    # One-process checkpoint at an epoch end, resumed on two ranks: epoch 1's distributed order.
    for rank in range(WORLD):
        reference_epoch1 = one[rank]["full"][False]["seen"][PER_RANK_BATCHES * BATCH :][:BATCH]
        assert two[rank]["from_single_end"] == {"continuation": 0, "epoch": 1, "first_ids": reference_epoch1}
    # One-process checkpoint after 3 batches: the two ranks deal the rest of that epoch's order in turn.
    mids = [two[rank]["from_single_mid"] for rank in range(WORLD)]
    order = mids[0]["single_order"]
    assert all(mid["epoch"] == 0 for mid in mids)
    assert sorted(mids[0]["rest"] + mids[1]["rest"]) == sorted(order[3 * BATCH :])  # each remaining sample once
    assert mids[0]["rest"] == order[3 * BATCH :: 2] and mids[1]["rest"] == order[3 * BATCH + 1 :: 2]

    # Two-rank checkpoints loaded into ONE process: an epoch end continues with the 2-rank run's next
    # epoch order; mid-epoch, the one process reads every sample the two ranks had not consumed.
    single = Fabric(accelerator="cpu", devices=1, grad_accum_steps=ACCUM)
    state = _build(single)
    single.load(tmp_path / "shuffle-epoch-end", state)
    assert state["step"] == PER_RANK_BATCHES
    # Saved at the epoch's last batch inside the loop: the loop's continuation reads nothing, as uninterrupted.
    assert list(iter(state["loader"])) == []
    ids = next(iter(state["loader"]))[0].tolist()
    assert state["loader"].epoch == 1
    epoch1 = [one[r]["full"][False]["seen"][PER_RANK_BATCHES * BATCH :] for r in range(WORLD)]
    assert ids == [epoch1[0][0], epoch1[1][0], epoch1[0][1], epoch1[1][1]]  # the 2-rank order, read in turn
    state = _build(single)
    single.load(tmp_path / "shuffle-mid", state)
    rest = [i for ids, *_ in state["loader"] for i in ids.tolist()]
    [stop] = [scenario["stop"] for scenario in plan if scenario["name"] == "shuffle-mid"]
    # The stop may fall in the second epoch: only the samples of the stopped epoch count as consumed.
    epoch_start = (stop // PER_RANK_BATCHES) * PER_RANK_BATCHES
    consumed = {i for r in range(WORLD) for i in one[r]["full"][False]["seen"][epoch_start * BATCH : stop * BATCH]}
    assert sorted(rest) == sorted(set(range(SAMPLES)) - consumed)  # none twice, none missing


def test_ddp_accumulation_has_no_allreduce_off_boundary_and_equals_large_batch(ddp_runs):
    one = ddp_runs[0]
    for rank in range(WORLD):
        result = one[rank]["accumulation"]
        # one bucket: one all-reduce at each boundary (batches 4, 8 and the short window's 10), none between
        assert result["per_batch_calls"] == [0, 0, 0, 1, 0, 0, 0, 1, 0, 1], rank
        assert result["control_calls"] == 1
        assert result["max_grad_error"] < 1e-6
        assert result["ranks_agree"]
