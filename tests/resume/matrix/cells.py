"""The resume matrix: every cell is one way a user trains and one place the run stops.

A cell is run twice: uninterrupted, and stopped at its stop point then resumed in a fresh process. The two
must agree bit for bit: every batch's sample ids and loss, the final weights, the optimizer state and the
random generators (`compare.py`). `all_cells()` is the whole matrix (``-m slow``); `fast_sample()` a seeded
part of it for the fast suite. Axes:

* API: the Fabric loop with ``fabric.save``/``fabric.load`` (``fabric``) or ``save_checkpoint``/
  ``load_latest`` (``fabric_latest``, the one a SIGKILL resumes with); the Trainer (``trainer``:
  ``ckpt_path="last"``, an explicit path, `OnExceptionCheckpoint`); the Accelerate adapter (``accelerate``:
  ``save_state``/``load_state`` with the stateful loader, or Accelerate's ``skip_first_batches``).
* Processes: 1; 2 under ``ddp``, ``ddp_spawn``, ``fsdp`` and ``deepspeed_stage_2``; 2 -> 1 and 1 -> 2 (DDP, and
  the sharded strategies keeping their strategy on one process: `SHARDED_ELASTIC_WORLDS`).
* Loader: see `LOADERS`.
* Accumulation 1 or 3 (epochs of 5 batches: windows of 3 and 2), gradient clipping, a scheduler stepped per
  step or per epoch, ``torch.compile`` (the Trainer rows: clipping and schedulers, `trainer_cells`).
* Stop point: see `STOPS` (the Trainer's: `TRAINER_STOPS`).
* The Trainer's configuration: the defaults, and `TRAINER_CONFIGS` in rows of their own (`trainer_config_cells`).
* Precision: ``32-true`` everywhere, and `PRECISIONS` in their own rows (`precision_cells`): a ``16-mixed``
  run's grad scaler skips the steps whose scaled gradients overflow and halves its scale, so where the stop
  falls in that sequence matters; its state is compared with the rest.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass

#: Loaders of the Fabric and adapter rows (the Trainer rows add ``combined``).
LOADERS = (
    "shuffle",  # DataLoader(shuffle=True): torch's global generator draws the order
    "shuffle_generator",  # shuffle=True with a user's torch.Generator
    "uneven",  # 42 samples: DistributedSampler pads the last share
    "uneven_drop_last",  # 42 samples, DataLoader(drop_last=True)
    "dist_sampler",  # the user's own DistributedSampler (drop_last=False), set_epoch by fabricx
    "dist_sampler_drop_last",  # the user's own DistributedSampler(drop_last=True)
    "custom_sampler",  # WeightedRandomSampler (global generator; split across ranks by fabricx)
    "batch_sampler",  # a custom batch sampler (per rank, use_distributed_sampler=False)
    "iterable",  # an IterableDataset without state: fast-forwarded
    "iterable_stateful",  # an IterableDataset with state_dict/load_state_dict
    "workers",  # shuffle with num_workers=2 and random augmentation in the workers
    "workers_persistent",  # the same with persistent_workers=True
    "set_epoch_loop",  # shuffle, and the loop calls loader.set_epoch(epoch) itself
)

#: Where the first run stops (epoch-bound stops happen in the cell's ``stop_epoch``).
STOPS = (
    "start",  # after setup, before the first batch
    "first",  # after the first batch
    "mid",  # after a batch in the middle of an epoch
    "last_in_for",  # after an epoch's last batch, still inside the ``for``
    "after_for",  # after the epoch's ``for`` loop has ended
    "after_set_epoch",  # at the top of the next epoch, after loader.set_epoch(epoch)
    "kill",  # SIGKILL at a seeded step; resumed from the latest complete checkpoint
)

#: Stops by SIGKILL (one process; the first run is a process of its own): ``kill`` at a seeded step, and
#: ``after_stop`` (the Trainer's ``early_stop`` configuration) in ``on_train_end`` of a run that EarlyStopping
#: ended, after its last checkpoint: a preempted job that had finished, run again by its scheduler.
KILLS = ("kill", "after_stop")

#: (strategy, processes of the first run, processes of the resumed run).
WORLDS = (
    ("single", 1, 1),
    ("ddp", 2, 2),
    ("ddp_spawn", 2, 2),
    ("fsdp", 2, 2),
    ("deepspeed_stage_2", 2, 2),
    ("ddp", 2, 1),
    ("single", 1, 2),
)

#: The sharded strategies' runs resumed on another number of processes (`fabric_cells`, `trainer_cells`).
SHARDED_ELASTIC_WORLDS = (
    ("fsdp", 2, 1),
    ("fsdp", 1, 2),
    ("deepspeed_stage_2", 2, 1),
    ("deepspeed_stage_2", 1, 2),
)

EPOCHS = 3


@dataclass(frozen=True)
class Cell:
    api: str
    strategy: str
    world: int
    resume_world: int
    loader: str
    stop: str
    stop_epoch: int = 1
    accumulate: int = 1
    clip: bool = False
    scheduler: str = ""  # "", "step" or "epoch"
    compile: bool = False
    precision: str = ""  # "" is 32-true
    config: str = ""  # the Trainer's: one of `TRAINER_CONFIGS` ("" is the defaults)
    seed: int = 0

    @property
    def id(self) -> str:
        parts = [self.api, f"{self.strategy}{self.world}to{self.resume_world}", self.loader, self.stop]
        parts.append(f"e{self.stop_epoch}")
        if self.accumulate > 1:
            parts.append(f"acc{self.accumulate}")
        if self.clip:
            parts.append("clip")
        if self.scheduler:
            parts.append(f"sched-{self.scheduler}")
        if self.compile:
            parts.append("compile")
        if self.precision:
            parts.append(self.precision)
        if self.config:
            parts.append(self.config)
        return "-".join(parts)

    @property
    def group(self) -> tuple[str, ...]:
        """Cells of one group run in the same two launches (a Fabric's in one precision; each Trainer cell builds
        its own Trainer)."""
        group = (self.api, self.strategy, self.world, self.resume_world)
        if not self.precision:
            return group
        return (*group, "precisions" if self.api == "trainer" else self.precision)

    @property
    def elastic(self) -> bool:
        return self.world != self.resume_world

    def as_dict(self) -> dict:
        return asdict(self)


#: What fabricx says when it refuses a resume on purpose (docs/guides/checkpointing.md, "Resumption, cell by cell").
REFUSALS = {
    "window": "saved inside a gradient-accumulation window",  # each process's gradients are its own
    "mid_epoch": "in the middle of epoch",  # a split of the epoch the other number of processes cannot continue
}


def refusal(cell: Cell) -> tuple[str, ...]:
    """The documented refusals a cell's resume may end in (nothing for a cell that must resume exactly)."""
    return tuple(REFUSALS.values()) if cell.elastic else ()


