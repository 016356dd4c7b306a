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

import importlib

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)
from tensortools.dispatch.results import FRESH_RESULTS

# The LLTM sequence's CUDA path: a setting, not an operator (so not in __all__); importing
# it reads its environment variables.
from tensortools.ops._lltm_sequence_options import (  # noqa: F401
    LLTM_SEQUENCE_MODES,
    LLTMSequenceOptions,
    lltm_sequence_options,
    set_lltm_sequence_options,
)

#: The operator modules, one per operator family: each exports its entry points in its
#: __all__, and they become tensortools.ops.<name> (adding an operator adds its module
#: here, nothing else in this file).
MODULES = ("axpby", "conv_bn2d", "graph_conv", "lltm", "scalar_ops")

__all__: list[str] = []
for _name in MODULES:
    _module = importlib.import_module(f"{__name__}.{_name}")
    for _public in _module.__all__:
        _function = getattr(_module, _public)
        # its public name is tensortools.ops.<name> (records, reprs and docs say so)
        _function.__module__ = __name__
        globals()[_public] = _function
        __all__.append(_public)
__all__.sort()
# (every result of these that is not an argument is a new tensor: see FRESH_RESULTS)
FRESH_RESULTS.update(globals()[name] for name in __all__)
del _name, _module, _public, _function
