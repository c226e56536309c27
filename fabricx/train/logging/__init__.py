"""What ``self.log`` records (`ResultCollection`), which hooks may log, and the Trainer's metric dicts.
Nothing is re-exported: import from the defining module."""
