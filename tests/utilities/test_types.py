"""``fabricx.utilities.types``: structural optimizer types and torch's scheduler base, for annotating a loop; and the
package attributes a Lightning-style script reaches without importing (``fabricx.utilities.types``,
``fabricx.strategies.fsdp``, ``fabricx.utilities.rank_zero_warn``)."""

from __future__ import annotations

import subprocess
import sys

import torch

from fabricx import Fabric
from fabricx.utilities.types import LRScheduler, Optimizable, ReduceLROnPlateau, Steppable


def test_optimizers_are_optimizable_and_other_objects_are_not():
    model = torch.nn.Linear(2, 2)
    for optimizer in (torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.Adam(model.parameters())):
        assert isinstance(optimizer, Optimizable)
        assert isinstance(optimizer, Steppable)
    _, set_up = Fabric(accelerator="cpu").setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(set_up, Optimizable)
    scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=0.1), 1)
    for other in ({"optimizer": None}, model, [1], scheduler):
        assert not isinstance(other, Optimizable), type(other)
    assert isinstance(scheduler, Steppable)  # a scheduler steps, but is no optimizer


def test_schedulers_are_torchs_scheduler_classes():
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    assert LRScheduler is torch.optim.lr_scheduler.LRScheduler
    assert ReduceLROnPlateau is torch.optim.lr_scheduler.ReduceLROnPlateau
    assert isinstance(torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), LRScheduler)
    assert not isinstance(optimizer, LRScheduler)


def test_package_modules_and_rank_zero_helpers_are_attributes_without_an_import():
    # A fresh interpreter: in this one other tests have imported the modules already.
    code = (
        "import sys, fabricx\n"
        "assert 'fabricx.strategies.fsdp' not in sys.modules and 'fabricx.utilities.types' not in sys.modules\n"
        "import torch\n"
        "assert fabricx.utilities.types.LRScheduler is torch.optim.lr_scheduler.LRScheduler\n"
        "from fabricx.strategies import FSDPStrategy\n"
        "assert fabricx.strategies.fsdp.FSDPStrategy is FSDPStrategy\n"
        "from fabricx.utilities.rank_zero import rank_zero_warn\n"
        "assert fabricx.utilities.rank_zero_warn is rank_zero_warn\n"
        "for package, name in ((fabricx.utilities, 'no_such_module'), (fabricx.strategies, 'nothing')):\n"
        "    try:\n"
        "        getattr(package, name)\n"
        "    except AttributeError as error:\n"
        "        assert name in str(error), error\n"
        "    else:\n"
        "        raise SystemExit(f'{name} did not raise')\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_submodule_finds_modules_and_never_private_ones():
    import fabricx.strategies
    from fabricx.utilities.imports import submodule

    assert submodule("fabricx", "strategies") is fabricx.strategies
    assert submodule("fabricx", "no_such_module") is None
    assert submodule("fabricx", "_compat") is None  # exists, but private names stay unreachable this way
