"""The ``fabricx`` command: ``run`` a script on several processes or nodes, ``env``, ``consolidate``, ``plot``.

``fabricx run`` starts processes through PyTorch's own launcher (``torch.distributed.run``, the
engine behind ``torchrun``) and hands its flags to ``Fabric()`` in the script through
``FABRICX_*`` environment variables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from fabricx.utilities.preemption import REQUEUE_EXIT_CODE

#: Ports torchrun uses when none is given; a multi-node job needs the same port on every node.
DEFAULT_MULTI_NODE_PORT = 29500
#: What `--accelerator` accepts ("tpu" is refused with its reason, fabricx.accelerators.registry.NOT_SUPPORTED).
_TRAINED_ON = ("auto", "cpu", "cuda", "gpu", "mps")
# What `fabricx env` reports: what fabricx needs, and the extras that change what it can do.
REQUIRED_PACKAGES = ("torch", "lightning_utilities", "torchmetrics", "rich", "safetensors", "torchdata", "numpy")
OPTIONAL_PACKAGES = ("deepspeed", "tensorboard", "mlflow", "wandb", "matplotlib", "s3fs")


@dataclass
class RunOptions:
    """What ``fabricx run`` was asked for (``None``: not given on the command line).

    Example:
        ```python
        RunOptions(script="train.py", devices="2", accelerator="cpu")
        ```
    """

    script: str
    script_args: list[str] = field(default_factory=list)
    accelerator: str | None = None
    strategy: str | None = None
    devices: str | None = None
    num_nodes: int | None = None
    node_rank: int = 0
    main_address: str = "127.0.0.1"
    main_port: int | None = None
    precision: str | None = None
    max_restarts: int = 0
    #: ``--num-nodes MIN:MAX``: the fewest nodes the job runs on (``num_nodes`` holds the most).
    min_nodes: int | None = None
    #: Extra ``key=value`` settings of the elastic rendezvous (``--rdzv-conf``).
    rdzv_conf: str | None = None
    #: The job's id in the rendezvous: every node of one job gives the same (``--run-id``).
    run_id: str = "fabricx"
    #: ``--as-lightning``: the script's (and its libraries') Lightning imports resolve to fabricx
    #: (`fabricx.compat.lightning`).
    as_lightning: bool = False

    @property
    def elastic(self) -> bool:
        """Whether the job runs on a changing number of nodes (``--num-nodes MIN:MAX``)."""
        return self.min_nodes is not None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fabricx`` console script and of ``python -m fabricx``.

    Example:
        ```python
        main(["run", "--devices", "2", "train.py", "--lr", "0.1"])
        ```
    """
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "run":
        # A mistake in `fabricx run ...` is answered with run's usage, as argparse does for its own errors.
        run_parser: argparse.ArgumentParser = args.command_parser
        try:
            min_nodes, num_nodes = parse_num_nodes(args.num_nodes)
        except _UsageError as error:
            run_parser.error(str(error))
        options = RunOptions(
            script=args.script,
            script_args=list(args.script_args),
            accelerator=args.accelerator,
            strategy=args.strategy,
            devices=args.devices,
            num_nodes=num_nodes,
            min_nodes=min_nodes,
            node_rank=args.node_rank,
            main_address=args.main_address,
            main_port=args.main_port,
            precision=args.precision,
            max_restarts=args.max_restarts,
            rdzv_conf=args.rdzv_conf,
            run_id=args.run_id,
            as_lightning=args.as_lightning,
        )
        try:
            return run(options)
        except _UsageError as error:
            run_parser.error(str(error))
    if args.command == "env":
        print_environment()
        return 0
    if args.command == "consolidate":
        return consolidate(args.checkpoint_dir, args.output, allow_pickle=args.allow_pickle)
    if args.command == "plot":
        return plot(args.run_dir, args.output)
    parser.print_help()
    return 2


# -- run ----------------------------------------------------------------------------------------------
class _UsageError(ValueError):
    """A command-line mistake, reported as a usage message rather than a traceback."""


