"""The Trainer's flags: `TrainerConfig`, Lightning's checks, ``barebones=True``, ``PL_TRAINER_*`` defaults.
Nothing is re-exported: import from the defining module."""
