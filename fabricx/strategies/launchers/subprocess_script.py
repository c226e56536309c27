"""Re-running the user's script once per extra local rank, the way torchrun does."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from fabricx.strategies.launchers.launcher import THREADS_ENV, Launcher, default_threads
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.process_group import note_rank_failed

_POLL_SECONDS = 0.2
_STOP_GRACE_SECONDS = 5.0
# Main modules that are not the user's training script: re-running them would not start a rank.
_NOT_A_SCRIPT = ("pytest", "py.test", "ipykernel_launcher", "ipykernel", "IPython", "ipython", "jupyter")


class SubprocessScriptLauncher(Launcher):
    """Starts local ranks 1..N-1 as new interpreters running the same command; this process is rank 0.

    The children get ``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``
    and ``LOCAL_WORLD_SIZE``. If any rank exits with an error (or this one raises), the others are
    stopped and this process exits non-zero; a child whose parent dies is stopped too (Linux).

    Example:
        ```python
        Fabric(accelerator="cpu", devices=2, strategy="ddp").launch()  # the script now runs twice
        ```
    """

    def __init__(self, cluster_environment: Any, num_processes: int, num_nodes: int) -> None:
        self.cluster_environment = cluster_environment
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        self.children: list[subprocess.Popen] = []
        self._stopping = False
        self._lock = threading.Lock()

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.children and self.num_processes > 1:
            self._start_children()
        try:
            return function(*args, **kwargs)
        except BaseException:
            self._stop_children()
            note_rank_failed()  # the stopped ranks will not come to the exit barrier: do not wait there for them
            raise

    def _command(self) -> list[str]:
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        module = spec.name.removesuffix(".__main__") if spec is not None and spec.name else None
        program = os.path.basename(sys.argv[0]) if sys.argv else ""
        runner = module.split(".")[0] if module is not None else program.removesuffix(".exe")
        if runner in _NOT_A_SCRIPT or hasattr(sys, "ps1"):
            raise FabricxError(
                f"strategy='ddp' re-runs your script once per process, but this process runs "
                f"{runner or 'an interactive session'}, not a training script. Use strategy='ddp_spawn' with "
                "fabric.launch(fn), or strategy='ddp_notebook' in a notebook."
            )
        if module is not None and module != "__main__":
            return [sys.executable, "-m", module, *sys.argv[1:]]
        script = sys.argv[0] if sys.argv else ""
        if not script or script == "-c" or not os.path.exists(script):
            raise FabricxError(
                "strategy='ddp' re-runs your script once per process, but this process was not started "
                "from a script file (interactive session or `python -c`). Use strategy='ddp_spawn' with "
                "fabric.launch(fn), or strategy='ddp_notebook' in a notebook."
            )
        return [sys.executable, os.path.abspath(script), *sys.argv[1:]]

    def _start_children(self) -> None:
        command = self._command()
        env_base = os.environ.copy()
        env_base["MASTER_ADDR"] = self.cluster_environment.main_address
        env_base["MASTER_PORT"] = str(self.cluster_environment.main_port)
        env_base["NODE_RANK"] = str(self.cluster_environment.node_rank())
        env_base["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        env_base["LOCAL_WORLD_SIZE"] = str(self.num_processes)
        threads = default_threads(self.num_processes, announce=self.cluster_environment.node_rank() == 0)
        if threads is not None:
            env_base[THREADS_ENV] = str(threads)
            # Only lowered: a smaller count set before launch() is the user's, which the re-run script sets again.
            torch.set_num_threads(min(threads, torch.get_num_threads()))
        _load_libc()
        for local_rank in range(1, self.num_processes):
            env = dict(env_base, LOCAL_RANK=str(local_rank))
            self.children.append(subprocess.Popen(command, env=env, preexec_fn=_die_with_parent))
        # This process is local rank 0 now: a later Fabric(...) here joins the job instead of relaunching.
        for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            os.environ[name] = env_base[name]
        os.environ["LOCAL_RANK"] = "0"
        atexit.register(self._wait_for_children)
        previous_hook = sys.excepthook

        def excepthook(*exc_info: Any) -> None:
            self._stop_children()
            previous_hook(*exc_info)

        sys.excepthook = excepthook
        threading.Thread(target=self._watch_children, name="fabricx-child-watch", daemon=True).start()

    def _watch_children(self) -> None:
        while not self._stopping:
            for child in self.children:
                code = child.poll()
                if code not in (None, 0) and not self._stopping:
                    self._stop_children()  # says which rank failed
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()  # os._exit skips the interpreter's own flushing
                    os._exit(code if code > 0 else 1)
            time.sleep(_POLL_SECONDS)

    def _stop_children(self) -> None:
        with self._lock:
            first = not self._stopping
            self._stopping = True
            dead_before = [child.poll() not in (None, 0) for child in self.children]
            for child in self.children:
                if child.poll() is None:
                    child.terminate()
            deadline = time.monotonic() + _STOP_GRACE_SECONDS
            for child in self.children:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            if first:
                self._report_failed_children(dead_before)

    def _report_failed_children(self, dead_before: list[bool]) -> None:
        """Name each rank that died on its own (a SIGKILLed rank prints nothing itself).

        Also when this process noticed first, through a failed collective, while the rank was still
        dying: then it ends by a signal other than the SIGTERM sent here. The real stderr: torch's
        excepthook swaps ``sys.stderr`` for a buffer, which is lost if the watcher thread exits first.
        """
        stderr = sys.__stderr__ or sys.stderr
        for local_rank, (child, was_dead) in enumerate(zip(self.children, dead_before, strict=True), start=1):
            code = child.returncode
            if code in (None, 0) or not (was_dead or (code < 0 and code != -signal.SIGTERM)):
                continue
            how = f" ({signal.Signals(-code).name})" if -code in signal.valid_signals() else ""
            stderr.write(
                f"\nfabricx: local rank {local_rank} (pid {child.pid}) exited with code {code}{how}; "
                "the other processes of this job were stopped.\n"
            )
        stderr.flush()

    def _wait_for_children(self) -> None:
        failed = 0
        for child in self.children:
            code = child.wait()
            if code != 0 and not failed:
                failed = code if code > 0 else 1
        self._stopping = True
        if failed:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(failed)


_LIBC: Any = None


def _load_libc() -> None:
    # Loaded before forking: a dlopen between fork and exec could wait on a lock held by another thread.
    global _LIBC
    if _LIBC is None and sys.platform.startswith("linux"):
        try:
            _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:
            _LIBC = False


def _die_with_parent() -> None:
    # Linux: a child whose parent dies gets SIGTERM instead of living on as an orphan.
    if _LIBC:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