def parse_num_nodes(value: str | None) -> tuple[int | None, int | None]:
    """``--num-nodes`` as ``(min_nodes, num_nodes)``: ``"2"`` is ``(None, 2)``, ``"1:4"`` is ``(1, 4)``.

    Example:
        ```python
        parse_num_nodes("1:2")  # (1, 2)
        ```
    """
    if value is None:
        return None, None
    low, sep, high = str(value).partition(":")
    try:
        numbers = (int(low), int(high)) if sep else (None, int(low))
    except ValueError:
        raise _UsageError(f"--num-nodes {value!r}: give a count (2) or a range MIN:MAX (1:4).") from None
    if numbers[0] is not None and not 1 <= numbers[0] <= numbers[1]:
        raise _UsageError(f"--num-nodes {value}: MIN:MAX needs 1 <= MIN <= MAX.")
    return numbers


def run(options: RunOptions) -> int:
    """Start ``options.script`` on this node's processes through ``torch.distributed.run``.

    Returns the exit status: 0 when every process succeeded.

    Example:
        ```python
        run(RunOptions(script="train.py", devices="2", accelerator="cpu"))
        ```
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    from fabricx.strategies.launchers.launcher import THREADS_ENV, default_threads

    torchrun_args = build_torchrun_args(options)
    os.environ.update(flag_environment(options))
    if options.elastic:
        from fabricx.connector import ELASTIC_ENV

        os.environ[ELASTIC_ENV] = "1"
    if options.max_restarts or options.elastic:
        # A restarted attempt must not reuse the store (and the stale addresses) of the failed one.
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # torchrun would set 1 thread per process with a warning; divide this node's cores instead.
    threads = default_threads(processes_per_node(options), announce=options.node_rank == 0)
    if threads is not None:
        os.environ[THREADS_ENV] = str(threads)
    try:
        with _leaving_together(options):
            torchrun_main(torchrun_args)
    except ChildFailedError as error:
        if _all_left_for_requeue(error):
            # Every rank called fabric.exit_for_requeue(): hand the requeue code on (torchrun would say 1).
            sys.stderr.write(f"\nfabricx run: the job exited for requeueing (code {REQUEUE_EXIT_CODE}).\n")
            return REQUEUE_EXIT_CODE
        sys.stderr.write(f"\nfabricx run: a process of the job failed.\n{error}\n")
        return 1
    return 0


def _leaving_together(options: RunOptions) -> contextlib.AbstractContextManager[None]:
    """A static multi-node job keeps node 0's store up until the other nodes have left (see node_departure)."""
    num_nodes = options.num_nodes or 1
    if num_nodes == 1 or options.elastic or options.max_restarts:
        return contextlib.nullcontext()
    from fabricx.strategies.launchers.node_departure import nodes_leave_together

    return nodes_leave_together(options.main_address, _main_port(options), options.node_rank, num_nodes)


def _main_port(options: RunOptions) -> int:
    """The port given, else a free one for a single node, else the port every node of a job assumes."""
    if options.main_port is not None:
        return options.main_port
    if (options.num_nodes or 1) == 1:
        from fabricx.environments.local import find_free_port

        return find_free_port()
    return DEFAULT_MULTI_NODE_PORT


def _all_left_for_requeue(error: Any) -> bool:
    """Whether every failed worker of a torchrun job exited with the requeue code (or was stopped after one did)."""
    import signal

    codes = {failure.exitcode for failure in getattr(error, "failures", {}).values()}
    return REQUEUE_EXIT_CODE in codes and codes <= {REQUEUE_EXIT_CODE, -signal.SIGTERM, -signal.SIGKILL}


