"""Ported Lightning Trainer tests fabricx does not pass yet, each a strict xfail with its reason.

Regenerate with `python tests/conformance/trainer/update_gaps.py --write` (keeps reasons written here).
A reason starting with 'deliberate difference' is a row of docs/migrating/lightning-trainer.md.
"""

KNOWN_GAPS: dict[str, str] = {
    'test_automatic_loop.py::test_skip_training_step_not_allowed[1]': 'deliberate difference (docs/migrating/lightning-trainer.md): `strategy.world_size` is read-only (read from the process group), so the test cannot fake two processes',
    'test_automatic_loop.py::test_skip_training_step_not_allowed[2]': 'deliberate difference (docs/migrating/lightning-trainer.md): `strategy.world_size` is read-only (read from the process group), so the test cannot fake two processes',
    'test_datamodules.py::test_datamodule_hooks_are_profiled': "not yet conformant: AttributeError: 'SimpleProfiler' object has no attribute 'recorded_durations'",
    'test_env_vars.py::test_passing_env_variables_devices': "not yet conformant: AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
    'test_hooks.py::test_trainer_datamodule_hook_system': "not yet conformant: AssertionError: assert [{'name': 'pr...]]), 0)}, ...] == [{'name': 'pr...age': 'fit'}}]",
    'test_hooks.py::test_trainer_model_hook_system_fit[False-False-kwargs0]': "deliberate difference (docs/migrating/lightning-trainer.md): the checkpoint's `pytorch-lightning_version` is the installed Lightning's version, not fabricx's (the port swapped the import); with it the hook order is Lightning's",
    'test_hooks.py::test_trainer_model_hook_system_fit[False-True-kwargs0]': "deliberate difference (docs/migrating/lightning-trainer.md): the checkpoint's `pytorch-lightning_version` is the installed Lightning's version, not fabricx's (the port swapped the import); with it the hook order is Lightning's",
    'test_hooks.py::test_trainer_model_hook_system_fit[True-False-kwargs0]': "deliberate difference (docs/migrating/lightning-trainer.md): the checkpoint's `pytorch-lightning_version` is the installed Lightning's version, not fabricx's (the port swapped the import); with it the hook order is Lightning's",
    'test_hooks.py::test_trainer_model_hook_system_fit[True-True-kwargs0]': "deliberate difference (docs/migrating/lightning-trainer.md): the checkpoint's `pytorch-lightning_version` is the installed Lightning's version, not fabricx's (the port swapped the import); with it the hook order is Lightning's",
    'test_hooks.py::test_trainer_model_hook_system_fit_no_val_and_resume_max_epochs': "not yet conformant: AssertionError: assert [{'name': 'co...mizers'}, ...] == [{'name': 'co... ...},)}, ...]",
    'test_hooks.py::test_trainer_model_hook_system_fit_no_val_and_resume_max_steps': "not yet conformant: AssertionError: assert [{'name': 'co...mizers'}, ...] == [{'name': 'co... ...},)}, ...]",
    'test_hooks.py::test_trainer_model_hook_system_predict': "not yet conformant: AssertionError: assert [{'name': 'co...loader'}, ...] == [{'name': 'co...o_grad'}, ...]",
    'test_lightning_module.py::test_lightning_module_scriptable': 'not yet conformant: RuntimeError: ',
    'test_logger_connector.py::test_fx_validator_integration': 'not yet conformant: Failed: DID NOT RAISE MisconfigurationException',
    'test_logger_connector.py::test_metriccollection_compute_groups[True]': 'not yet conformant: assert True != True',
    'test_loops.py::test_workers_are_shutdown[False-False]': "deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of torch's private `_shutdown_workers` on the iterators of a DataLoader subclass overriding the private `_get_iterator`; fabricx rebuilds such a loader as a `StatefulDataLoader` (exact resume) and calls no private DataLoader method",
    'test_loops.py::test_workers_are_shutdown[False-True]': "deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of torch's private `_shutdown_workers` on the iterators of a DataLoader subclass overriding the private `_get_iterator`; fabricx rebuilds such a loader as a `StatefulDataLoader` (exact resume) and calls no private DataLoader method",
    'test_loops.py::test_workers_are_shutdown[True-False]': "deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of torch's private `_shutdown_workers` on the iterators of a DataLoader subclass overriding the private `_get_iterator`; fabricx rebuilds such a loader as a `StatefulDataLoader` (exact resume) and calls no private DataLoader method",
    'test_loops.py::test_workers_are_shutdown[True-True]': "deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of torch's private `_shutdown_workers` on the iterators of a DataLoader subclass overriding the private `_get_iterator`; fabricx rebuilds such a loader as a `StatefulDataLoader` (exact resume) and calls no private DataLoader method",
    'test_manual_optimization.py::test_multiple_optimizers_manual_call_counts[kwargs0]': 'deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of a patched `Strategy.backward`; where neither strategy nor precision changes backward, fabricx calls `loss.backward()` directly',
    'test_manual_optimization.py::test_multiple_optimizers_manual_log': 'deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of a patched `Strategy.backward`; where neither strategy nor precision changes backward, fabricx calls `loss.backward()` directly',
    'test_manual_optimization.py::test_step_with_optimizer_closure_2': 'deliberate difference (docs/migrating/lightning-trainer.md): the test counts calls of a patched `Strategy.backward`; where neither strategy nor precision changes backward, fabricx calls `loss.backward()` directly',
    'test_manual_optimization.py::test_step_with_optimizer_closure_with_different_frequencies': "not yet conformant: AssertionError: assert [call(optim='...(optim='sgd')] == [call(closure... optim='sgd')]",
    'test_trainer.py::test_model_checkpoint_options[CASE K=-1  (all)]': 'not yet conformant: AssertionError: Should save 5 models when save_top_k=-1 but found=set()',
    'test_trainer.py::test_model_checkpoint_options[CASE K=1 (2.5, epoch 4)]': 'not yet conformant: AssertionError: Should save 1 models when save_top_k=1 but found=set()',
    'test_trainer.py::test_model_checkpoint_options[CASE K=1 (save the 4th model and the last model)]': 'not yet conformant: AssertionError: Should save 2 models when save_top_k=1 but found=set()',
    'test_trainer.py::test_model_checkpoint_options[CASE K=2 (2.5 epoch 4, 2.8 epoch 2)]': 'not yet conformant: AssertionError: Should save 2 models when save_top_k=2 but found=set()',
    'test_trainer.py::test_model_checkpoint_options[CASE K=3 (save the 2nd, 3rd, 4th model)]': 'not yet conformant: AssertionError: Should save 3 models when save_top_k=3 but found=set()',
    'test_trainer.py::test_model_checkpoint_options[CASE K=4 (save all 4 base)]': 'not yet conformant: AssertionError: Should save 4 models when save_top_k=4 but found=set()',
    'test_trainer.py::test_spawn_predict_return_predictions': "deliberate difference (docs/migrating/lightning-trainer.md): predict(return_predictions=True) under ddp_spawn returns rank 0's predictions instead of refusing",
    'test_trainer.py::test_train_loop_system': "not yet conformant: AssertionError: assert ['training_st...ro_grad', ...] == ['step', 'tra...ng_step', ...]",
    'test_trainer_checkpoint.py::test_finetuning_with_ckpt_path': "deliberate difference (docs/migrating/lightning-trainer.md): the Trainer's default ModelCheckpoint keeps last.ckpt, so its best_model_path is .../last.ckpt, not epoch=N-step=M.ckpt",
    'test_training_loop.py::test_progress_bar_steps[10]': 'deliberate difference (docs/migrating/lightning-trainer.md): the default progress bar is RichProgressBar, which has no tqdm `train_progress_bar`',
    'test_training_loop.py::test_progress_bar_steps[15]': 'deliberate difference (docs/migrating/lightning-trainer.md): the default progress bar is RichProgressBar, which has no tqdm `train_progress_bar`',
    'test_training_loop.py::test_tqdm_total_steps_with_iterator_no_length[20]': 'deliberate difference (docs/migrating/lightning-trainer.md): the default progress bar is RichProgressBar, which has no tqdm `train_progress_bar`',
    'test_training_loop.py::test_tqdm_total_steps_with_iterator_no_length[7]': 'deliberate difference (docs/migrating/lightning-trainer.md): the default progress bar is RichProgressBar, which has no tqdm `train_progress_bar`',
}
