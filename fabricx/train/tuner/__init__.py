"""The Tuner: ``lr_find`` (a learning-rate range test) and ``scale_batch_size`` (the largest batch that fits)."""

from fabricx.train.tuner.lr_finder import LRFinder
from fabricx.train.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner"]
