"""Experiment loggers with Lightning Fabric's interface: CSV files and TensorBoard."""

from fabricx.loggers.base import Logger
from fabricx.loggers.csv_logs import CSVLogger
from fabricx.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
