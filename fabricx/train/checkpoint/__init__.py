"""The Trainer's checkpoints, one connector (as Lightning's ``trainer/connectors/checkpoint_connector.py``).

* `connector`: `CheckpointConnector`: what ``Trainer.save_checkpoint`` writes, and resuming a fit: select the
  path → ``resume_start`` (reads it once on this rank) → ``restore_*`` → ``resume_end`` (drops the read).
* `ckpt_path`: which checkpoint ``fit``/``validate``/``test``/``predict`` take for their ``ckpt_path``.
* `entries`: the stateful entries a Trainer checkpoint holds (progress, callbacks, metrics, loops, ...) and
  `checkpoint_state`, the whole state a save hands the checkpointer.
* `lightning_files`: Lightning's ``.ckpt`` keys, hyper-parameters, and building a module from a file.

Every read and write goes through ``trainer.fabric.checkpointer``.
"""
