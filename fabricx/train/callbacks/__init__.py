"""Trainer callbacks: checkpointing, early stopping, learning-rate logging, progress, summary, fine-tuning,
weight averaging (SWA, EMA), timing, device statistics and an accumulation schedule."""

from fabricx.train.callbacks.base import Callback, Checkpoint
from fabricx.train.callbacks.device_stats_monitor import DeviceStatsMonitor
from fabricx.train.callbacks.early_stopping import EarlyStopping
from fabricx.train.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from fabricx.train.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from fabricx.train.callbacks.lambda_function import LambdaCallback
from fabricx.train.callbacks.lr_monitor import LearningRateMonitor
from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint
from fabricx.train.callbacks.model_summary import ModelSummary, RichModelSummary
from fabricx.train.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
from fabricx.train.callbacks.prediction_writer import BasePredictionWriter
from fabricx.train.callbacks.progress import ProgressBar
from fabricx.train.callbacks.progress_bar import RichProgressBar
from fabricx.train.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from fabricx.train.callbacks.throughput import ThroughputMonitor
from fabricx.train.callbacks.timer import Timer
from fabricx.train.callbacks.tqdm_progress import TQDMProgressBar
from fabricx.train.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "WeightAveraging",
]
