def test_train_loop(run_trainings: str) -> None:
    assert run_trainings
