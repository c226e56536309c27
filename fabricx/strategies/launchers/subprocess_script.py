"""Re-running the user's script once per extra local rank, the way torchrun does."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from fabricx.strategies.launchers.launcher import Launcher
from fabricx.utilities.exceptions import FabricxError

_POLL_SECONDS = 0.2


class SubprocessScriptLauncher(Launcher):
    """Starts local ranks 1..N-1 as new interpreters running the same command; this process is rank 0.

    If any rank exits with an error, the others are stopped and this process exits with that code.

    Example::

        Fabric(accelerator="cpu", devices=2, strategy="ddp").launch()  # the script now runs twice
    """

    def __init__(self, cluster_environment: Any, num_processes: int, num_nodes: int) -> None:
        self.cluster_environment = cluster_environment
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        self.children: list[subprocess.Popen] = []
        self._stopping = False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.children:
            self._start_children()
        try:
            return function(*args, **kwargs)
        except BaseException:
            self._stop_children()
            raise

    def _command(self) -> list[str]:
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
        script = sys.argv[0] if sys.argv else ""
        if not script or script == "-c" or not os.path.exists(script):
            raise FabricxError(
                "strategy='ddp' re-runs your script once per process, but this process was not started "
                "from a script file (interactive session or `python -c`). Use strategy='ddp_spawn' with "
                "fabric.launch(fn), or strategy='ddp_notebook' in a notebook."
            )
        return [sys.executable, os.path.abspath(script), *sys.argv[1:]]

    def _start_children(self) -> None:
        env_base = os.environ.copy()
        env_base["MASTER_ADDR"] = self.cluster_environment.main_address
        env_base["MASTER_PORT"] = str(self.cluster_environment.main_port)
        env_base["NODE_RANK"] = str(self.cluster_environment.node_rank())
        env_base["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        env_base["LOCAL_WORLD_SIZE"] = str(self.num_processes)
        command = self._command()
        for local_rank in range(1, self.num_processes):
            env = dict(env_base, LOCAL_RANK=str(local_rank))
            self.children.append(subprocess.Popen(command, env=env, preexec_fn=_die_with_parent))
        atexit.register(self._wait_for_children)
        previous_hook = sys.excepthook

        def excepthook(*exc_info: Any) -> None:
            self._stop_children()
            previous_hook(*exc_info)

        sys.excepthook = excepthook
        threading.Thread(target=self._watch_children, name="fabricx-child-watch", daemon=True).start()

    def _watch_children(self) -> None:
        while not self._stopping:
            for local_rank, child in enumerate(self.children, start=1):
                code = child.poll()
                if code not in (None, 0):
                    sys.stderr.write(
                        f"\nfabricx: local rank {local_rank} (pid {child.pid}) exited with code {code}; "
                        "stopping the other processes of this job.\n"
                    )
                    sys.stderr.flush()
                    self._stop_children()
                    os._exit(code if code > 0 else 1)
            time.sleep(_POLL_SECONDS)

    def _stop_children(self) -> None:
        self._stopping = True
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 5
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()

    def _wait_for_children(self) -> None:
        failed = 0
        for child in self.children:
            code = child.wait()
            if code != 0 and not failed:
                failed = code if code > 0 else 1
        self._stopping = True
        if failed:
            sys.stderr.flush()
            os._exit(failed)


def _die_with_parent() -> None:
    # Linux: a child whose parent is killed gets SIGTERM instead of becoming an orphan.
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)
