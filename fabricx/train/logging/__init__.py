"""What ``self.log`` records and where it goes: the per-loop `ResultCollection`, the hooks that may log,
and the Trainer's ``callback_metrics``/``logged_metrics``/``progress_bar_metrics``.

Nothing is re-exported here: import from the module that defines a name.
"""