#: Cells known to end inexact, with what was found; the test requires them to still differ (so that a fix is
#: noticed and the entry removed), and the closing note of the round that found them names them.
_UNSYNCED_BACKBONE = (
    "BackboneFinetuning under DDP: DDP registers the parameters that train when it wraps the module, so the backbone "
    "unfrozen at epoch 1 is never all-reduced and each process trains its own (the run left alone ends with other "
    "backbones on its 2 ranks; Lightning's too); a resume hands rank 1 rank 0's backbone"
)
KNOWN_INEXACT: dict[str, str] = {
    cell_id: _UNSYNCED_BACKBONE
    for cell_id in (
        "trainer-ddp2to2-shuffle-mid-e1-clip-sched-step-finetune",
        "trainer-ddp2to2-shuffle-in_validation-e1-finetune",
        "trainer-ddp2to2-shuffle-after_for-e1-finetune",
        "trainer-ddp2to2-shuffle-refit-e1-clip-sched-step-finetune",
    )
}


def known_inexact(cell: Cell) -> str | None:
    """Why a cell is known to end inexact (`KNOWN_INEXACT`), else ``None``."""
    return KNOWN_INEXACT.get(cell.id)


def peer_semantics(cell: Cell) -> str | None:
    """Why a cell resumes as the peer does rather than exactly, or ``None`` (every other cell is exact)."""
    if cell.elastic and cell.loader == "custom_sampler":
        return (
            "a custom sampler at another number of processes: fabricx splits a custom sampler's draw across "
            "processes (seed + epoch) and leaves one process's draw to the global generator, so the epochs after "
            "the stop are drawn anew at the new size (each is read whole)"
        )
    if cell.api == "accelerate_skip":
        return (
            "Accelerate's skip_first_batches resume: the stopped epoch's order is drawn again and the random state "
            "is the saved one, so the batches after the stop differ from an uninterrupted run, as in Accelerate; "
            "use_stateful_dataloader=True resumes exactly"
        )
    return None


