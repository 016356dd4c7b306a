"""TensorLike: a type that stands in for a tensor without being one; its operators,
conversions and missing Tensor methods go through ``__torch_function__``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.overrides import (
    _is_torch_function_mode_enabled,
    handle_torch_function,
    has_torch_function,
)

from tensortools._compiler import run_whole_when_entered
from tensortools.dispatch.table import (
    POLICY,
    TorchFunctionTable,
    refusing_endless_recursion,
    strict_refusal,
)

__all__ = ["CannotHoldResult", "INPLACE_OPERATORS", "TensorLike", "TensorMethod"]


class TensorLike(TorchFunctionTable):
    """Base for types that stand in for tensors without being ``torch.Tensor``.

    Python operators (``a + b``, ``a @ b``, ``-a``, ``a[i]``, ``a += b``, comparisons),
    conversions (``bool(a)``, ``float(a)``, iteration) and the ``Tensor`` methods and
    properties the class does not define (``a.sum()``, ``a.T``) go through
    ``__torch_function__`` as their ``Tensor`` forms (``Tensor.__add__``, ``Tensor.sum``),
    so they reach the table or the policy like ``torch.*`` calls do. Binary operators
    return ``NotImplemented`` where the call raises a ``TypeError`` (but
    :class:`CannotHoldResult`), as ``torch.Tensor``'s do, so that Python tries the other
    operand's reflected method; in-place operators (``a += b``) raise it instead, so that
    they change ``a`` or fail, and never rebind ``a`` to a new object.
    """

    __hash__ = object.__hash__  # defining __eq__ below would otherwise unset it

    @classmethod
    @run_whole_when_entered
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with refusing_endless_recursion(cls, func):
            return TorchFunctionTable.__torch_function__.__func__(cls, func, types, args, kwargs)

    def tensor(self) -> Tensor:
        """The dense tensor this object stands for (what its values are compared with)."""
        raise NotImplementedError(f"{type(self).__name__} must define tensor()")

    def __getattr__(self, name: str) -> Any:
        attr = None if name.startswith("_") else getattr(Tensor, name, None)
        if attr is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        if callable(attr):
            return functools.partial(_call_method, attr, self)
        return _call_method(attr.__get__, self)


class TensorMethod:
    """A ``Tensor`` method (or property getter) as torch hands it on when a tensor-like
    object is its ``self``.

    ``Tensor.sum`` itself refuses any ``self`` that is not a ``torch.Tensor``, so a
    TorchFunctionMode, or another overriding type, that calls the function it was given
    (``func(*args, **kwargs)``, as pass-through modes and fallbacks do) could not run
    ``d.sum()`` for a TensorLike ``d``. They are given this stand-in instead: called with a
    tensor-like ``self`` it dispatches as ``d.sum()`` does, with anything else it is the
    method itself. It compares and hashes equal to the method, so handler tables and
    ``func in {...}`` tests find it; ``.method`` is the method.
    """

    def __init__(self, method: Callable) -> None:
        self.method = method
        getter = getattr(method, "__self__", None)  # a property's __get__: its descriptor
        name = getattr(method, "__name__", repr(method))
        if getter is not None and not isinstance(getter, Tensor):
            name = f"{getattr(getter, '__name__', '?')}.{name}"
        self.__name__ = name
        self.__qualname__ = f"Tensor.{name}"
        self.__module__ = "torch.Tensor"  # (torch's messages name f"{module}.{name}")
        self.__doc__ = getattr(method, "__doc__", None)
        self.__wrapped__ = method  # (inspect.signature reads the method's)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], TensorLike):
            return _call_method(self.method, *args, **kwargs)
        return self.method(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorMethod):
            other = other.method
        return bool(other == self.method)

    def __hash__(self) -> int:
        return hash(self.method)

    def __repr__(self) -> str:
        return f"<Tensor.{self.__name__} for tensor-like objects>"


_STAND_INS: dict[Any, TensorMethod] = {}


def _stand_in(method: Callable) -> TensorMethod:
    found = _STAND_INS.get(method)
    if found is None:  # (a bounded set: Tensor's methods and property getters)
        found = _STAND_INS.setdefault(method, TensorMethod(method))
    return found


def _call_method(method: Callable, self: TensorLike, *args: Any, **kwargs: Any) -> Any:
    cls = type(self)
    others = [a for a in (*args, *kwargs.values()) if type(a) is not cls]
    if (others and has_torch_function(others)) or _is_torch_function_mode_enabled():
        # torch's rules decide (modes first, then each type): they see a stand-in that
        # runs as the method does here, whoever calls it
        return handle_torch_function(_stand_in(method), (self, *args), self, *args, **kwargs)
    # Only this type overrides the call and no torch function mode is active (torch would
    # call cls.__torch_function__ with types (cls,) alone): dispatch directly. (torch's own
    # refusal message cannot name a method descriptor, so it is written here.)
    result = cls.__torch_function__(method, (cls,), (self, *args), kwargs)
    if result is NotImplemented:
        policy = POLICY.value_for(cls)
        if policy == "strict":
            raise strict_refusal(cls, method, (self, *args), kwargs)
        name = (
            torch.overrides.resolve_name(method)
            or f"torch.Tensor.{getattr(method, '__name__', method)}"
        )
        raise TypeError(
            f"no implementation found for '{name}' on types that implement "
            f"__torch_function__: [{cls.__name__}] (policy {policy!r})"
        )
    return result


class CannotHoldResult(TypeError):
    """An in-place call (or ``out=``) whose result the tensor-like type cannot hold. Unlike
    other TypeErrors of an operator, it is not turned into NotImplemented: Python would
    then rebind ``a += b`` to a new object where torch changes ``a`` itself."""


# The Tensor dunders a TensorLike forwards through __torch_function__. Binary ones (and
# their reflected and in-place forms) return NotImplemented where the call raises a
# TypeError, as torch.Tensor's own do, so that Python tries the other operand's method.
_ARITHMETIC = ("add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "matmul",
               "and", "or", "xor", "lshift", "rshift")  # fmt: skip
#: The in-place operators of torch.Tensor (``__iadd__``, ...): they change their first
#: operand.
INPLACE_OPERATORS = frozenset(f"__i{op}__" for op in _ARITHMETIC if hasattr(Tensor, f"__i{op}__"))
_BINARY_DUNDERS = frozenset(
    f"__{prefix}{op}__"
    for op in _ARITHMETIC
    for prefix in ("", "r", "i")
    if hasattr(Tensor, f"__{prefix}{op}__")
) | {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
_OTHER_DUNDERS = (
    "__neg__",
    "__pos__",
    "__abs__",
    "__invert__",
    "__getitem__",
    "__setitem__",
    "__bool__",
    "__int__",
    "__float__",
    "__complex__",
    "__index__",
    "__iter__",
    "__reversed__",
    "__contains__",
    "__array__",
    "__dlpack_device__",
    "__nonzero__",
    "__long__",
)


def _operator(name: str) -> Callable:
    tensor_op = getattr(Tensor, name)
    # An in-place operator that returned NotImplemented would let Python compute
    # `a = a + b` instead: a new object, while other references and views of `a` keep the
    # old values. So `a += b` changes `a` or raises.
    binary = name in _BINARY_DUNDERS and name not in INPLACE_OPERATORS

    def operator(self, *args):
        if not binary:
            return _call_method(tensor_op, self, *args)
        try:
            return _call_method(tensor_op, self, *args)
        except CannotHoldResult:
            raise
        except TypeError:
            return NotImplemented

    operator.__name__ = name
    operator.__qualname__ = f"TensorLike.{name}"
    return operator


for _name in sorted(_BINARY_DUNDERS) + list(_OTHER_DUNDERS):
    setattr(TensorLike, _name, _operator(_name))


def _in_place_matmul(self, other):
    # torch.Tensor has no in-place matmul, so for it Python runs `a = a @ b`: a new object,
    # while other references keep the old values. Refused here, as every in-place operator
    # that cannot change its operand is.
    raise TypeError(
        f"{type(self).__name__} @= : there is no in-place matrix product (torch.Tensor has "
        "none); write `a = a @ b`, which makes a new object"
    )


TensorLike.__imatmul__ = _in_place_matmul
