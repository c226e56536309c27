"""Launchers: re-running the script per rank, or spawning/forking processes."""

from fabricx.strategies.launchers.launcher import Launcher

__all__ = ["Launcher"]
