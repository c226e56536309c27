"""The Trainer's optimizers: what ``configure_optimizers`` returned turned into optimizers and scheduler
configurations, the optimizer ``self.optimizers()`` returns, and gradient clipping.

Nothing is re-exported here: import from the module that defines a name.
"""
