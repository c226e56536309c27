"""Trainer callbacks: checkpointing, early stopping, learning-rate logging, progress and summary."""

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.early_stopping import EarlyStopping
from fabricx.train.callbacks.lr_monitor import LearningRateMonitor
from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint
from fabricx.train.callbacks.model_summary import RichModelSummary
from fabricx.train.callbacks.progress_bar import RichProgressBar
from fabricx.train.callbacks.throughput import ThroughputMonitor

__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "RichModelSummary",
    "RichProgressBar",
    "ThroughputMonitor",
]
