"""Prepared loaders give what the installed Accelerate gives: the same batches, the same random draws,
and exact resumption; one process in this file's process, two in one ``fabricx run`` launch."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        yield from range(self.n)

    def __len__(self) -> int:
        return self.n


class _EveryOtherFirst:
    """A custom batch sampler (not a BatchSampler): even indices first, then odd ones, 3 at a time."""

    def __init__(self, n: int) -> None:
        self.order = list(range(0, n, 2)) + list(range(1, n, 2))

    def __iter__(self):
        for start in range(0, len(self.order), 3):
            yield self.order[start : start + 3]

    def __len__(self) -> int:
        return -(-len(self.order) // 3)


def _passes(loader, passes: int = 2) -> list[list[list[int]]]:
    return [[torch.as_tensor(b).tolist() for b in loader] for _ in range(passes)]


def _hf_prepare(loader: DataLoader, **config) -> object:
    from accelerate import Accelerator as HFAccelerator
    from accelerate import DataLoaderConfiguration as HFConfig
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    return HFAccelerator(cpu=True, dataloader_config=HFConfig(**config)).prepare(loader)


def _fx_prepare(loader: DataLoader, **config) -> object:
    return Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(**config)).prepare(loader)


def test_one_process_generator_order_is_accelerates():
    def make():
        return DataLoader(range(8), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(42))

    expected = _passes(_hf_prepare(make()))
    assert expected[0] == [[4, 6, 2, 3], [0, 7, 1, 5]]  # what the installed Accelerate gives
    assert _passes(_fx_prepare(make())) == expected


@pytest.mark.parametrize("config", [{}, {"use_seedable_sampler": True}, {"use_seedable_sampler": True, "data_seed": 7}])
def test_one_process_global_seed_order_and_random_draws_are_accelerates(config):
    def run(prepare):
        torch.manual_seed(0)
        random.seed(0)
        loader = prepare(DataLoader(range(12), batch_size=4, shuffle=True), **config)
        batches = _passes(loader, 3)
        return batches, torch.get_rng_state(), random.random()

    hf_batches, hf_rng, hf_py = run(_hf_prepare)
    fx_batches, fx_rng, fx_py = run(_fx_prepare)
    assert fx_batches == hf_batches
    assert torch.equal(fx_rng, hf_rng) and fx_py == hf_py
    if not config:  # plain PyTorch's own order, too
        torch.manual_seed(0)
        assert _passes(DataLoader(range(12), batch_size=4, shuffle=True), 3) == hf_batches
    if config.get("data_seed") is not None:  # the data seed, not the global one, decides
        torch.manual_seed(1)
        assert _passes(_fx_prepare(DataLoader(range(12), batch_size=4, shuffle=True), **config), 3) == fx_batches


@pytest.mark.parametrize("generator", [True, False])
def test_one_process_resume_mid_pass_is_exact_and_leaves_the_same_random_state(generator):
    def make():
        g = torch.Generator().manual_seed(3) if generator else None
        return _fx_prepare(DataLoader(range(10), batch_size=2, shuffle=True, generator=g))

    torch.manual_seed(5)
    loader = make()
    first = [b.tolist() for b in loader]
    iterator = iter(loader)
    seen = [next(iterator).tolist() for _ in range(2)]
    state, rng = loader.state_dict(), torch.get_rng_state()
    rest = [b.tolist() for b in iterator] + _passes(loader, 1)[0]
    after = torch.get_rng_state()

    torch.manual_seed(99)  # a fresh process draws differently until the checkpoint's state is back
    resumed = make()
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    again = [b.tolist() for b in resumed] + _passes(resumed, 1)[0]
    assert len(seen) == 2 and again == rest
    assert torch.equal(torch.get_rng_state(), after)
    assert first != seen + rest[:3]  # the second pass is a new order


def _two_process_checks() -> dict:
    import accelerate.data_loader as hf

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    from accelerate.state import PartialState as HFState

    HFState(cpu=True)  # Accelerate's own view of the two processes (the process group already exists)
    report: dict = {}

    def both(make, **options):
        torch.manual_seed(123)
        fx = accelerator.prepare(make()) if not options else _fx_prepare(make(), **options)
        torch.manual_seed(123)
        theirs = hf.prepare_data_loader(make(), num_processes=2, process_index=rank, **_hf_options(options))
        return _passes(fx), _passes(theirs)

    cases = {
        "generator": lambda: DataLoader(
            range(18), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(42)
        ),
        "sequential": lambda: DataLoader(range(18), batch_size=4),
        "custom_batch_sampler": lambda: DataLoader(range(13), batch_sampler=_EveryOtherFirst(13)),
        "sampler_is_batch_sampler": lambda: DataLoader(
            torch.arange(10), sampler=BatchSampler(SequentialSampler(range(10)), 3, False), batch_size=None
        ),
    }
    for name, make in cases.items():
        report[name] = both(make)
    for name, options in {
        "split_batches": {"split_batches": True},
        "uneven": {"even_batches": False},
        "seedable": {"use_seedable_sampler": True, "data_seed": 11},
    }.items():
        report[name] = both(lambda: DataLoader(range(18), batch_size=4, shuffle=True), **options)
    for name, options in {"iterable_shard": {"dispatch_batches": False}, "iterable_dispatch": {}}.items():
        fx = _fx_prepare(DataLoader(_Stream(11), batch_size=2), **options)
        theirs = hf.prepare_data_loader(
            DataLoader(_Stream(11), batch_size=2),
            num_processes=2,
            process_index=rank,
            put_on_device=True,
            dispatch_batches=options.get("dispatch_batches", True),
        )
        report[name] = (_passes(fx), _passes(theirs))

    # No generator: one is seeded from the global generator at prepare (the same draw as Accelerate's).
    torch.manual_seed(0)
    fx = accelerator.prepare(DataLoader(range(16), batch_size=4, shuffle=True))
    fx_batches, fx_rng = _passes(fx), torch.get_rng_state()
    torch.manual_seed(0)
    plain = DataLoader(range(16), batch_size=4, shuffle=True)
    theirs = hf.prepare_data_loader(plain, num_processes=2, process_index=rank)
    report["global_seed"] = (fx_batches, _passes(theirs))
    report["global_rng_equal"] = bool(torch.equal(fx_rng, torch.get_rng_state()))

    gathered = [accelerator.gather(b).tolist() for b in accelerator.prepare(DataLoader(range(16), batch_size=4))]
    report["gathered_sequential"] = [x for step in gathered for x in step]
    report["gather_for_metrics"] = [
        x
        for b in accelerator.prepare(DataLoader(range(13), batch_size=4))
        for x in accelerator.gather_for_metrics(b).tolist()
    ]
    report["rank"] = rank
    report["sync_each_batch"] = {str(flag): _first_micro_batch_grads_agree(flag) for flag in (True, False)}
    return report


def _first_micro_batch_grads_agree(sync_each_batch: bool) -> bool:
    """After one micro-batch of a window of 2, are the gradients already averaged over the processes?"""
    from fabricx.compat.accelerate import GradientAccumulationPlugin

    plugin = GradientAccumulationPlugin(num_steps=2, sync_each_batch=sync_each_batch)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    inputs = torch.full((1, 2), float(accelerator.process_index + 1))
    with accelerator.accumulate(model):
        accelerator.backward(model(inputs).sum())
    grads = accelerator.gather(model.weight.grad.detach().reshape(1, -1))
    return bool(torch.equal(grads[0], grads[1]))


def _hf_options(options: dict) -> dict:
    names = ("split_batches", "even_batches", "use_seedable_sampler", "data_seed")
    return {k: v for k, v in options.items() if k in names}


def _two_process_resume(out_dir: str) -> dict:
    """save_state mid-pass, finish, load_state into fresh objects: the rest of the pass again, exactly."""
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    result = {}
    for name, make in {
        "map": lambda: DataLoader(range(20), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1)),
        "iterable": lambda: DataLoader(_Stream(19), batch_size=2),
    }.items():
        first = Accelerator(cpu=True, dataloader_config=config)
        loader = first.prepare(make())
        rest = []
        for step, batch in enumerate(loader):
            if step == 1:
                first.save_state(os.path.join(out_dir, f"state_{name}"))
            elif step > 1:
                rest.append(batch.tolist())
        following = _passes(loader, 1)[0]
        second = Accelerator(cpu=True, dataloader_config=config)
        resumed = second.prepare(make())
        second.load_state(os.path.join(out_dir, f"state_{name}"))
        result[name] = ([b.tolist() for b in resumed] == rest, _passes(resumed, 1)[0] == following, len(rest))
    return result


def test_two_processes_match_accelerate_and_resume_exactly(tmp_path):
    command = [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", "2"]
    command += [__file__, str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": REPO}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-5000:])
    reports = [json.loads((tmp_path / f"data_{r}.json").read_text()) for r in (0, 1)]
    for report in reports:
        for name in (
            "generator",
            "sequential",
            "custom_batch_sampler",
            "sampler_is_batch_sampler",
            "split_batches",
            "uneven",
            "seedable",
            "iterable_shard",
            "iterable_dispatch",
            "global_seed",
        ):
            ours, theirs = report[name]
            assert ours == theirs, (name, report["rank"], ours, theirs)
        assert report["global_rng_equal"]
        assert report["sync_each_batch"] == {"True": True, "False": False}
        assert report["gathered_sequential"] == list(range(16))  # whole batches in turn, not strided
        assert sorted(report["gather_for_metrics"]) == list(range(13))
        for name, (same_rest, same_next_pass, rest_length) in report["resume"].items():
            assert same_rest and same_next_pass and rest_length > 0, name
    # one order from the generator: the two ranks' batches interleave into one permutation
    r0, r1 = (r["generator"][0][0] for r in reports)
    assert sorted({x for b in r0 + r1 for x in b}) == list(range(18)) and r0 != r1
    # even_batches=False: the last process gets one batch fewer, as in Accelerate
    assert len(reports[0]["uneven"][0][0]) == len(reports[1]["uneven"][0][0]) + 1


if __name__ == "__main__":
    out = sys.argv[1]
    data = _two_process_checks()
    data["resume"] = _two_process_resume(out)
    with open(os.path.join(out, f"data_{os.environ['RANK']}.json"), "w") as handle:
        json.dump(data, handle)


@pytest.mark.parametrize("adjust", [True, False])
def test_adjust_scheduler_counts_the_skipped_micro_batches(adjust):
    from fabricx.compat.accelerate import GradientAccumulationPlugin

    plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=adjust)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    counts = []
    for _ in range(4):
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(1, 2)).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        counts.append(scheduler._step_count)
    # two real steps either way (the rate halves twice); the skipped calls are not counted either way, as in
    # Accelerate 1.15, which loses adjust_scheduler=True (its default) when it reads the plugin
    # (tests/compat/test_accelerate_surface.py compares the counts with Accelerate's)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    assert counts == [1, 2, 2, 3]

