"""Calls that torch.compile runs eagerly reach a type's __torch_function__ as frames of
their own (a function dynamo falls back to eager for, the code at a graph break). Dynamo
guards no method or slot descriptor (``Tensor.add``, ``Tensor.__add__``) and no
property's getter, so a __torch_function__ frame compiled on its own answered the next
call with the same arguments with the first call's graph: ``torch.max(x, 1)`` after
``x + 1`` gave ``x + 1``. Those frames run as written (tensortools._compiler,
run_whole_when_entered); each call here must give what eager gives."""

import contextlib

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _plain(t):
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor)


def assert_same_result(out, expected, where="result"):
    """The same type at every level, and the same values and metadata."""
    assert type(out) is type(expected), (where, type(out), type(expected))
    if isinstance(expected, torch.Tensor):
        assert getattr(out, "metadata", None) == getattr(expected, "metadata", None), where
        assert out.shape == expected.shape and torch.equal(_plain(out), _plain(expected)), where
    elif isinstance(expected, (tuple, list)):
        assert len(out) == len(expected), where
        for k, (o, e) in enumerate(zip(out, expected)):
            assert_same_result(o, e, f"{where}[{k}]")
    else:
        assert out == expected, where


@contextlib.contextmanager
def _unresumable():
    yield  # (dynamo cannot resume a frame whose graph breaks inside this: it runs it eagerly)


def _after_add(x):
    with _unresumable():
        out = [x + 1, torch.max(x, 1), x * 1, x - 1, x.sort(1), x.topk(1), x.unbind(1)]
        out += [x.sum(1), x.abs(), -x, x.shape, x.dtype]
        torch._dynamo.graph_break()
    return out


def _after_max(x):
    with _unresumable():
        out = [x.max(1), x + 1, x.min(1), torch.sort(x, 1), x.sum(1), x.shape]
        torch._dynamo.graph_break()
    return out


def _after_shape(x):
    with _unresumable():
        out = [x.shape, x.dtype, x.abs(), -x, x.neg(), x * 1, x.max(1)]
        torch._dynamo.graph_break()
    return out


def _reported(x):
    return x + 1, torch.max(x, 1), x.split(2)


def _metadata():
    return MetadataTensor(torch.randn(6, 3, 4), {"id": 1})


def _logging():
    return LoggingTensor(torch.randn(6, 3, 4))


@pytest.mark.parametrize("make", [_metadata, _logging], ids=["MetadataTensor", "LoggingTensor"])
@pytest.mark.parametrize("f", [_reported, _after_add, _after_max, _after_shape])
def test_calls_dynamo_runs_eagerly_each_answer_their_own_function(make, f):
    x = make()
    assert_same_result(torch.compile(f, backend="eager")(x), f(x))


def test_a_later_function_with_the_same_calls_is_right_without_a_reset():
    x = _metadata()
    assert_same_result(torch.compile(_reported, backend="eager")(x), _reported(x))
    g = lambda x: (torch.max(x, 1), x.split(2))  # noqa: E731
    assert_same_result(torch.compile(g, backend="eager")(x), g(x))
