"""The environment for processes started by SLURM's ``srun``."""

from __future__ import annotations

import itertools
import os
import re

from fabricx.environments.base import ExternalEnvironment, int_env, port_from_job_id
from fabricx.utilities.exceptions import MisconfigurationError

_INTERACTIVE_JOB_NAMES = ("bash", "interactive")
_DEFAULT_PORT = 12910


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand SLURM's compressed host list into host names, in order.

    Example:
        ```python
        expand_hostlist("node[01-03,07],gpu5")
        # ['node01', 'node02', 'node03', 'node07', 'gpu5']
        ```
    """
    hosts: list[str] = []
    for item in _split_top_level(nodelist):
        hosts.extend(_expand_item(item))
    return hosts


def _split_top_level(text: str) -> list[str]:
    # Commas inside brackets separate ranges, not hosts.
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str) -> list[str]:
    # "rack[1-2]-n[3,5]" holds several bracket groups: the hosts are their cartesian product.
    parts = re.split(r"(\[[^\]]*\])", item)
    if any(part.count("[") != part.count("]") or ("[" in part) != part.startswith("[") for part in parts):
        raise ValueError(f"Cannot parse the SLURM host list entry {item!r}: its brackets do not match.")
    choices = [_expand_range(part[1:-1]) if part.startswith("[") else [part] for part in parts]
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_range(spec: str) -> list[str]:
    values: list[str] = []
    for piece in spec.split(","):
        piece = piece.strip()
        if "-" in piece:
            low, high = piece.split("-", 1)
            # Zero padding of the lower bound ("01-10") is kept for every number in the range.
            width = len(low)
            values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
        elif piece:
            values.append(piece)
    return values


class SLURMEnvironment(ExternalEnvironment):
    """Reads ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID`` and the node list.

    The main address is the first host of ``SLURM_NODELIST``; the port is derived from
    ``SLURM_JOB_ID``. ``MASTER_ADDR`` and ``MASTER_PORT`` override both.

    Example:
        ```python
        # sbatch: #SBATCH --nodes=2 --ntasks-per-node=4 ; srun python train.py
        env = SLURMEnvironment()
        env.validate_settings(num_devices=4, num_nodes=2)
        ```
    """

    world_size_variable = "SLURM_NTASKS"
    global_rank_variable = "SLURM_PROCID"
    local_rank_variable = "SLURM_LOCALID"

    def launcher_main_address(self) -> str:
        nodelist = os.environ.get("SLURM_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
        if not nodelist:
            return "127.0.0.1"
        return expand_hostlist(nodelist)[0]

    def launcher_main_port(self) -> int:
        return port_from_job_id(os.environ.get("SLURM_JOB_ID"), _DEFAULT_PORT)

    @staticmethod
    def detect() -> bool:
        if "SLURM_NTASKS" not in os.environ:
            return False
        if os.environ.get("SLURM_JOB_NAME") not in _INTERACTIVE_JOB_NAMES:
            return True
        # In an interactive allocation only an srun step with several tasks is a SLURM launch; a single
        # shell step (`srun --pty bash`) leaves fabricx free to start its own processes.
        if "SLURM_STEP_ID" not in os.environ:
            return False
        return int_env("SLURM_STEP_NUM_TASKS", int_env("SLURM_NTASKS")) > 1

    def node_rank(self) -> int:
        return int_env("SLURM_NODEID")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        per_node = os.environ.get("SLURM_NTASKS_PER_NODE", "")
        if per_node.isdigit() and int(per_node) != num_devices:
            raise MisconfigurationError(
                f"SLURM started {per_node} tasks per node (--ntasks-per-node={per_node}) but fabricx was"
                f" given devices={num_devices}. Set devices={per_node}, or submit with"
                f" --ntasks-per-node={num_devices}."
            )
        nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or ""
        if nodes.isdigit() and int(nodes) != num_nodes:
            raise MisconfigurationError(
                f"SLURM allocated {nodes} nodes (--nodes={nodes}) but fabricx was given"
                f" num_nodes={num_nodes}. Set num_nodes={nodes}, or submit with --nodes={num_nodes}."
            )
        self.check_world_size(
            num_devices,
            num_nodes,
            started="SLURM started {world_size} tasks (SLURM_NTASKS={world_size})",
            fix=f"Submit with --nodes={num_nodes} --ntasks-per-node={num_devices}, or change devices and"
            " num_nodes to match the allocation.",
        )