def build_torchrun_args(options: RunOptions) -> list[str]:
    """The argument list for ``torch.distributed.run`` that starts this node's share of the job.

    Example:
        ```python
        options = RunOptions(script="train.py", devices="2", accelerator="cpu",
                             main_port=1234)
        build_torchrun_args(options)
        # ['--nproc-per-node=2', '--nnodes=1', '--node-rank=0',
        #  '--master-addr=127.0.0.1', '--master-port=1234', 'train.py']
        ```
    """
    _validate(options)
    num_nodes = options.num_nodes or 1
    port = _main_port(options)
    if options.elastic:
        # Nodes join and leave: torchrun's elastic c10d rendezvous assigns node ranks, and a change
        # in membership restarts every worker (counted against --max-restarts).
        args = [
            f"--nproc-per-node={processes_per_node(options)}",
            f"--nnodes={options.min_nodes}:{num_nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={options.main_address}:{port}",
            f"--rdzv-id={options.run_id}",
            f"--max-restarts={options.max_restarts}",
        ]
        if options.rdzv_conf:
            args.append(f"--rdzv-conf={options.rdzv_conf}")
        return [*args, *_program(options)]
    args = [f"--nproc-per-node={processes_per_node(options)}", f"--nnodes={num_nodes}"]
    if options.max_restarts:
        # Elastic restarts need a rendezvous that forgets the previous attempt's gloo addresses;
        # the static master-addr rendezvous reuses them and restarted workers fail to connect.
        args += [
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={options.main_address}:{port}",
            f"--max-restarts={options.max_restarts}",
        ]
    else:
        args += [
            f"--node-rank={options.node_rank}",
            f"--master-addr={options.main_address}",
            f"--master-port={port}",
        ]
    return [*args, *_program(options)]


def _program(options: RunOptions) -> list[str]:
    """What each process runs: the script, or (``--as-lightning``) the alias module running it."""
    if options.as_lightning:
        return ["-m", "fabricx.compat.lightning", options.script, *options.script_args]
    return [options.script, *options.script_args]


def flag_environment(options: RunOptions) -> dict[str, str]:
    """The ``FABRICX_*`` variables through which the given flags reach ``Fabric()`` in the script.

    Example:
        ```python
        # {'FABRICX_DEVICES': '2'}
        flag_environment(RunOptions(script="t.py", devices="2"))
        ```
    """
    from fabricx.connector import CLI_FLAG_ENV

    values = {
        "accelerator": options.accelerator,
        "strategy": options.strategy,
        "devices": options.devices,
        # A changing number of nodes is read from torchrun's WORLD_SIZE in each attempt instead.
        "num_nodes": None if options.num_nodes is None or options.elastic else str(options.num_nodes),
        "precision": options.precision,
    }
    return {CLI_FLAG_ENV[name]: value for name, value in values.items() if value is not None}


def processes_per_node(options: RunOptions) -> int:
    """How many processes ``--devices`` means on this node for the chosen accelerator.

    Example:
        ```python
        processes_per_node(RunOptions(script="t.py", accelerator="cpu", devices="4"))  # 4
        ```
    """
    from fabricx.accelerators.registry import ACCELERATORS, AUTO_ORDER
    from fabricx.utilities.exceptions import MisconfigurationError

    name = options.accelerator or "auto"
    if name == "auto":
        name = next(n for n in AUTO_ORDER if ACCELERATORS[n].is_available())
    accelerator = ACCELERATORS[name]
    if name != "cpu" and not accelerator.is_available():
        raise _UsageError(f"--accelerator {name} was given, but no {name} device is available on this machine.")
    try:
        parsed = accelerator.parse_devices(options.devices if options.devices is not None else "auto")
    except MisconfigurationError as error:
        raise _UsageError(f"--devices {options.devices}: {error}") from None
    return parsed if isinstance(parsed, int) else len(parsed)


