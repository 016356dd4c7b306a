"""The module path that ScalarTensors pickled by earlier versions of tensortools name
(files saved with ``pickle`` or ``torch.save``): unpickling imports it and finds
:class:`tensortools.ScalarTensor`, which lives in :mod:`tensortools.types.scalar`."""

from tensortools.types.scalar import ScalarTensor

__all__ = ["ScalarTensor"]
