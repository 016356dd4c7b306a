"""The calls that ``csrc/python/scalar_dispatch.cpp`` answers in C, listed in one place.

That file answers each kind of call (a :class:`FastCode`, which it defines and exports)
as the Python handler registered for the function does, and hands every other call to
the Python path. This module marks, for each function listed below, the handler object
its table entry holds (and every alias holding that same object) with its code; the class
record ``ScalarTensor._fast`` then lists exactly the functions whose entry is still that
handler (a subclass that registers its own takes the Python path for it).

Adding a call to the fast path is one entry here and its case in ``fast()`` of
scalar_dispatch.cpp, whose header names this list.

See Note [The compiled paths] in docs/design.md.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tensortools import ops
from tensortools.types.scalar import (  # noqa: F401  (the families whose handlers it marks)
    arithmetic,
    closed_forms,
    linalg,
    operators,
    reductions,
)
from tensortools.types.scalar.elementwise import ELEMENTWISE, flags_of
from tensortools.types.scalar.tensor import FastCode, ScalarTensor

__all__ = ["ANSWERED_IN_C"]

#: FastCode -> the functions whose handlers the compiled path mirrors for it:
#: ELEMENTWISE an elementwise function of d with numbers, None and False (elementwise,
#: and neg of arithmetic); FLAGGED one with the flags inplace or training, passed by
#: keyword and off; SUM the whole sum (reductions); FROBENIUS the norms' whole-matrix
#: Frobenius form (closed_forms); EIGVALS, EIGVALSH, SVDVALS without further arguments
#: (linalg); ADD, SUB, MUL, DIV, MATMUL the two-operand calls arithmetic answers with
#: a structured result, where its operands are ScalarTensors of one N or (mul, div) one
#: ScalarTensor and a Python number (the reflected forms that swap operands, __rsub__,
#: __rtruediv__, __rmatmul__, have handlers of their own and take the Python path);
#: SCALE, ADD_DIAGONAL, AXPBY, LLTM, GRAPH_CONV as _OPERATORS below says.
ANSWERED_IN_C: dict[FastCode, tuple[Callable, ...]] = {
    FastCode.ELEMENTWISE: (torch.neg, *(f for f in ELEMENTWISE if not flags_of(f))),
    FastCode.FLAGGED: tuple(f for f in ELEMENTWISE if flags_of(f)),
    FastCode.SUM: (torch.sum,),
    FastCode.FROBENIUS: (
        torch.norm,
        torch.linalg.norm,
        torch.linalg.vector_norm,
        torch.linalg.matrix_norm,
    ),
    FastCode.EIGVALS: (torch.linalg.eigvals,),
    FastCode.EIGVALSH: (torch.linalg.eigvalsh,),
    FastCode.SVDVALS: (torch.linalg.svdvals,),
}
_ARITHMETIC = {
    "ADD": (torch.add,),
    "SUB": (torch.sub,),
    "MUL": (torch.mul,),
    "DIV": (torch.div,),
    "MATMUL": (torch.matmul, torch.mm),
}
#: SCALE, ADD_DIAGONAL, AXPBY, LLTM, GRAPH_CONV: tensortools.ops that operators.py answers
#: without the dense matrix (scale and add_diagonal of d, axpby of d and e: the kernels on
#: their pairs; lltm of d as the input, graph_conv of d as the adjacency, with plain
#: tensors asking nothing of autograd: its kernels on the scaled slices and the products).
#: csrc/python/scalar_operators.h says which calls exactly.
_OPERATORS = {
    "SCALE": (ops.scale,),
    "ADD_DIAGONAL": (ops.add_diagonal,),
    "AXPBY": (ops.axpby,),
    "LLTM": (ops.lltm,),
    "GRAPH_CONV": (ops.graph_conv,),
}
# (an extension built before these codes has none: those calls take the Python path)
ANSWERED_IN_C.update(
    {
        FastCode[name]: funcs
        for name, funcs in {**_ARITHMETIC, **_OPERATORS}.items()
        if name in FastCode.__members__
    }
)


def _mark() -> None:
    own = ScalarTensor._own_handlers
    for code, funcs in ANSWERED_IN_C.items():
        for func in funcs:
            handler = own[func]
            ScalarTensor._fast_handlers.update(
                {f: (handler, code) for f, h in own.items() if h is handler}
            )
    ScalarTensor._on_table_change()


_mark()