def _validate(options: RunOptions) -> None:
    from fabricx.accelerators.registry import NOT_SUPPORTED
    from fabricx.precision.registry import normalize_precision
    from fabricx.strategies.registry import STRATEGIES
    from fabricx.utilities.exceptions import MisconfigurationError

    if not os.path.isfile(options.script):
        raise _UsageError(f"the script {options.script!r} does not exist (looked in {os.getcwd()}).")
    if options.accelerator in NOT_SUPPORTED:
        raise _UsageError(
            f"--accelerator {options.accelerator}: {NOT_SUPPORTED[options.accelerator]}. "
            f"Choose one of {', '.join(_TRAINED_ON)}."
        )
    if options.accelerator is not None and options.accelerator not in _TRAINED_ON:
        raise _UsageError(f"--accelerator {options.accelerator!r}; choose one of {list(_TRAINED_ON)}.")
    if options.strategy is not None and options.strategy != "auto" and options.strategy not in STRATEGIES:
        raise _UsageError(f"--strategy {options.strategy!r}; choose one of {['auto', *sorted(STRATEGIES)]}.")
    if options.precision is not None:
        try:
            normalize_precision(options.precision)
        except MisconfigurationError as error:
            raise _UsageError(str(error)) from None
    num_nodes = options.num_nodes or 1
    if num_nodes < 1:
        raise _UsageError(f"--num-nodes {options.num_nodes}: give at least 1.")
    if options.rdzv_conf is not None and not options.elastic:
        raise _UsageError("--rdzv-conf configures the elastic rendezvous; it needs --num-nodes MIN:MAX.")
    if options.elastic and options.node_rank:
        raise _UsageError(
            f"--node-rank {options.node_rank} with --num-nodes {options.min_nodes}:{num_nodes}: the elastic "
            "rendezvous numbers the nodes itself. Leave --node-rank out."
        )
    if not 0 <= options.node_rank < num_nodes:
        raise _UsageError(f"--node-rank {options.node_rank} is outside 0..{num_nodes - 1} for --num-nodes {num_nodes}.")
    if options.max_restarts < 0:
        raise _UsageError(f"--max-restarts {options.max_restarts}: give 0 or more.")
    if options.main_port is not None and not 0 < options.main_port < 65536:
        raise _UsageError(f"--main-port {options.main_port} is not a TCP port (1..65535).")


# -- env ----------------------------------------------------------------------------------------------
def collect_environment() -> dict[str, dict[str, str]]:
    """What fabricx detects here: hardware, cluster environment and ranks, package versions.

    Example:
        ```python
        collect_environment()["Versions"]["torch"]  # '2.13.0+cpu'
        ```
    """
    import platform

    import torch
    import torch.distributed as dist

    from fabricx.accelerators.accelerator import Accelerator
    from fabricx.accelerators.registry import ACCELERATORS
    from fabricx.accelerators.xla import XLAAccelerator
    from fabricx.environments.detect import detect_cluster_environment

    hardware: dict[str, str] = {}
    cpu_cores = os.cpu_count() or 1

    # TPU cores are reported too (a bug report should say they are there), though fabricx does not train on them.
    found_by: dict[str, type[Accelerator]] = {name: ACCELERATORS[name] for name in ("cpu", "cuda", "mps")}
    for name, accelerator in {**found_by, "tpu": XLAAccelerator}.items():
        try:
            available = accelerator.is_available()
            count = cpu_cores if name == "cpu" else (accelerator.auto_device_count() if available else 0)
        except Exception as error:  # a broken driver should not hide the rest of the report
            hardware[name] = f"error: {error}"
            continue
        unit = "cores" if name == "cpu" else "devices"
        hardware[name] = f"available, {count} {unit}" if available else "not available"
        if name == "cpu":
            hardware[name] += _usable_cores(cpu_cores)
            hardware["memory"] = _memory()
    if torch.cuda.is_available():
        hardware["cuda devices"] = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    backends = [
        name
        for name, ok in (
            ("gloo", dist.is_gloo_available()),
            ("nccl", dist.is_nccl_available()),
            ("mpi", dist.is_mpi_available()),
        )
        if ok
    ]
    hardware["process-group backends"] = ", ".join(backends) or "none"

    environment = detect_cluster_environment()
    cluster = {"environment": type(environment).__name__}
    if environment.creates_processes_externally:
        for label, getter in (
            ("global rank", environment.global_rank),
            ("local rank", environment.local_rank),
            ("node rank", environment.node_rank),
            ("world size", environment.world_size),
        ):
            cluster[label] = _safe(getter)
    else:
        cluster["processes"] = "not started by a launcher (ranks are assigned when Fabric launches)"
    cluster["main address"] = _safe(lambda: environment.main_address)

    versions = {"python": platform.python_version(), "platform": platform.platform()}
    versions["fabricx"] = _package_version("fabricx")
    for package in REQUIRED_PACKAGES:
        versions[package] = _package_version(package)
    if torch.version.cuda:
        versions["cuda (torch built with)"] = torch.version.cuda
    optional = {package: _package_version(package) for package in OPTIONAL_PACKAGES}
    return {"Hardware": hardware, "Cluster": cluster, "Versions": versions, "Optional packages": optional}


