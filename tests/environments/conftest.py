"""Every environment test starts with no cluster variables from the machine it runs on."""

from __future__ import annotations

import os

import pytest

_PREFIXES = ("SLURM_", "LSB_", "JSM_", "OMPI_", "PMI_", "TORCHELASTIC_")
_NAMES = (
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK",
    "LOCAL_WORLD_SIZE", "KUBERNETES_PORT",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)
