"""``torch.nn`` modules over tensortools' fused operators.

One module per kind of layer, each exported here (``tensortools.nn.LLTM``): ``lltm``
(:class:`LLTM`, :class:`LLTMSequence`), ``graph_conv`` (:class:`GraphConv`),
``conv_bn2d`` (:class:`FusedConvBN2d`) and ``sync_conv_bn2d``
(:class:`SyncFusedConvBN2d`, :func:`convert_sync_fused`); ``_checks`` holds the checks of
their constructor arguments.
"""

from tensortools.nn.conv_bn2d import FusedConvBN2d
from tensortools.nn.graph_conv import GraphConv
from tensortools.nn.lltm import LLTM, LLTMSequence
from tensortools.nn.sync_conv_bn2d import SyncFusedConvBN2d, convert_sync_fused

__all__ = [
    "FusedConvBN2d",
    "GraphConv",
    "LLTM",
    "LLTMSequence",
    "SyncFusedConvBN2d",
    "convert_sync_fused",
]