def print_environment(file: TextIO | None = None) -> None:
    """Print `collect_environment()` as rich tables on a terminal, as plain lines otherwise."""
    out = file if file is not None else sys.stdout
    report = collect_environment()
    if getattr(out, "isatty", lambda: False)():
        from fabricx.utilities.imports import lazy_import

        Console = lazy_import("rich.console").Console
        Table = lazy_import("rich.table").Table

        console = Console(file=out)
        for section, rows in report.items():
            table = Table(title=section, show_header=False, title_justify="left")
            table.add_column(style="bold")
            table.add_column()
            for key, value in rows.items():
                table.add_row(key, value)
            console.print(table)
        return
    for section, rows in report.items():
        print(f"{section}:", file=out)
        for key, value in rows.items():
            print(f"  {key}: {value}", file=out)


def _usable_cores(total: int) -> str:
    # A container or `taskset` may allow fewer cores than the machine has; both numbers matter in a report.
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    return "" if usable == total else f" ({usable} usable by this process)"


def _memory() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or not these names (macOS: no AVPHYS)
        return "unknown"
    return f"{total / 2**30:.1f} GiB ({available / 2**30:.1f} GiB free)"


def _package_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    # Read from metadata: importing deepspeed itself is slow and noisy.
    for name in (package, package.replace("_", "-")):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "not installed"


def _safe(getter: Callable[[], object]) -> str:
    try:
        return str(getter())
    except Exception as error:
        return f"unknown ({error})"


# -- consolidate --------------------------------------------------------------------------------------
def consolidate(checkpoint_dir: str, output: str | None = None, *, allow_pickle: bool = False) -> int:
    """Turn a sharded checkpoint directory into one checkpoint (``<dir>.consolidated`` by default).

    Returns the exit status. Example:

    ```python
    consolidate("checkpoints/step_100", "step_100_full")
    ```
    """
    if not os.path.exists(checkpoint_dir):
        sys.stderr.write(f"fabricx consolidate: {checkpoint_dir!r} does not exist.\n")
        return 2
    try:
        from fabricx.checkpoint.consolidate import consolidate_checkpoint
    except ModuleNotFoundError as error:
        if error.name not in ("fabricx.checkpoint.consolidate", "fabricx.checkpoint"):
            raise
        sys.stderr.write(
            "fabricx consolidate: this fabricx has no fabricx.checkpoint.consolidate module, so sharded "
            "checkpoints cannot be consolidated.\n"
        )
        return 1
    from fabricx.utilities.exceptions import CheckpointError

    try:
        opt_in = {"allow_pickle": True} if allow_pickle else {}
        written = consolidate_checkpoint(checkpoint_dir, output, **opt_in)
    except CheckpointError as error:
        sys.stderr.write(f"fabricx consolidate: {error}\n")
        return 1
    print(f"Consolidated {checkpoint_dir} into {written if written is not None else output}")
    return 0


