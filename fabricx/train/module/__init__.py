"""`TrainModule`, its default hooks, finding and calling hooks, hyper-parameters, TorchScript/ONNX export.
Nothing is re-exported: import from the defining module."""