def skips_interrupted_batch(cell: Cell) -> bool:
    """Whether a cell resumes by skipping the batch whose training step raised (the Trainer's documented
    behaviour, with a warning): every other batch is read as in the uninterrupted run, in its order."""
    return cell.api == "trainer" and cell.stop == "in_step"


def _valid(cell: Cell) -> bool:
    if cell.stop == "kill" and (cell.world > 1 or cell.api != "fabric_latest"):
        return False  # a SIGKILL row: one process, resumed from the latest checkpoint
    if cell.api == "fabric_latest" and cell.stop != "kill":
        return False
    if cell.elastic and cell.loader in ("batch_sampler", "dist_sampler", "dist_sampler_drop_last", "iterable",
                                        "iterable_stateful", "set_epoch_loop"):
        return False  # per-rank loaders the user built for one number of processes
    # Workers under DeepSpeed are covered by the other strategies; this keeps the slow matrix within minutes.
    return not (cell.strategy == "deepspeed_stage_2" and cell.loader.startswith("workers"))


def fabric_cells() -> list[Cell]:
    """The Fabric rows: every world x loader x stop, with accumulation, clipping and schedulers cycled."""
    extras = itertools.cycle(
        [
            {},
            {"accumulate": 3},
            {"clip": True, "scheduler": "step"},
            {"accumulate": 3, "scheduler": "epoch"},
            {"accumulate": 3, "clip": True},
        ]
    )
    cells = []
    for (strategy, world, resume_world), loader, stop in itertools.product(WORLDS, LOADERS, STOPS):
        api = "fabric_latest" if stop == "kill" else "fabric"
        for stop_epoch in (0, 1) if stop in ("last_in_for", "after_for") else (1,):
            extra = dict(next(extras))
            if strategy.startswith("deepspeed"):
                extra.pop("clip", None)  # DeepSpeed clips inside its step: DeepSpeedStrategy(gradient_clipping=...)
            cell = Cell(api, strategy, world, resume_world, loader, stop, stop_epoch, **extra)
            if _valid(cell):
                cells.append(cell)
    # The sharded strategies on another number of processes (each keeps its strategy on one process, as a user
    # resuming on fewer or more GPUs would): a checkpoint of shards or ZeRO partitions read at the new size.
    for (strategy, world, resume_world), loader, stop in itertools.product(
        SHARDED_ELASTIC_WORLDS, ["shuffle", "uneven"], ["first", "mid", "last_in_for", "after_for"]
    ):
        extra = dict(next(extras))
        if strategy.startswith("deepspeed"):
            extra.pop("clip", None)
        cells.append(Cell("fabric", strategy, world, resume_world, loader, stop, **extra))
    cells.append(Cell("fabric", "single", 1, 1, "shuffle", "mid", compile=True))
    cells.append(Cell("fabric", "ddp", 2, 2, "shuffle", "after_for", stop_epoch=0))  # the reproducer of the issue
    return [_seeded(cell) for cell in cells]


#: The Trainer's stops: those of `STOPS` it can be stopped at, and its own (trainer_job.py says where each is).
TRAINER_STOPS = (
    "first", "mid", "in_step", "last_in_for", "after_for", "in_validation", "in_mid_validation", "in_epoch_end",
    "refit", "max_steps", "kill",
)


