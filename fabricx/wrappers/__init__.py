"""Wrappers that keep the user's objects looking like themselves: `module` (FabricModule), `optimizer`
(FabricOptimizer, gated scheduler steps), `step_methods` (a module's `training_step` & co. run through the
strategy's forward). `fabricx.utilities.identity` is the one place that touches user objects' classes (and
`unwrap`): strategies use it too, and import nothing of `wrappers/`."""

from fabricx.utilities.identity import is_wrapped, unwrap
from fabricx.wrappers.module import FabricModule
from fabricx.wrappers.optimizer import FabricOptimizer, wrap_scheduler_step

__all__ = ["FabricModule", "FabricOptimizer", "is_wrapped", "unwrap", "wrap_scheduler_step"]
