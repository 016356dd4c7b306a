"""tensortools.dispatch: tables, aliases, inheritance, policies, several types at once."""

import pytest
import torch
from torch.overrides import handle_torch_function

from tensortools.dispatch import TorchFunctionTable, aliases_of
from tensortools.dispatch.wrapper import WrapperPath


class Box(TorchFunctionTable):
    """A minimal tensor-like for these tests: wraps a tensor, falls back to it."""

    def __init__(self, t):
        self.t = t

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        unwrap = lambda a: a.t if isinstance(a, Box) else a  # noqa: E731
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})


def _fresh_box():
    class LocalBox(Box):
        pass

    return LocalBox


def test_aliases_cover_method_and_operators():
    found = dict(aliases_of(torch.add))
    # torch computes t.__radd__(x) as torch.add(t, x): nothing to swap
    assert found == {
        torch.Tensor.add: False,
        torch.Tensor.__add__: False,
        torch.Tensor.__radd__: False,
    }
    assert torch.Tensor.__rsub__ in dict(aliases_of(torch.sub))
    assert dict(aliases_of(torch.matmul))[torch.Tensor.__rmatmul__] is True
    assert aliases_of(torch.nn.functional.relu) == []  # not in the torch namespace


def test_registration_covers_function_method_and_operators():
    B = _fresh_box()
    calls = []

    @B.implements(torch.sub)
    def sub(a, b, *, alpha=1):
        calls.append((a, b))
        return "handled"

    x, t = B(torch.ones(2)), torch.ones(2)

    def call(func, *args):  # what torch does when a method or operator meets x
        return handle_torch_function(func, args, *args)

    assert torch.sub(x, t) == "handled"
    assert call(torch.Tensor.sub, x, t) == "handled"
    assert call(torch.Tensor.__sub__, x, t) == "handled"
    assert t - x == "handled"  # Tensor.__sub__(t, x) defers to x
    assert calls[-1] == (t, x)
    # reflected: Tensor.__rsub__(x, t) means t - x and must reach sub(t, x)
    assert call(torch.Tensor.__rsub__, x, t) == "handled"
    assert calls[-1] == (t, x)


def test_aliases_can_be_left_out():
    B = _fresh_box()
    B.implements(torch.neg, aliases=False)(lambda a: "handled")
    assert torch.neg(B(torch.ones(1))) == "handled"
    assert B.handler_for(torch.Tensor.neg) is None


def test_subclass_inherits_overrides_and_sees_late_parent_entries():
    Parent = _fresh_box()

    class Child(Parent):
        pass

    Parent.implements(torch.sin)(lambda a: "parent sin")
    Child.implements(torch.cos)(lambda a: "child cos")
    Child.implements(torch.sin)(lambda a: "child sin")
    Parent.implements(torch.tan)(lambda a: "parent tan")  # registered after Child exists
    x, y = Parent(torch.ones(1)), Child(torch.ones(1))
    assert torch.sin(x) == "parent sin" and torch.sin(y) == "child sin"
    assert torch.tan(y) == "parent tan"
    assert Parent.handler_for(torch.cos) is None  # nothing leaks upwards
    assert torch.equal(torch.cos(x), torch.cos(torch.ones(1)))  # fallback


def test_fallback_and_strict_policies():
    B = _fresh_box()
    x = B(torch.tensor([0.5]))
    assert torch.equal(torch.exp(x), torch.exp(torch.tensor([0.5])))
    with B.using_policy("strict"):
        with pytest.raises(TypeError, match=r"(?s)torch\.exp.*LocalBox"):
            torch.exp(x)
    assert B.policy == "fallback"
    with pytest.raises(ValueError, match="'policy' must be one of"):
        B.set_policy("lenient")


def test_handler_declining_goes_to_policy():
    B = _fresh_box()
    B.implements(torch.mul)(lambda a, b: NotImplemented)
    x = B(torch.tensor([2.0]))
    assert torch.equal(torch.mul(x, 3), torch.tensor([6.0]))
    with B.using_policy("strict"), pytest.raises(TypeError, match="torch.mul"):
        torch.mul(x, 3)


def test_implements_rejects_bad_arguments():
    B = _fresh_box()
    with pytest.raises(TypeError, match="at least one function"):
        B.implements()
    with pytest.raises(TypeError, match="not callable"):
        B.implements(42)


def test_several_types_follow_torch_rules():
    order = []

    def make(name, answer):
        class T(Box):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                order.append(name)
                return answer

        T.__name__ = name
        return T

    A = make("A", NotImplemented)
    B = make("B", "from B")
    # left to right; A declines, B answers
    order.clear()
    assert torch.add(A(torch.ones(1)), B(torch.ones(1))) == "from B"
    assert order == ["A", "B"]

    class SubA(A):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            order.append("SubA")
            return NotImplemented

    # the subclass goes first even when it stands to the right of its parent
    order.clear()
    with pytest.raises(TypeError, match="torch.add"):
        torch.add(A(torch.ones(1)), SubA(torch.ones(1)))
    assert order == ["SubA", "A"]


