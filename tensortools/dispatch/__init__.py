"""A reusable base for types that implement ``__torch_function__`` with a dispatch table.

A type derives from :class:`TorchFunctionTable` (or, for ``torch.Tensor`` subclasses, from
:class:`TensorWrapper`) and registers handlers::

    class MyType(TorchFunctionTable):
        @classmethod
        def fallback(cls, func, types, args, kwargs): ...

    @MyType.implements(torch.add)
    def add(input, other, *, alpha=1, out=None): ...

Registering a torch function also registers its ``Tensor`` method and operator forms
(``torch.add`` covers ``Tensor.add``, ``Tensor.__add__`` and ``Tensor.__radd__``) unless
``aliases=False``. A reflected operator reaches the handler with the operands in the order
torch itself computes it: ``1 + t`` as ``torch.add(t, 1)`` (addition, multiplication and
the bitwise operators are computed ``self op other``), ``1 - t`` as ``torch.sub(1, t)``.
Each class has its own table; a subclass sees its parents' entries and may override them.
A handler may return ``NotImplemented`` to decline a particular call (the policy then
decides).

Functions without a handler follow the class's policy: ``"fallback"`` runs the torch
function on plain tensors (and wrapper types re-wrap the results); ``"strict"`` returns
``NotImplemented``, so that torch raises a ``TypeError`` naming the function and the
types once every type involved has declined. The policy is a setting, set, scoped and read
as every setting is (docs/settings.md): ``cls.set_policy(p)`` for every thread,
``with cls.using_policy(p):`` for the block in the current thread only, ``cls.policy``
the policy in force. When several types override a call, torch's own rules apply:
subclasses before superclasses, otherwise left to right, and the first result that is not
``NotImplemented`` wins.
"""

from tensortools.dispatch.table import POLICIES, TorchFunctionTable, aliases_of
from tensortools.dispatch.tensor_like import CannotHoldResult, TensorLike, TensorMethod
from tensortools.dispatch.wrapper import TensorWrapper

__all__ = [
    "POLICIES",
    "TorchFunctionTable",
    "TensorLike",
    "TensorMethod",
    "TensorWrapper",
    "CannotHoldResult",
    "aliases_of",
]
