"""torch's protocol with a type the dispatch base does not know: where another library's
type that declines every call (returns NotImplemented) takes part, no handler answers
for it; the call ends as it ends for a plain tensor (a TypeError), and a type's
``__torch_function__`` asked directly answers NotImplemented or hands the call on."""

import pytest
import torch

from tensortools import testing
from tensortools.dispatch import TensorLike, TensorWrapper, TorchFunctionTable


class _Declining:
    """A tensor-like that declines every call."""

    asked: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.asked.append(func)
        return NotImplemented


class _DecliningTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _Declining.asked.append(func)
        return NotImplemented


class _Answering(TensorWrapper):
    """A handler that would answer any call (it treats a stranger as a plain number)."""


@_Answering.implements(torch.add)
@_Answering.implements(torch.mul)
@_Answering.implements(torch.cat)
def _answer(*args, **kwargs):
    return "answered"


class _StrictAnswering(_Answering):
    policy = "strict"


class _Box(TorchFunctionTable):
    def __init__(self, t):
        self.t = t


@_Box.implements(torch.add)
@_Box.implements(torch.mul)
def _box_answer(*args, **kwargs):
    return "answered"


class _Like(TensorLike):
    def __init__(self, t):
        self.t = t

    def tensor(self):
        return self.t


@_Like.implements(torch.add)
@_Like.implements(torch.mul)
def _like_answer(*args, **kwargs):
    return "answered"


MAKERS = {
    "TensorWrapper": lambda t: t.as_subclass(_Answering),
    "TensorWrapper, strict": lambda t: t.as_subclass(_StrictAnswering),
    "TorchFunctionTable": _Box,
    "TensorLike": _Like,
}
STRANGERS = {
    "a tensor-like": lambda t: _Declining(),
    "a Tensor subclass": lambda t: t.clone().as_subclass(_DecliningTensor),
}
CALLS = {
    "torch.add(x, u)": lambda x, u: torch.add(x, u),
    "torch.add(u, x)": lambda x, u: torch.add(u, x),
    "torch.mul(x, other=u)": lambda x, u: torch.mul(x, other=u),
    "x + u": lambda x, u: x + u,
    "u * x": lambda x, u: u * x,
    "x.add(u)": lambda x, u: torch.Tensor.add(x, u),
    "torch.cat([x, u])": lambda x, u: torch.cat([x, u]),
}


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize("stranger", STRANGERS)
@pytest.mark.parametrize("call", CALLS)
def test_a_call_with_a_type_that_declines_ends_as_for_a_plain_tensor(maker, stranger, call):
    t = torch.ones(2)
    u = STRANGERS[stranger](t)
    with pytest.raises(TypeError):
        CALLS[call](t, u)  # (the reference: plain torch)
    x = MAKERS[maker](t)
    try:
        got = CALLS[call](x, u)
    except TypeError:
        return
    pytest.fail(f"answered {got!r} where plain torch raises TypeError")


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize("stranger", STRANGERS)
def test_asked_directly_a_type_declines_or_hands_the_call_on(maker, stranger):
    t = torch.ones(2)
    x, u = MAKERS[maker](t), STRANGERS[stranger](t)
    _Declining.asked.clear()
    try:
        answer = type(x).__torch_function__(torch.add, (type(x), type(u)), (x, u), {})
    except TypeError:
        assert _Declining.asked, "a TypeError of its own, without asking the other type"
        return
    assert answer is NotImplemented


@pytest.mark.parametrize("maker", ["TensorWrapper", "TorchFunctionTable", "TensorLike"])
def test_handlers_still_answer_for_the_types_they_know(maker):
    """A plain tensor, a subclass of the type: the handler answers, as before."""
    t = torch.ones(2)
    x = MAKERS[maker](t)
    assert torch.add(x, t) == "answered" and torch.mul(t, x) == "answered"
    if maker == "TensorWrapper":
        sub = type("Sub", (_Answering,), {})
        assert torch.add(x, t.as_subclass(sub)) == "answered"


def test_the_docs_quantity_passes_the_edges_check():
    """docs/writing-a-type.md's Quantity (its handlers treat any other argument as a
    dimensionless number) passes the kit's edges check, the declining types' calls
    among them."""

    class Quantity(TensorWrapper):
        @classmethod
        def context(cls, func, args, kwargs):
            return ""

        @classmethod
        def wrap(cls, tensor, unit):
            q = tensor.as_subclass(cls)
            q.unit = unit
            return q

    def unit_of(x):
        return x.unit if isinstance(x, Quantity) else ""

    @Quantity.implements(torch.add)
    def _add(input, other, *, alpha=1, out=None):
        if out is not None:
            return NotImplemented
        if unit_of(input) != unit_of(other):
            raise ValueError("add: units differ")
        with torch._C.DisableTorchFunctionSubclass():
            return Quantity.wrap(torch.add(input, other, alpha=alpha), unit_of(input))

    report = testing.check_type(
        Quantity,
        lambda t: Quantity.wrap(t.clone(), ""),
        checks=("edges",),
        ops=["add"],
        raise_on_failure=False,
    )
    assert not report.failures, [str(f) for f in report.failures]
