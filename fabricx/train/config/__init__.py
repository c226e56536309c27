"""The Trainer's flags: `TrainerConfig` (every flag checked once), the checks Lightning applies to them,
``barebones=True`` and the ``PL_TRAINER_*`` environment defaults.

Nothing is re-exported here: import from the module that defines a name
(``from fabricx.train.config.trainer_config import TrainerConfig``).
"""
