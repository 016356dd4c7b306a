"""tensortools' tensor types, each on the dispatch base of :mod:`tensortools.dispatch`."""

from tensortools.types.logging_tensor import CallStats, CapturedLogs, LoggingTensor, capture_logs
from tensortools.types.metadata import MetadataTensor, collate, decollate
from tensortools.types.scalar import ScalarTensor

__all__ = [
    "ScalarTensor",
    "MetadataTensor",
    "LoggingTensor",
    "capture_logs",
    "CapturedLogs",
    "CallStats",
    "collate",
    "decollate",
]
