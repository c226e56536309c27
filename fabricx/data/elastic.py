"""Data positions that do not depend on the number of processes.

A loader's position in an epoch is recorded as *how many samples of the epoch's global order were
consumed*, together with how that order is made (the distributed sampler's seed and shuffle flag, or
the seed a single-process shuffle drew). A run with another number of processes rebuilds the same
order, leaves out what was consumed and deals the rest across its own ranks
(`fabricx.data.sampler.ElasticDistributedSampler`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import SequentialSampler

from fabricx.data.sampler import ElasticDistributedSampler, ResumableRandomSampler, is_plain_shuffle
from fabricx.utilities.exceptions import FabricxError


def describe_order(loader: Any) -> dict[str, Any] | None:
    """How ``loader`` (a ``StatefulDataLoader``) orders an epoch, in terms any number of ranks can
    rebuild; ``None`` when it cannot be continued elsewhere (custom samplers or batch samplers,
    iterable datasets)."""
    batch_size = getattr(loader, "batch_size", None)
    sampler = getattr(loader, "sampler", None)
    if batch_size is None or getattr(getattr(loader, "batch_sampler", None), "sampler", None) is not sampler:
        return None
    try:
        length = len(loader.dataset)
    except TypeError:
        return None
    if isinstance(sampler, ElasticDistributedSampler):
        shuffle = bool(sampler.shuffle)
        return {
            "kind": "distributed",
            "shuffle": shuffle,
            "seed": sampler.seed if shuffle else None,
            "drop_last": bool(sampler.drop_last),
            "length": length,
        }
    if type(sampler) is SequentialSampler:
        return {"kind": "distributed", "shuffle": False, "seed": None, "drop_last": False, "length": length}
    if isinstance(sampler, ResumableRandomSampler) and is_plain_shuffle(sampler):
        return {"kind": "random", "length": length, "start": sampler.last_start}
    return None


def consumed_samples(loader: Any, order: dict[str, Any], batches: int) -> int:
    """Samples of the current epoch's global order consumed when this rank has handed out ``batches``
    batches of its current share (all ranks take the same number of batches in lockstep)."""
    sampler = loader.sampler
    taken = batches * int(loader.batch_size)
    if isinstance(sampler, ElasticDistributedSampler):
        consumed = sampler.start + min(taken, sampler.num_samples) * sampler.num_replicas
    else:
        consumed = taken
    return min(consumed, int(order["length"]))


def full_epoch_batches(loader: Any) -> int:
    """Batches one rank reads in a whole epoch at this number of ranks (not a resumed remainder)."""
    sampler = loader.sampler
    samples = sampler._full_shares[0] if isinstance(sampler, ElasticDistributedSampler) else len(sampler)
    size = int(loader.batch_size)
    return samples // size if loader.drop_last else math.ceil(samples / size)


def single_process_replacement(saved: dict[str, Any], dataset: Any) -> ElasticDistributedSampler:
    """The sampler a one-process run uses to continue a multi-process run's order."""
    return ElasticDistributedSampler(
        dataset, 1, 0, shuffle=saved["shuffle"], seed=int(saved["seed"] or 0), drop_last=saved["drop_last"]
    )


def check_same_order(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse to continue an order this loader would not produce (other data, seed or shuffling)."""
    if saved["length"] != current["length"]:
        raise FabricxError(
            f"The loader state was saved for a dataset of {saved['length']} samples; this loader has "
            f"{current['length']}. Resume with the same dataset."
        )
    if saved["kind"] == "random":
        return  # the saved epoch's own seed rebuilds its order; later epochs follow this run's sampler
    if saved["shuffle"] != current.get("shuffle"):
        raise FabricxError(
            f"The loader state was saved with shuffle={saved['shuffle']}; this loader has "
            f"shuffle={current.get('shuffle')}. Build it with the same shuffle setting."
        )
    if saved["shuffle"] and saved["seed"] != current["seed"]:
        raise FabricxError(
            f"The loader state was saved by a run whose distributed sampler was seeded with {saved['seed']}; "
            f"this one uses {current['seed']}. Call fabric.seed_everything({saved['seed']}) before "
            "setup_dataloaders so the shuffle order is the same."
        )


def saved_epoch_order(saved: dict[str, Any]) -> list[int] | None:
    """The order of the saved epoch when it came from a single-process shuffle (else ``None``:
    the distributed sampler rebuilds it from its seed and the epoch)."""
    if saved["kind"] != "random":
        return None
    start = saved.get("start")
    if start is None:
        raise FabricxError("The loader state has a started shuffled epoch but no record of its order.")
    generator = torch.Generator() if "generator" in start else None
    return ResumableRandomSampler(range(int(saved["length"])), generator=generator).order_from(start)
