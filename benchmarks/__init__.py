"""fabricx benchmarks: each compares against plain PyTorch in the same run (``python -m benchmarks``)."""
