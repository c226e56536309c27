"""Hugging Face Accelerate's API over `fabricx.Fabric`: a script switches with one import line.

```python
from fabricx.compat.accelerate import Accelerator  # instead of: from accelerate import Accelerator
```

The package's modules, one job each: `accelerator` (the `Accelerator` class), `config` (plugins and
configuration objects), `process` (`PartialState`, `AcceleratorState`), `data` (prepared data loaders),
`sharding` and `elastic` (how batches are dealt over processes, and dealt again at another process count),
`collectives` and `ops` (gather, reduce, broadcast), `state` (`save_state`/`load_state`), `io` (`save`,
`save_model`), `tracking` (`init_trackers`, `log`), `dynamo` (`TorchDynamoPlugin`).
"""

from fabricx.compat.accelerate.accelerator import *  # noqa: F403 - the public names, listed in its __all__
from fabricx.compat.accelerate.accelerator import __all__ as __all__