def test_the_compiled_path_record_follows_tables_and_settings():
    """Each wrapper class publishes what the compiled __torch_function__ needs (kind,
    handlers, gates); registering a handler or changing a setting recomputes it, for the
    class and its subclasses."""
    from tensortools import LoggingTensor, MetadataTensor
    from tensortools.dispatch import TensorWrapper

    class Plain(TensorWrapper):
        pass

    class Child(Plain):
        pass

    assert Plain._fast.kind == WrapperPath.WRAP and Child._fast.kind == WrapperPath.WRAP
    Plain.implements(torch.sin)(lambda x: "handled")
    assert torch.sin in Child._fast.handlers and torch.sin(Child(torch.ones(1))) == "handled"
    Plain.set_policy("strict")
    try:
        assert (
            Child._fast.kind == WrapperPath.PYTHON
        )  # strict: the Python path answers (and refuses)
    finally:
        Plain.set_policy("fallback")
    assert Child._fast.kind == WrapperPath.WRAP

    class OwnWrap(TensorWrapper):
        @classmethod
        def wrap(cls, tensor, context):
            return tensor.as_subclass(cls)

    assert OwnWrap._fast.kind == WrapperPath.PYTHON  # a hook the compiled path does not know

    assert MetadataTensor._fast.kind == WrapperPath.WRAP_METADATA
    previous = MetadataTensor.set_tracking(False)
    try:
        assert MetadataTensor._fast.kind == WrapperPath.PLAIN
    finally:
        MetadataTensor.set_tracking(previous)
    previous = MetadataTensor.set_merge_policy("union")
    try:
        assert MetadataTensor._fast.kind == WrapperPath.PYTHON
    finally:
        MetadataTensor.set_merge_policy(previous)
    assert MetadataTensor._fast.kind == WrapperPath.WRAP_METADATA
    assert LoggingTensor._fast.kind == WrapperPath.WRAP and LoggingTensor._fast.logger is not None


@pytest.mark.parametrize(
    "record",
    [None, "x", (), (1, {}, None), (7, {}, None, None), (1, [], None, None), (-1, {}, None, None)],
)
def test_a_broken_record_sends_calls_to_the_python_path(record):
    """Whatever a class's record holds, the compiled path never guesses: it takes the
    Python path, which gives the usual results."""
    from tensortools.dispatch import TensorWrapper

    class Tagged(TensorWrapper):
        @classmethod
        def _python_torch_function(cls, func, types, args=(), kwargs=None):
            out = super()._python_torch_function(func, types, args, kwargs)
            return ("python", out)

    t = Tagged._make(torch.ones(2))
    Tagged._fast = record
    tag, out = torch.add(t, t)
    assert (
        tag == "python"
        and type(out) is Tagged
        and torch.equal(out.as_subclass(torch.Tensor), torch.full((2,), 2.0))
    )


_IN_PLACE = {
    "x.mul_(y)": lambda x, y: x.mul_(y),
    "x.add_(y, alpha=2)": lambda x, y: x.add_(y, alpha=2),
    "x.sub_(1)": lambda x, y: x.sub_(1),
    "x.div_(y)": lambda x, y: x.div_(y),
    "x.clamp_(0, 1)": lambda x, y: x.clamp_(0, 1),
    "x.zero_()": lambda x, y: x.zero_(),
    "x.fill_(3)": lambda x, y: x.fill_(3),
    "x.copy_(y)": lambda x, y: x.copy_(y),
    "x.exp_()": lambda x, y: x.exp_(),
    "x *= y": lambda x, y: x.__imul__(y),
    "torch.mul(x, y, out=x)": lambda x, y: torch.mul(x, y, out=x),
}


@pytest.mark.parametrize("call", _IN_PLACE)
def test_the_fallbacks_in_place_forms_return_the_instance_with_its_attributes(call):
    """What docs/writing-a-type.md says of the fallback: an argument the call writes and
    returns comes back as that very object, without wrap (its attributes unchanged), with
    plain torch's values; a new result goes through wrap."""
    from tensortools.dispatch import TensorWrapper

    class Tagged(TensorWrapper):
        @classmethod
        def context(cls, func, args, kwargs):
            return func.__name__

        @classmethod
        def wrap(cls, tensor, tag):
            out = tensor.as_subclass(cls)
            out.tag = tag
            return out

    t, other = torch.tensor([0.5, 2.0, -1.0]), torch.tensor([2.0, 0.25, 4.0])
    x = Tagged.wrap(t.clone(), "mine")
    got = _IN_PLACE[call](x, other)
    want = _IN_PLACE[call](t.clone(), other)
    assert got is x and x.tag == "mine"
    torch.testing.assert_close(x.as_subclass(torch.Tensor), want, rtol=0, atol=0)
    new = torch.mul(x, other)
    assert type(new) is Tagged and new.tag == "mul"