def trainer_cells() -> list[Cell]:
    """The Trainer rows: every world x loader x stop at accumulation 1 and 3, each with a scheduler (stepped per
    step or per epoch, as ``configure_optimizers``' ``interval`` says) and gradient clipping cycled."""
    plain = itertools.cycle([{}, {"clip": True, "scheduler": "step"}])
    windowed = itertools.cycle([{"scheduler": "epoch"}, {"clip": True}, {}, {"scheduler": "step"}])
    cells = []
    rows = itertools.chain(
        itertools.product(
            [("single", 1, 1), ("ddp", 2, 2), ("ddp_spawn", 2, 2)],
            ["shuffle", "shuffle_generator", "workers", "combined"],
            TRAINER_STOPS,
        ),
        # The sharded strategies: their checkpoint and restore paths are their own; the loaders are the DDP rows'.
        itertools.product([("fsdp", 2, 2), ("deepspeed_stage_2", 2, 2)], ["shuffle", "combined"], TRAINER_STOPS),
        # Another number of processes: the stops between and inside epochs that a user resumes from.
        itertools.product(
            [("ddp", 2, 1), ("single", 1, 2)],
            ["shuffle", "combined"],
            ["mid", "last_in_for", "after_for", "in_validation", "in_epoch_end", "refit", "kill"],
        ),
        # The other loaders a user hands the Trainer (uneven, a custom or batch sampler, iterable, persistent
        # workers), at the stops between and inside epochs.
        itertools.product(
            [("single", 1, 1), ("ddp", 2, 2)],
            ["uneven", "uneven_drop_last", "custom_sampler", "batch_sampler", "iterable", "iterable_stateful",
             "workers_persistent"],
            ["first", "mid", "in_step", "last_in_for", "after_for", "in_validation", "kill"],
        ),
        # The sharded strategies on another number of processes.
        itertools.product(
            SHARDED_ELASTIC_WORLDS, ["shuffle", "combined"], ["mid", "after_for", "in_validation", "refit"]
        ),
        # The other loaders on another number of processes, and ddp_spawn's processes resumed by one.
        itertools.product(
            [("ddp", 2, 1), ("single", 1, 2)],
            ["uneven", "uneven_drop_last", "custom_sampler", "workers_persistent"],
            ["mid", "after_for", "in_validation"],
        ),
        itertools.product([("ddp_spawn", 2, 1)], ["shuffle"], ["mid", "after_for"]),
    )
    for (strategy, world, resume_world), loader, stop in rows:
        if stop == "kill" and world > 1:
            continue  # a SIGKILL row: one process, as the Fabric's
        for accumulate, extras in ((1, plain), (3, windowed)):
            extra = dict(next(extras))
            if strategy.startswith("deepspeed"):
                extra.pop("clip", None)  # DeepSpeed clips inside its step (DeepSpeedStrategy(gradient_clipping=...))
            cell = Cell("trainer", strategy, world, resume_world, loader, stop, accumulate=accumulate, **extra)
            cells.append(_seeded(cell))
    return cells


#: Trainer configurations a user sets beside the defaults (trainer_job.py applies them), each in rows of its own.
TRAINER_CONFIGS = {
    "limit": "limit_train_batches=0.6: each epoch cut to 6 batches of 10 (3 of 5 on 2 processes)",
    "val_every_3": "val_check_interval=3, check_val_every_n_epoch=None: validation every 3 batches across epochs",
    "reload": "reload_dataloaders_every_n_epochs=1: train_dataloader() is called again every epoch",
    "acc_schedule": "GradientAccumulationScheduler({1: 2}): accumulation 1 in epoch 0, then 2",
    "early_stop": "EarlyStopping(monitor='val_loss', min_delta=1e6, patience=1): no later epoch betters epoch 0's "
    "score by that much, so the run stops after epoch 1 (epoch 0's score must come from the checkpoint)",
    "manual": "manual optimization: two optimizers, the second stepped every other batch (its gradients held across "
    "batches), and a scheduler stepped by the module",
    "swa": "StochasticWeightAveraging(swa_lrs=0.005, swa_epoch_start=1): averaged from epoch 1 on (its SWALR "
    "replacing the module's scheduler), the average put into the model when training ends",
    "ema": "EMAWeightAveraging(decay=0.9): an exponential moving average of the weights every step, validated and "
    "ended with",
    "early_stop_mid": "EarlyStopping(..., patience=2, check_on_train_epoch_end=False) with val_check_interval=0.5: "
    "the run stops at epoch 1's first validation, inside the epoch",
    "finetune": "BackboneFinetuning(unfreeze_backbone_at_epoch=1): the first layer frozen in epoch 0, then added to "
    "the optimizer as a parameter group of its own, its rate rising every epoch",
}

