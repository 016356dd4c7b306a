"""ScalarTensor's structured calls, found from its handler table, and the in-place and
out= forms of each: what the in-place, strict-policy and saving sweeps run.

Each function of ``ScalarTensor``'s table is called on a small ScalarTensor with each of a
few argument sets (numbers, dims, a second ScalarTensor); a call is structured where it
returns a ScalarTensor of the same size. Self-contained (torch and tensortools only): a
subprocess imports it too.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from tensortools import ScalarTensor

#: The dtypes and values the sweeps make ScalarTensors of: a negative float (the
#: activations' other branch), an integer (bitwise and shift operators), a bool (logical
#: functions) and a complex value (real and imag views).
VALUES = {
    torch.float32: -1.25,
    torch.float64: 0.75,
    torch.int64: 6,
    torch.bool: True,
    torch.complex64: 1.5 - 2j,
}
#: A second ScalarTensor's value, by dtype.
OTHER = {
    torch.float32: 2.5,
    torch.float64: -0.5,
    torch.int64: 3,
    torch.bool: True,
    torch.complex64: -0.5 + 1j,
}
#: Further arguments tried for each function, in order; "other" is a second ScalarTensor.
ARGUMENT_SETS = [(), (0.5,), (2,), (0, 1), (-1.0, 0.5), ("other",)]


def method_name(func: Callable) -> str | None:
    """The name under which func is a Tensor method or property (d.<name>), or None for a
    function taking the tensor first (torch.sin, F.relu)."""
    owner = getattr(func, "__self__", None)
    if owner is not None and not isinstance(owner, type) and hasattr(owner, "__get__"):
        return getattr(owner, "__name__", None)  # a property getter: Tensor.T.__get__
    name = getattr(func, "__name__", None)
    return name if name and getattr(Tensor, name, None) is func else None


def is_property(func: Callable) -> bool:
    owner = getattr(func, "__self__", None)
    return owner is not None and not isinstance(owner, type) and hasattr(owner, "__get__")


def call(func: Callable, x: Any, args: tuple, kwargs: dict | None = None) -> Any:
    """func applied to x (a ScalarTensor or a tensor) as a user writes it."""
    kwargs = kwargs or {}
    name = method_name(func)
    if name is None:
        return func(x, *args, **kwargs)
    if is_property(func):
        return getattr(x, name)
    return getattr(x, name)(*args, **kwargs)


class Structured(NamedTuple):
    """A call of a table function with a structured answer."""

    func: Callable
    args: tuple  # may hold "other"
    dtype: torch.dtype

    def arguments(self, n: int) -> tuple:
        return tuple(
            ScalarTensor(n, OTHER[self.dtype], dtype=self.dtype) if a == "other" else a
            for a in self.args
        )

    @property
    def label(self) -> str:
        return f"{name_of(self.func)}{self.args!r}[{str(self.dtype)[6:]}]"


def name_of(func: Callable) -> str:
    owner = method_name(func)
    if owner is not None:
        return f"Tensor.{owner}"
    return torch.overrides.resolve_name(func) or f"{func.__module__}.{func.__qualname__}"


def _table_functions() -> list[Callable]:
    return sorted(ScalarTensor._handlers, key=name_of)


def structured_calls(dtypes=tuple(VALUES), n: int = 3) -> list[Structured]:
    """For each function of the table and dtype, the first argument set with which the
    call returns a ScalarTensor of size n (the functions that only answer queries or
    reductions have none)."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for func in _table_functions():
            for dtype in dtypes:
                for args in ARGUMENT_SETS if not is_property(func) else [()]:
                    case = Structured(func, args, dtype)
                    d = ScalarTensor(n, VALUES[dtype], dtype=dtype)
                    try:
                        result = call(func, d, case.arguments(n))
                    except Exception:
                        continue
                    if isinstance(result, ScalarTensor) and result.N == n:
                        found.append(case)
                        break
    return found


class InPlace(NamedTuple):
    """An in-place (or out=) form of a structured call: ``run(x, n)`` calls it on x with
    the case's further arguments for size n, and returns (result, the tensor written)."""

    label: str
    case: Structured
    form: str  # "method", "function", "inplace flag", "operator" or "out"
    func: Callable

    def run(self, x: Any, n: int) -> tuple[Any, Any]:
        args = self.case.arguments(n)
        if self.form == "method":
            return getattr(x, self.func.__name__)(*args), x
        if self.form == "operator":
            return getattr(x, self.func.__name__)(*args), x
        if self.form == "function":
            return self.func(x, *args), x
        if self.form == "inplace flag":
            return call(self.func, x, args, {"inplace": True}), x
        out = (
            ScalarTensor(n, 0, dtype=x.dtype)
            if isinstance(x, ScalarTensor)
            else torch.zeros(n, n, dtype=x.dtype)
        )
        return call(self.func, x, args, {"out": out}), out


def _accepts_out(case: Structured) -> bool:
    """Whether the dense call takes out= (a dense out of the result's own dtype)."""
    dense = ScalarTensor(3, VALUES[case.dtype], dtype=case.dtype).tensor()
    args = tuple(a.tensor() if isinstance(a, ScalarTensor) else a for a in case.arguments(3))
    try:
        want = call(case.func, dense, args)
        written = call(case.func, dense, args, {"out": torch.empty_like(want)})
    except Exception:
        return False
    return written is not NotImplemented


def in_place_forms(cases: list[Structured]) -> list[InPlace]:
    """Every in-place and out= form of the structured calls: the method ``x.<name>_``,
    the functions ``torch.<name>_`` and ``F.<name>_``, the in-place operator of an
    operator (``__add__`` -> ``__iadd__``), ``inplace=True`` where the function has
    that flag, and ``out=`` where the dense call takes it."""
    forms = []
    for case in cases:
        func = case.func
        name = method_name(func)
        if name is not None:
            if is_property(func):
                continue
            if name.startswith("__"):
                inplace = getattr(Tensor, f"__i{name[2:]}", None)
                if inplace is not None and name[2:3] != "i":
                    label = f"{case.label} {inplace.__name__}"
                    forms.append(InPlace(label, case, "operator", inplace))
                continue
            inplace = getattr(Tensor, f"{name}_", None)
            if callable(inplace):
                forms.append(InPlace(f"{case.label} method {name}_", case, "method", inplace))
        else:
            base = func.__name__
            for namespace, prefix in ((torch, "torch"), (F, "F")):
                inplace = getattr(namespace, f"{base}_", None)
                if getattr(namespace, base, None) is func and callable(inplace):
                    label = f"{case.label} {prefix}.{base}_"
                    forms.append(InPlace(label, case, "function", inplace))
            try:
                flags = "inplace" in inspect.signature(func).parameters
            except (TypeError, ValueError):
                flags = False
            if flags:
                forms.append(InPlace(f"{case.label} inplace=True", case, "inplace flag", func))
        if not is_property(func) and _accepts_out(case):
            forms.append(InPlace(f"{case.label} out=", case, "out", func))
    return list({f.label: f for f in forms}.values())


def outcome(form: InPlace, n: int) -> list:
    """What the form does to a fresh ScalarTensor of size n, in a form that crosses a
    process boundary: ["ok", dtype, the written tensor's pair as reprs] or ["error", the
    exception's type]."""
    x = ScalarTensor(n, VALUES[form.case.dtype], dtype=form.case.dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, written = form.run(x, n)
    except Exception as e:
        return ["error", type(e).__name__]
    if result is not written:
        return ["returned another object", type(result).__name__]
    return ["ok", str(written.dtype), [repr(v) for v in written._pair.tolist()]]
