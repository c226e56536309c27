"""The Trainer's data: where a stage's loaders come from (the call, the `DataModule`, the module's hooks), how they
are set up on the Fabric and counted under the ``limit_*_batches`` flags, `CombinedLoader`, and the batch-transfer
hooks.

Nothing is re-exported here: import from the module that defines a name
(``from fabricx.train.data.datamodule import DataModule``; users write ``from fabricx.train import DataModule``).
"""
