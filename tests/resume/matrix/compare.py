"""Compare a cell's uninterrupted run with its stopped-and-resumed run; return what differs."""

from __future__ import annotations

from typing import Any

import torch
from cells import KILLS, Cell, peer_semantics, refusal, skips_interrupted_batch


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "shape") and hasattr(b, "shape"):  # numpy arrays
        return bool((a == b).all())
    return a == b


def merged(first_trace: list, resume: dict) -> list:
    """The batches of the stopped run up to its checkpoint, then those of the resumed run."""
    return [entry for entry in first_trace if entry[0] < resume["start_step"]] + resume["trace"]


def differences(
    cell: Cell, straight: list[dict], first: list[list], resume: list[dict], first_val: list[list] | None = None
) -> list[str]:
    """``straight``/``first``/``resume`` per rank: records of the runs (``first`` as its trace, ``first_val``
    as its validation results where the run has them)."""
    done_val = first_val or [[] for _ in first]
    refused = [then["refused"] for then in resume if "refused" in then]
    if refused:
        allowed = refusal(cell)
        if not allowed or not all(any(reason in message for reason in allowed) for message in refused):
            return [f"the resume was refused: {refused[0][:300]}"]
        return []  # a documented refusal, with its documented message
    if peer_semantics(cell) is not None:
        if cell.elastic:
            after = _by_epoch([r["trace"] for r in resume])
            wanted = _by_epoch([s["trace"] for s in straight])
            first_epoch = min(after, default=max(wanted) + 1)
            return [f"epoch {e}: nothing read after the resume" for e in wanted if e > first_epoch and e not in after]
        return _peer_differences(straight, first, resume)
    if cell.elastic:
        return _elastic_differences(cell, straight, first, resume)
    if skips_interrupted_batch(cell):
        return _skipped_batch_differences(cell, straight, first, resume)
    problems = []
    for rank, (want, done, then) in enumerate(zip(straight, first, resume, strict=True)):
        got = merged(done, then)
        label = f"rank {rank}"
        if len(got) != len(want["trace"]):
            problems.append(f"{label}: {len(got)} batches after the resume, {len(want['trace'])} uninterrupted")
        for (step, epoch, ids, loss), (w_step, w_epoch, w_ids, w_loss) in zip(got, want["trace"], strict=False):
            if (step, epoch, ids) != (w_step, w_epoch, w_ids):
                problems.append(
                    f"{label} step {w_step}: epoch {epoch} ids {ids}, uninterrupted epoch {w_epoch} ids {w_ids}"
                )
                break
            if not torch.equal(loss, w_loss):
                problems.append(f"{label} step {step}: loss {loss.item()!r} != {w_loss.item()!r}")
                break
        if "val" in want:  # the Trainer's validation batches: the last result of each, as the user saw it
            seen = {(e, step, tuple(ids)): loss for e, step, ids, loss in [*done_val[rank], *then["val"]]}
            wanted = {(e, step, tuple(ids)): loss for e, step, ids, loss in want["val"]}
            if seen.keys() != wanted.keys() or not all(torch.equal(seen[k], wanted[k]) for k in wanted):
                problems.append(f"{label}: validation results differ")
        final, want_final = then["final"], want["final"]
        if cell.stop in KILLS and "top_k" in want_final:
            # A top-k file written between the newest complete checkpoint and the SIGKILL is unknown to the restored
            # callback: the resumed run writes it again under a versioned name (`-v1`) and the first stays on disk
            # (as in Lightning; the checkpointing guide's row). The scores kept must still be the uninterrupted run's.
            final, want_final = ({**f, "top_k": sorted(f["top_k"]["best_k"].values())} for f in (final, want_final))
        if cell.stop == "max_steps" and "top_k" in want_final:
            # The fit cut by max_steps validated at its cut (its epoch's end hooks ran), a validation the run left
            # alone never had: its top-k file may rank among the best, so only the rest of the state is compared.
            final, want_final = ({k: v for k, v in f.items() if k != "top_k"} for f in (final, want_final))
        if final.keys() != want_final.keys():
            problems.append(f"{label}: final entries {sorted(final)} != {sorted(want_final)}")
        for key in want_final.keys() & final.keys():  # a second optimizer's state too (manual optimization)
            if not _equal(final[key], want_final[key]):
                problems.append(f"{label}: final {key} differs")
    return problems


def _by_epoch(traces: list[list]) -> dict[int, list[int]]:
    epochs: dict[int, list[int]] = {}
    for trace in traces:
        for _, epoch, ids, _ in trace:
            epochs.setdefault(epoch, []).extend(ids)
    return epochs


