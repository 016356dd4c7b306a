"""tensortools: custom PyTorch tensor types and fused operators with C++/CUDA kernels.

The compiled operators are registered under ``torch.ops.tensortools`` on import.
"""

from tensortools import dispatch, nn, ops, reference, testing
from tensortools._native import C as _C
from tensortools.types import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs
from tensortools.types.metadata_batch import decollate

__version__ = "0.1.0"

with_cuda: bool = _C.with_cuda
"""Whether this build of tensortools has CUDA kernels."""

__all__ = [
    "ScalarTensor",
    "MetadataTensor",
    "LoggingTensor",
    "capture_logs",
    "decollate",
    "dispatch",
    "nn",
    "ops",
    "reference",
    "testing",
    "with_cuda",
    "__version__",
]
