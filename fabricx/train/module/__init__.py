"""The module side of the Trainer: `TrainModule` and its default hooks, finding and calling the hooks a module
and its callbacks define, hyper-parameters, and TorchScript/ONNX export.

Nothing is re-exported here: import from the module that defines a name
(``from fabricx.train.module.module import TrainModule``; users write ``from fabricx.train import TrainModule``).
"""
