"""torchdata's ``'set_vital' is deprecated`` warning is silenced only inside fabricx's own loader building.

pytest's configuration ignores that message for the whole suite, so the first test records with ``"always"``
and the second runs a fresh process with ``-W always``: what they see is what a user's shell would show. A
filter installed for the whole process (at import, say) would change the user's filter list and hide the
warning from a ``StatefulDataLoader`` the user builds themselves; both are checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric

SET_VITAL = "'set_vital' is deprecated"


def _dataset() -> TensorDataset:
    return TensorDataset(torch.arange(8.0).unsqueeze(1))


def _messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(warning.message) for warning in caught]


def test_fabric_builds_its_loader_without_torchdatas_deprecation() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters_before = list(warnings.filters)
        loader = fabric.setup_dataloaders(DataLoader(_dataset(), batch_size=2, shuffle=True))
        next(iter(loader))
        warnings.warn("the user's own warning", UserWarning, stacklevel=1)
        filters_after = list(warnings.filters)
    messages = _messages(caught)
    assert not [message for message in messages if SET_VITAL in message], messages
    assert "the user's own warning" in messages, messages
    assert filters_after == filters_before, "building a loader left the warning filters changed"


def test_a_loader_the_user_builds_still_warns() -> None:
    # A fresh process shown every warning (`-W always`), as a user's shell would be: a filter fabricx installed
    # for the whole process, at import or at its own call, would hide torchdata's warning from the user's call.
    script = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torchdata.stateful_dataloader import StatefulDataLoader
        from fabricx import Fabric

        dataset = TensorDataset(torch.arange(8.0).unsqueeze(1))
        Fabric(accelerator="cpu", devices=1).setup_dataloaders(DataLoader(dataset, batch_size=2))
        StatefulDataLoader(dataset, batch_size=2)
        """
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    process = subprocess.run(
        [sys.executable, "-W", "always", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 0, process.stderr[-4000:]
    # Should torchdata stop warning, this fails: then the filter in fabricx/data/loader.py can go too.
    assert process.stderr.count(SET_VITAL) == 1, process.stderr
