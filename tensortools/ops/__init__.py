"""tensortools' fused operators, as Python functions over ``torch.ops.tensortools``.

One module per operator, as in ``csrc/ops/``: its entry point and, where Python registers
it, its autograd formula. Each function is overridable: when an argument defines
``__torch_function__`` the call goes through :func:`torch.overrides.handle_torch_function`,
so tensor-like types can intercept it. The argument checks and output shapes live once,
in C++: the CPU, CUDA and meta kernels (the last is what meta tensors and
``torch.compile`` see) call the same check and allocation functions, so they accept and
refuse the same calls alike. The entry points here check only what C++ cannot see: the
Python types of the arguments, and layouts that no kernel is registered for.
"""

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)
from tensortools.ops.axpby import axpby
from tensortools.ops.conv_bn2d import fused_conv_bn2d
from tensortools.ops.graph_conv import graph_conv
from tensortools.ops.lltm import lltm, lltm_sequence
from tensortools.ops.scalar_ops import add_diagonal, scale

__all__ = [
    "add_diagonal",
    "axpby",
    "fused_conv_bn2d",
    "graph_conv",
    "lltm",
    "lltm_sequence",
    "scale",
]

# Their public name is tensortools.ops.<name> (records, reprs and docs say so), wherever
# their module is.
for _function in (add_diagonal, axpby, fused_conv_bn2d, graph_conv, lltm, lltm_sequence, scale):
    _function.__module__ = __name__
del _function
