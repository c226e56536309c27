"""The TPU's type from torch_xla's private ``_internal.tpu`` module (only importable on a TPU host)."""

from __future__ import annotations

import importlib


def tpu_type() -> str:
    """The TPU generation this host has, e.g. ``"v4"`` (torch_xla must be installed)."""
    tpu = importlib.import_module("torch_xla._internal.tpu")  # optional: only on TPU machines
    env = tpu.get_tpu_env()
    # Not every generation sets TYPE; ACCELERATOR_TYPE looks like "v4-8".
    return str(env.get("TYPE") or env["ACCELERATOR_TYPE"].split("-")[0])