# -- parser ---------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    from fabricx import __version__

    parser = argparse.ArgumentParser(prog="fabricx", description="Run and inspect fabricx training jobs.")
    parser.add_argument("--version", action="version", version=f"fabricx {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{run,env,consolidate,plot}")

    run_parser = commands.add_parser(
        "run",
        help="start a training script on several processes (and nodes) through torchrun",
        description=(
            "Start SCRIPT once per device on this node through torch.distributed.run. The flags reach "
            "Fabric() in the script; a different value given in code is an error."
        ),
    )
    run_parser.set_defaults(command_parser=run_parser)
    run_parser.add_argument(
        "--accelerator",
        default=None,
        help=f"one of {', '.join(_TRAINED_ON)} (fabricx does not support TPU training: tpu is refused)",
    )
    run_parser.add_argument("--strategy", default=None, help="a registry name such as ddp, fsdp, deepspeed")
    run_parser.add_argument(
        "--devices",
        "--nproc-per-node",
        dest="devices",
        default=None,
        help="processes per node: a count, 'auto', -1, or GPU indices like '0,1'",
    )
    run_parser.add_argument(
        "--num-nodes",
        default=None,
        help="how many machines take part: N, or MIN:MAX for an elastic job that continues when nodes leave or join",
    )
    run_parser.add_argument("--node-rank", type=int, default=0, help="this machine's index (0 .. num-nodes - 1)")
    run_parser.add_argument("--main-address", default="127.0.0.1", help="address of the node with rank 0")
    run_parser.add_argument(
        "--main-port",
        type=int,
        default=None,
        help=f"rendezvous port (default: a free port on one node, {DEFAULT_MULTI_NODE_PORT} on several)",
    )
    run_parser.add_argument("--precision", default=None, help="32-true, bf16-mixed, 16-mixed, ...")
    run_parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart the processes up to N times after a failure (or, with --num-nodes MIN:MAX, a membership change)",
    )
    run_parser.add_argument(
        "--run-id", default="fabricx", help="the job's id in the elastic rendezvous (the same on every node)"
    )
    run_parser.add_argument(
        "--rdzv-conf",
        default=None,
        help="elastic rendezvous settings for torchrun, e.g. last_call_timeout=5,join_timeout=120",
    )
    run_parser.add_argument(
        "--as-lightning",
        action="store_true",
        help="serve the script's lightning.pytorch / pytorch_lightning / lightning.fabric imports with fabricx",
    )
    run_parser.add_argument("script", help="the training script")
    run_parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")

    commands.add_parser(
        "env",
        help="print the detected hardware, cluster environment and package versions",
        description=(
            "Print what fabricx detects on this machine: hardware (accelerators, CPU cores, memory), the cluster "
            "environment and ranks, and the versions of fabricx's required and optional packages. Paste it into "
            "bug reports."
        ),
    )

    consolidate_parser = commands.add_parser(
        "consolidate",
        help="turn a sharded checkpoint into one checkpoint",
        description=(
            "Merge a checkpoint saved in shards (FSDP, tensor parallel, DeepSpeed ZeRO) into one whose state "
            "holds full tensors, which one process reads without a process group."
        ),
    )
    consolidate_parser.add_argument("checkpoint_dir", help="the sharded checkpoint directory")
    consolidate_parser.add_argument(
        "-o", "--output", default=None, help="where to write (default: CHECKPOINT_DIR.consolidated)"
    )
    consolidate_parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="unpickle DeepSpeed engine files fully (runs code stored in them: only for files you trust)",
    )

    plot_parser = commands.add_parser(
        "plot",
        help="draw the metrics a CSV logger wrote into a PNG",
        description=(
            "Draw every curve in the metrics.csv files a CSVLogger wrote under RUN_DIR (a resumed run as a "
            "continuation) into one PNG and print its path. Needs matplotlib."
        ),
    )
    plot_parser.add_argument("run_dir", help="a folder with metrics.csv files below it (or one metrics.csv)")
    plot_parser.add_argument("-o", "--output", default=None, help="the PNG to write (default: RUN_DIR/metrics.png)")
    return parser


# -- plot -----------------------------------------------------------------------------------------------
def plot(run_dir: str, output: str | None = None) -> int:
    """Write a PNG of every logged curve under ``run_dir``; print its path.

    Example:
        ```python
        plot("demo_runs")  # prints demo_runs/metrics.png
        ```
    """
    from fabricx.loggers.plot import plot_run

    if not os.path.exists(run_dir):
        print(
            f"fabricx plot: no such directory: {run_dir!r}. Give the folder a run wrote its metrics.csv files "
            "under, e.g. `fabricx plot demo_runs` after `make demo`.",
            file=sys.stderr,
        )
        return 2
    try:
        path = plot_run(run_dir, output)
    except (FileNotFoundError, ValueError, ModuleNotFoundError) as error:
        print(f"fabricx plot: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


__all__ = [
    "RunOptions",
    "build_torchrun_args",
    "collect_environment",
    "consolidate",
    "flag_environment",
    "main",
    "plot",
    "print_environment",
    "processes_per_node",
    "run",
]