def _elastic_differences(cell: Cell, straight: list[dict], first: list[list], resume: list[dict]) -> list[str]:
    # Another number of processes takes another number of optimizer steps: the weights follow another path by
    # construction. What must be exact is the data: each sample of the stopped epoch once, then whole epochs.
    # A `CombinedLoader`'s shorter loader cycles inside the epoch (`max_size_cycle`): the first loader's part of
    # each batch (the first half of its ids: both parts have one batch size) is what is read once an epoch.
    if cell.loader == "combined":
        straight = [{**s, "trace": _first_parts(s["trace"])} for s in straight]
        first = [_first_parts(trace) for trace in first]
        resume = [{**r, "trace": _first_parts(r["trace"])} for r in resume]
    problems = []
    start_step = resume[0]["start_step"]
    consumed = [[e for e in trace if e[0] < start_step] for trace in first]
    for rank, (trace, want) in enumerate(zip(consumed, straight, strict=False)):
        if trace != want["trace"][: len(trace)]:
            problems.append(f"rank {rank}: the stopped run differs from the uninterrupted one before the stop")
    before, after = _by_epoch(consumed), _by_epoch([r["trace"] for r in resume])
    wanted = _by_epoch([s["trace"] for s in straight])
    drops = cell.loader.endswith("drop_last")
    for epoch in range(max(wanted) + 1):
        done, rest = set(before.get(epoch, [])), set(after.get(epoch, []))
        again = (done & rest) - _even_batches_padding(cell, straight, resume, epoch)
        if again:
            problems.append(f"epoch {epoch}: samples {sorted(again)} read before the stop and again after it")
        if not drops and done | rest != set(wanted.get(epoch, [])):
            problems.append(f"epoch {epoch}: read {sorted(done | rest)}, uninterrupted {sorted(set(wanted[epoch]))}")
        if epoch > max(before, default=-1) and not rest:
            problems.append(f"epoch {epoch}: nothing read after the resume")
    return problems


def _even_batches_padding(cell: Cell, straight: list[dict], resume: list[dict], epoch: int) -> set[int]:
    """The samples the adapter may read twice in ``epoch`` resumed on several processes: Accelerate's
    ``even_batches`` completes a last round short of a batch per process with the first samples of the pass's
    order (as an uninterrupted pass on several processes does), so they may be among those read before the stop.
    Only the last batch of the epoch on each process may hold them."""
    if not cell.api.startswith("accelerate") or cell.resume_world == 1 or cell.world != 1:
        return set()
    order = [i for _, e, ids, _ in straight[0]["trace"] if e == epoch for i in ids]
    first_round = set(order[: _batch_size(straight) * cell.resume_world])
    last_batches = set()
    for record in resume:
        batches = [ids for _, e, ids, _ in record["trace"] if e == epoch]
        last_batches |= set(batches[-1]) if batches else set()
    return first_round & last_batches


def _batch_size(records: list[dict]) -> int:
    return max(len(ids) for record in records for _, _, ids, _ in record["trace"])


def _first_parts(trace: list) -> list:
    return [(step, epoch, ids[: len(ids) // 2], *rest) for step, epoch, ids, *rest in trace]


def _skipped_batch_differences(cell: Cell, straight: list[dict], first: list[list], resume: list[dict]) -> list[str]:
    """A resume that skips the batch whose step raised: the batches before it as uninterrupted, then the rest of
    its epoch in the uninterrupted order less that one batch, then as many batches per epoch as uninterrupted (the
    weights, and the random state the skipped step did not draw from, take another path after the skip).

    A ``CombinedLoader``'s shorter loader starts a new pass inside the epoch (``max_size_cycle``), shuffled from
    that random state on one process: there the first loader's part of each batch is compared (the first half of
    its ids: both parts have one batch size)."""
    problems = []
    cycled = cell.loader == "combined"
    for rank, (want, done, then) in enumerate(zip(straight, first, resume, strict=True)):
        got, wanted = merged(done, then), want["trace"]
        before = sum(1 for entry in done if entry[0] < then["start_step"])
        epoch = wanted[before][1]
        rest = [ids[: len(ids) // 2] if cycled else ids for _, e, ids, _ in wanted[before + 1 :] if e == epoch]
        if [e[2] for e in got[:before]] != [e[2] for e in wanted[:before]]:
            problems.append(f"rank {rank}: the batches before the stop differ from the uninterrupted run's")
        if [e[2][: len(e[2]) // 2] if cycled else e[2] for e in got[before : before + len(rest)]] != rest:
            problems.append(f"rank {rank}: epoch {epoch} after the skipped batch is not the uninterrupted order")
        counts = [sum(1 for e in got if e[1] == n) for n in range(epoch + 1, 1 + max(e[1] for e in wanted))]
        wanted_counts = [sum(1 for e in wanted if e[1] == n) for n in range(epoch + 1, 1 + max(e[1] for e in wanted))]
        if len(got) != len(wanted) - 1 or counts != wanted_counts:
            problems.append(f"rank {rank}: {len(got)} batches (later epochs {counts}), uninterrupted {len(wanted)} "
                            f"({wanted_counts}): only the one batch may be missing")
    return problems


def _peer_differences(straight: list[dict], first: list[list], resume: list[dict]) -> list[str]:
    """A cell resumed as the peer resumes: each epoch still reads as many batches as uninterrupted."""
    problems = []
    for rank, (want, done, then) in enumerate(zip(straight, first, resume, strict=True)):
        got = merged(done, then)
        counts = [sum(1 for e in got if e[1] == epoch) for epoch in range(1 + max(e[1] for e in want["trace"]))]
        wanted = [sum(1 for e in want["trace"] if e[1] == epoch) for epoch in range(len(counts))]
        if counts != wanted:
            problems.append(f"rank {rank}: batches per epoch {counts}, uninterrupted {wanted}")
    return problems
