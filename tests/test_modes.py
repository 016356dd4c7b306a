"""Every type under TorchFunctionModes: torch's own (``with torch.device(...)``,
``torch.set_default_device``) and a user's (passing every call through, nested, or
declining every call).

The rule: under a mode that passes calls through, every method, operator, query and
torch function gives what it gives outside any mode (the same value, bit for bit, the
same type and metadata, or the same exception type). A mode that declines every call
(returns NotImplemented) leaves plain tensors nothing that can run: torch raises a
TypeError (or, for a plain tensor's property getters, recurses without end inside torch
itself); a type's call then gives what it gives outside, or a TypeError, and never
another error.
"""

from __future__ import annotations

import contextlib
import math
import operator
import warnings

import pytest
import torch
from _support.type_cases import CALLS as WRAPPER_CALLS
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs
from tensortools.dispatch import TensorLike, TensorMethod


class PassThrough(TorchFunctionMode):
    """A user's mode that sees every call and runs it (as logging or profiling modes do)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


class Declining(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return NotImplemented


class DeclinesOtherTypes(TorchFunctionMode):
    """A mode that runs plain tensors' calls and leaves calls with other types to them
    (returns NotImplemented), as modes that know only torch.Tensor do."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def default_device():
    torch.set_default_device("cpu")
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def nested():
    with PassThrough(), torch.device("cpu"), PassThrough():
        yield


PASSING = {
    "pass-through": PassThrough,
    "torch.device": lambda: torch.device("cpu"),
    "set_default_device": default_device,
    "nested": nested,
    "declines other types": DeclinesOtherTypes,
}