#: The stops of a configuration whose run differs from the defaults': early stopping ends the run in epoch 1 (so
#: nothing after it is reached, and a second ``fit`` would go on where the first stopped early); manual
#: optimization also stops after the first batch and in a step (its second optimizer's gradients pending); SWA has
#: no ``refit``: its schedule is built from ``max_epochs`` (Lightning's counter starts there) and a fit that reaches
#: its ``max_epochs`` ends with the average in the model, so a first fit with fewer epochs is another run.
CONFIG_STOPS = {
    "early_stop": ("mid", "in_validation", "in_epoch_end", "kill", "after_stop"),
    "early_stop_mid": ("in_mid_validation", "after_stop"),
    "manual": ("first", "mid", "in_step", "in_validation", "after_for", "refit", "kill"),
    "swa": ("mid", "in_validation", "after_for", "kill"),
}


def trainer_config_cells() -> list[Cell]:
    """Each of `TRAINER_CONFIGS` on one process and two, at the stops a user resumes from."""
    cells = []
    for (strategy, world, resume_world), config in itertools.product([("single", 1, 1), ("ddp", 2, 2)],
                                                                     TRAINER_CONFIGS):
        validation_stop = "in_mid_validation" if config == "val_every_3" else "in_validation"
        for stop in CONFIG_STOPS.get(config, ("mid", validation_stop, "after_for", "refit", "kill")):
            if stop in KILLS and world > 1:
                continue  # a SIGKILL row: one process, as the Fabric's
            # Manual optimization steps its own scheduler and cannot have the Trainer clip (Lightning refuses both).
            automatic = config != "manual"
            extra = {"scheduler": "step", "clip": True} if automatic and stop in ("mid", "refit") else {}
            cell = Cell("trainer", strategy, world, resume_world, "shuffle", stop, config=config, **extra)
            cells.append(_seeded(cell))
    return cells


#: The precisions of `precision_cells` (``32-true`` is every other cell's).
PRECISIONS = ("16-mixed", "bf16-mixed", "bf16-true")

#: A ``16-mixed`` grad scaler that overflows every few steps: a scale that grows every 2 steps and starts too
#: high, so that steps are skipped and the scale halved all along the run, not only at its start.
OVERFLOWING_SCALER = {
    "scale": 2.0**17, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2, "_growth_tracker": 0
}


def precision_cells() -> list[Cell]:
    """Every precision under each strategy, stopped after the first step (inside the grad scaler's first
    skipped steps), in the middle of an epoch and after one, with accumulation 1 and 3 alternating."""
    accumulate = itertools.cycle([1, 3])
    cells = []
    worlds = [("single", 1, 1), ("ddp", 2, 2), ("fsdp", 2, 2), ("deepspeed_stage_2", 2, 2)]
    for (strategy, world, resume_world), precision in itertools.product(worlds, PRECISIONS):
        if strategy.startswith("deepspeed") and precision == "16-mixed":
            continue  # DeepSpeed's CPU accelerator has no float16 (`DeepSpeedStrategy` says so)
        for stop in ("first", "mid", "after_for"):
            cell = Cell("fabric", strategy, world, resume_world, "shuffle", stop, stop_epoch=1,
                        accumulate=next(accumulate), precision=precision)
            cells.append(_seeded(cell))
        for stop in ("first", "mid", "in_step", "after_for") if strategy in ("single", "ddp") else ():
            cell = Cell("trainer", strategy, world, resume_world, "shuffle", stop, accumulate=next(accumulate),
                        precision=precision)
            cells.append(_seeded(cell))
    return cells


