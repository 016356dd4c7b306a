"""ScalarTensor, the N×N matrix ``value * I_N`` stored as N and a value, and its handlers.

Its modules, each importing only those above it in this list:

- ``small``: what the class's fallback and the handlers read without the class: the
  small matrix ``value * I_k`` (k <= 2) and its index tensors, torch.func's questions
  (``hidden``, ``transforms_active``), the dense arguments of a call (``densify``);
- ``in_place``: the fallback (dense calls) and the rules of calls that change a
  ScalarTensor, with the Python ``__torch_function__``; it knows a ScalarTensor by the
  class it is called for;
- ``tensor``: the class, complete when this module has run (its body takes
  ``in_place``'s fallback and ``__torch_function__``), its storage (N and the pair
  ``[value, 0]``), pickling, the compiled ``__torch_function__`` entry and its record
  (:class:`FastCode`, :class:`FastRecord`);
- ``common``: what the handler families share: registration (``structured``), the pair
  the handlers compute on, range checks, the one-pass kernels;
- the families, each registering its handlers on the class when imported:
  ``arithmetic`` (add, sub, mul, div, neg, matmul), ``elementwise`` (functions with
  f(0) = 0), ``reductions`` (sums, extremes, trace), ``closed_forms`` (mean, var, std,
  logsumexp, norms), ``linalg`` (det, inverse, eigenvalues, solve, ...), ``queries``
  (numel, stride, conversions, views, diagonals, transposes), ``operators``
  (tensortools.ops: lltm, graph_conv, axpby, scale, add_diagonal);
- ``fast_path``: the calls csrc/python/scalar_dispatch.cpp answers in C, as the
  families' handlers do.
"""

from tensortools.types.scalar import (  # noqa: F401  (each registers on the class)
    arithmetic,
    closed_forms,
    elementwise,
    fast_path,
    linalg,
    operators,
    queries,
    reductions,
)
from tensortools.types.scalar.tensor import FastCode, FastRecord, ScalarTensor, densify

__all__ = ["ScalarTensor", "FastCode", "FastRecord", "densify"]
