"""Experiment loggers with Lightning's interface: CSV files, TensorBoard, MLflow and Weights & Biases."""

from fabricx.loggers.base import Logger
from fabricx.loggers.csv_logs import CSVLogger
from fabricx.loggers.dummy import DummyLogger
from fabricx.loggers.mlflow import MLFlowLogger
from fabricx.loggers.tensorboard import TensorBoardLogger
from fabricx.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "DummyLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