def accelerate_cells() -> list[Cell]:
    cells = []
    for (strategy, world, resume_world), loader, stop, api in itertools.product(
        [("single", 1, 1), ("ddp", 2, 2)],
        ["shuffle", "shuffle_generator", "workers"],
        ["first", "mid", "last_in_for", "after_for"],
        ["accelerate", "accelerate_skip"],
    ):
        for accumulate in (1, 3):
            cells.append(_seeded(Cell(api, strategy, world, resume_world, loader, stop, accumulate=accumulate)))
    # Another number of processes, with the stateful loader (Accelerate's skip_first_batches counts one size's
    # batches).
    for (strategy, world, resume_world), loader, stop in itertools.product(
        [("ddp", 2, 1), ("single", 1, 2)], ["shuffle", "workers"], ["first", "mid", "last_in_for", "after_for"]
    ):
        for accumulate in (1, 3):
            cell = Cell("accelerate", strategy, world, resume_world, loader, stop, accumulate=accumulate)
            cells.append(_seeded(cell))
    return cells


def _seeded(cell: Cell) -> Cell:
    seed = random.Random(cell.id).randrange(2**31)
    return Cell(**{**cell.as_dict(), "seed": seed})


def all_cells() -> list[Cell]:
    return fabric_cells() + trainer_cells() + trainer_config_cells() + precision_cells() + accelerate_cells()


def by_id(cell_id: str) -> Cell:
    for cell in all_cells():
        if cell.id == cell_id:
            return cell
    raise KeyError(f"no cell {cell_id!r} in the matrix")


#: Cells the fast suite always runs: the two resumes this matrix was built after (a DDP checkpoint saved after an
#: epoch's ``for`` loop; the adapter's stateful loader on one process), and the Trainer on two processes (its
#: script launched once per rank, resumed from `OnExceptionCheckpoint`'s file in the middle of an epoch, with a
#: per-step scheduler and gradient clipping), a ``16-mixed`` grad scaler's state with accumulation, the Trainer's
#: `CombinedLoader` stopped in the epoch's validation on 2 processes, resumed on 1, and the Trainer under FSDP2
#: stopped mid-epoch on 2 processes, resumed on 1 (the last step's gradients, sharded for 2, are left behind), and
#: the adapter's first pass of one process continued on two (its order redrawn from the global generator), and the
#: adapter on two processes resumed mid-epoch (each process's read-ahead batch, its augmentation drawn, kept), and
#: the Trainer's stateful callbacks on one process: a resume after EarlyStopping ended the run, SWA resumed inside
#: its schedule, a weight average saved inside validation, a backbone unfrozen before the stop.
ALWAYS = (
    "fabric-ddp2to2-shuffle-after_for-e0",
    "accelerate-single1to1-shuffle-mid-e1",
    "trainer-ddp2to2-shuffle-mid-e1-clip-sched-step",
    "fabric-single1to1-shuffle-mid-e1-acc3-16-mixed",
    "trainer-ddp2to1-combined-in_validation-e1-clip-sched-step",
    "trainer-fsdp2to1-shuffle-mid-e1-clip-sched-step",
    "accelerate-single1to2-shuffle-first-e1",
    "accelerate-ddp2to2-shuffle-mid-e1",
    "trainer-single1to1-shuffle-after_stop-e1-early_stop",
    "trainer-single1to1-shuffle-mid-e1-clip-sched-step-swa",
    "trainer-single1to1-shuffle-in_validation-e1-ema",
    "trainer-single1to1-shuffle-mid-e1-clip-sched-step-finetune",
)


def fast_sample(seed: int, per_group: int = 3, groups: int = 2) -> list[Cell]:
    """The `ALWAYS` cells and a seeded sample: ``per_group`` cells of ``groups`` launch groups (always 1 process
    and DDP among them)."""
    rng = random.Random(seed)
    cells = [cell for cell in all_cells() if cell.id not in ALWAYS]
    by_group: dict[tuple, list[Cell]] = {}
    for cell in cells:
        by_group.setdefault(cell.group, []).append(cell)
    always = [("fabric", "single", 1, 1), ("fabric", "ddp", 2, 2)]
    others = sorted(g for g in by_group if g not in always)
    chosen = always + rng.sample(others, groups - len(always))
    sample = [cell for group in chosen for cell in rng.sample(by_group[group], min(per_group, len(by_group[group])))]
    return [by_id(cell_id) for cell_id in ALWAYS] + sample
