"""The Trainer's loops: fit's epochs and batches (`fit.py`), validation, test and prediction passes
(`evaluation.py`), one training step (`training_steps.py`), and the counters they own and checkpoint under
``loops`` (`loop_objects.py`, `progress_trackers.py`, `progress.py`).

Each loop is handed the state it shares with the others (the Trainer's `RunContext`) and reads only the
Trainer's public state. Nothing is re-exported here: import from the module that defines a name.

Example:
    ```python
    trainer.fit(model)
    trainer.fit_loop.epoch_progress.current.completed  # `FitLoop`, defined in fabricx.train.loops.fit
    ```
"""