def _leaf(x):
    """A comparable description of one leaf of a result."""
    if isinstance(x, ScalarTensor):
        return ("ScalarTensor", x.N, x.dtype, _bits(x._pair))
    if isinstance(x, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            plain = x if type(x) is torch.Tensor else x.as_subclass(torch.Tensor)
            if plain.layout != torch.strided:
                plain = plain.to_dense()
            described = (type(x).__name__, plain.dtype, tuple(plain.shape), _bits(plain))
        return (*described, getattr(x, "metadata", None))
    if isinstance(x, float) and math.isnan(x):
        return ("nan", repr(x))
    if isinstance(x, complex) and x != x:
        return ("complex nan", repr(x))
    if isinstance(x, (int, float, complex, bool, str, type(None), torch.dtype, torch.device)):
        return x
    return type(x).__name__  # (storages, numpy arrays, ...: their type)


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor):
    """A tensor's values as their raw bits (NaN payloads, signs of zero)."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool or t.numel() == 0 or t.dtype.is_floating_point is False:
        return t.tolist()
    return t.contiguous().view(_SAME_SIZE_INT[t.dtype.itemsize]).tolist()


def run(call):
    """("raised", exception type) or ("returned", result) of call()."""
    torch.default_generator.manual_seed(0)
    try:
        return ("returned", call())
    except Exception as err:  # noqa: BLE001 - compared with the run outside a mode
        return ("raised", type(err).__name__)


def described(ran, values=True):
    """What run() gave, comparable with ==: results as their leaves' descriptions (made
    outside any mode: a declining one refuses the reads); without values, tensors by
    type, dtype and shape alone (for results of uninitialised memory)."""
    if ran[0] == "raised":
        return ran
    leaves, spec = tree_flatten(ran[1], is_leaf=lambda x: isinstance(x, torch.Size))
    described = [_leaf(x) for x in leaves]
    if not values:
        described = [d[:3] if isinstance(d, tuple) else d for d in described]
    return ("returned", type(ran[1]).__name__, described)


# Results of uninitialised memory (their dtype and shape are compared), and LAPACK's least
# squares of a singular matrix, whose answer differs from run to run.
UNDEFINED = ("empty_like", "new_empty", "lstsq")
IDENTITY_FALLBACK = {"d == e", "eq", "Tensor.__eq__(ScalarTensor)", "Tensor.__ne__(ScalarTensor)"}


def _declined(name: str, inside: tuple) -> bool:
    """Whether a call under a declining mode gave one of the answers such a mode leaves."""
    return (
        inside == ("raised", "TypeError")
        # (== between two objects that both decline: Python compares identities, as for
        # two plain tensors under such a mode)
        or (name in IDENTITY_FALLBACK and inside[:2] == ("returned", "bool"))
        # (a binary dunder called by hand answers Python's protocol)
        or (".__" in name and inside[:2] == ("returned", "NotImplementedType"))
    )


def _differences(
    calls, make, contexts, declining=False, plain=None, around=contextlib.nullcontext
) -> list[str]:
    """The calls whose answer under a context differs from outside; under a declining
    mode, also those whose answer is neither one it leaves (see _declined) nor the error
    the same call on plain tensors (plain() makes them) raises under it. Every call runs
    inside around() (a capture of LoggingTensor records, say), outside and inside."""
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, call in calls:
            values = not any(u in name for u in UNDEFINED)
            with around():
                outside = described(run(lambda: call(*make())), values)
            for context_name, context in contexts.items():
                arguments = make()  # (made outside: a declining mode refuses factories)
                with around(), context():
                    ran = run(lambda: call(*arguments))
                inside = described(ran, values)
                if inside != outside and not (declining and _declined(name, inside)):
                    if declining and plain is not None and inside[0] == "raised":
                        arguments = plain()
                        with context():
                            if run(lambda: call(*arguments)) == inside:
                                continue  # (torch's own answer for plain tensors)
                    failures.append(f"{name} under {context_name}: {inside!r} vs {outside!r}")
    return failures


# --- ScalarTensor: every overridable method and torch function, operators, queries ------


def _scalar_calls() -> list:
    from _support.scalar_cases import PROPERTIES, QUERIES
    from test_scalar_tensor_methods import CALLS

    calls = []
    for name, func in CALLS:
        calls.append((name, lambda d, e, t, f=func: f(d)))
        calls.append((f"{name}(2)", lambda d, e, t, f=func: f(d, 2)))
        calls.append((f"{name}(ScalarTensor)", lambda d, e, t, f=func: f(d, e)))
        calls.append((f"{name}(dense)", lambda d, e, t, f=func: f(d, t)))
    for name in QUERIES:
        calls.append((f"d.{name}()", lambda d, e, t, n=name: getattr(d, n)()))
    for name in PROPERTIES:
        calls.append((f"d.{name}", lambda d, e, t, n=name: getattr(d, n)))
    return calls


SCALAR_OPERATORS = {
    "-d": lambda d, e, t: -d,
    "d + 1": lambda d, e, t: d + 1,
    "1 + d": lambda d, e, t: 1 + d,
    "d - e": lambda d, e, t: d - e,
    "2 - d": lambda d, e, t: 2 - d,
    "d * d": lambda d, e, t: d * d,
    "d / 2": lambda d, e, t: d / 2,
    "d @ t": lambda d, e, t: d @ t,
    "t @ d": lambda d, e, t: t @ d,
    "t + d": lambda d, e, t: t + d,
    "d ** 2": lambda d, e, t: d**2,
    "d == e": lambda d, e, t: d == e,
    "d > 0": lambda d, e, t: d > 0,
    "d[0]": lambda d, e, t: d[0],
    "d[0, 1]": lambda d, e, t: d[0, 1],
    "d.T": lambda d, e, t: d.T,
    "d.t()": lambda d, e, t: d.t(),
    "d.sum()": lambda d, e, t: d.sum(),
    "d.numel()": lambda d, e, t: d.numel(),
    "abs(d)": lambda d, e, t: abs(d),
    "bool(1x1)": lambda d, e, t: bool(ScalarTensor(1, 2.0)),
    "float(1x1)": lambda d, e, t: float(ScalarTensor(1, 2.0)),
    "list(d)": lambda d, e, t: list(d),
    "len(d)": lambda d, e, t: len(d),
    "d += 1 (refused)": lambda d, e, t: operator.iadd(d, 1),
    "d *= 2": lambda d, e, t: operator.imul(d, 2),
    "d.mul_(2)": lambda d, e, t: d.mul_(2),
    "torch.add(d, e, alpha=2)": lambda d, e, t: torch.add(d, e, alpha=2),
    "torch.sin(d)": lambda d, e, t: torch.sin(d),
    "torch.linalg.det(d)": lambda d, e, t: torch.linalg.det(d),
    "repr(d)": lambda d, e, t: repr(d),
}


def _scalar_plain():
    return tuple(x.tensor() if isinstance(x, ScalarTensor) else x for x in _scalar_make())


def _scalar_make():
    return (
        ScalarTensor(3, 1.5, dtype=torch.float64),
        ScalarTensor(3, -2.0, dtype=torch.float64),
        (torch.arange(9.0, dtype=torch.float64).reshape(3, 3)),
    )


def test_the_forms_the_audit_found_answer_under_every_mode():
    failures = _differences(list(SCALAR_OPERATORS.items()), _scalar_make, PASSING)
    assert not failures, "\n".join(failures)
    failures = _differences(
        list(SCALAR_OPERATORS.items()),
        _scalar_make,
        {"declining": Declining},
        declining=True,
        plain=_scalar_plain,
    )
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [*PASSING, "declining"])
def test_every_scalar_tensor_call_answers_under_a_mode_as_outside(mode):
    contexts = {"declining": Declining} if mode == "declining" else {mode: PASSING[mode]}
    failures = _differences(
        _scalar_calls(), _scalar_make, contexts, mode == "declining", plain=_scalar_plain
    )
    assert not failures, f"{len(failures)} calls differ:\n" + "\n".join(failures[:40])


def test_a_mode_sees_a_tensor_like_method_as_the_method():
    """The mode is handed a stand-in for Tensor.sum that equals it, hashes as it, is named
    as it, and runs the call when the mode calls it."""
    d = ScalarTensor(3, 2.0)
    with PassThrough() as mode:
        total = d.sum()
    assert float(total) == 6.0
    func = mode.seen[0]
    assert isinstance(func, TensorMethod) and func == torch.Tensor.sum
    assert hash(func) == hash(torch.Tensor.sum) and func in {torch.Tensor.sum}
    assert func.__name__ == "sum" and func.method is torch.Tensor.sum
    # called on a plain tensor, it is the method itself
    assert func(torch.ones(3)).item() == 3.0
    # a property getter too
    with PassThrough() as mode:
        assert d.T.N == 3
    assert mode.seen[0] == torch.Tensor.T.__get__ and mode.seen[0].__name__ == "T.__get__"


def test_a_user_tensor_like_type_answers_under_a_mode():
    class Dense(TensorLike):
        def __init__(self, t):
            self.t = t

        def tensor(self):
            return self.t

        @classmethod
        def fallback(cls, func, types, args, kwargs):
            unwrap = lambda x: x.t if isinstance(x, Dense) else x  # noqa: E731
            return func(*map(unwrap, args), **{k: unwrap(v) for k, v in kwargs.items()})

    x = Dense(torch.arange(4.0))
    for context in (PassThrough, lambda: torch.device("cpu"), nested):
        with context():
            assert x.sum().item() == 6.0 and (x + 1).tolist() == [1.0, 2.0, 3.0, 4.0]
            assert x.shape == (4,) and x[1].item() == 1.0 and x.T.tolist() == x.t.tolist()


# --- wrapper types: the calls of tests/_support/type_cases.py, with their method forms ------------


def _wrapper_calls() -> list:
    from _support.scalar_cases import PROPERTIES, QUERIES

    calls = [(name, call) for name, call in WRAPPER_CALLS.items()]
    for name in QUERIES:
        calls.append((f"x.{name}()", lambda x, y, n=name: getattr(x, n)()))
    for name in PROPERTIES:
        calls.append((f"x.{name}", lambda x, y, n=name: getattr(x, n)))
    calls += [
        ("x += y", lambda x, y: operator.iadd(x, y)),
        ("plain.add_(x)", lambda x, y: torch.zeros(3, 4).add_(x)),
        ("torch.add(x, 1, out=plain)", lambda x, y: torch.add(x, 1, out=torch.empty(3, 4))),
        ("repr", lambda x, y: repr(x)),
        ("x.backward", lambda x, y: x.detach().requires_grad_().sum().backward()),
    ]
    return calls


WRAPPER_MAKERS = {
    "MetadataTensor": lambda: (
        MetadataTensor(torch.arange(12.0).reshape(3, 4), {"k": 1}),
        MetadataTensor(torch.linspace(-1, 1, 12).reshape(3, 4), {"k": 1, "j": 2}),
    ),
    "LoggingTensor": lambda: (
        LoggingTensor(torch.arange(12.0).reshape(3, 4)),
        LoggingTensor(torch.linspace(-1, 1, 12).reshape(3, 4)),
    ),
}


@pytest.mark.parametrize("mode", [*PASSING, "declining"])
@pytest.mark.parametrize("kind", [*WRAPPER_MAKERS, "LoggingTensor, capturing"])
def test_every_wrapper_call_answers_under_a_mode_as_outside(kind, mode):
    contexts = {"declining": Declining} if mode == "declining" else {mode: PASSING[mode]}
    capturing = kind.endswith("capturing")
    failures = _differences(
        _wrapper_calls(),
        WRAPPER_MAKERS[kind.split(",")[0]],
        contexts,
        mode == "declining",
        around=capture_logs if capturing else contextlib.nullcontext,
    )
    assert not failures, f"{len(failures)} calls differ:\n" + "\n".join(failures[:40])


def test_a_capture_records_the_users_calls_under_a_mode_as_outside():
    x = LoggingTensor(torch.ones(3))
    for context in (contextlib.nullcontext, *PASSING.values()):
        with capture_logs() as logs, context():
            torch.sin(x).sum()
            transposed = x.T
        assert transposed.shape == (3,)
        assert [r.function for r in logs] == [
            "torch.sin",
            "torch.Tensor.sum",
            "torch.Tensor.T.__get__",
        ], context
