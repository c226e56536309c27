"""``configure_optimizers`` parsed, the optimizer ``self.optimizers()`` returns, gradient clipping.
Nothing is re-exported: import from the defining module."""
