"""Stateful data loading, distributed sampling and device transfer."""

from fabricx.data.loader import FabricDataLoader, build_stateful_loader
from fabricx.data.sampler import DistributedSamplerWrapper

__all__ = ["DistributedSamplerWrapper", "FabricDataLoader", "build_stateful_loader"]
