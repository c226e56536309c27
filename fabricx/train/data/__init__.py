"""Where the Trainer's loaders come from (call, `DataModule`, module hooks), their set-up and counting,
`CombinedLoader`, the batch-transfer hooks. Nothing is re-exported: import from the defining module."""
