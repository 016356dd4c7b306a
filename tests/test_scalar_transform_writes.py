"""ScalarTensor's calls that change it, under torch.func transforms (functionalize, vmap,
grad, jvp), with d made outside the transform as a user's constant is.

A tensor of the transform (functional, batched, tracking gradients) cannot go into the
number d stores: every in-place handler with one among its arguments raises
CannotHoldResult naming it and changes nothing (before, functionalize ended in torch's
INTERNAL ASSERT "mutating a non-functional tensor with a functional tensor"). A call
whose operands are all constants of the transform (numbers, ScalarTensors) changes d as
it does outside the transform."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from _support.scalar_structured import VALUES, in_place_forms, structured_calls
from torch import func

from tensortools import ScalarTensor
from tensortools.dispatch import CannotHoldResult
from tensortools.types.scalar.in_place import _ELEMENTWISE_INPLACE

N = 3
#: CannotHoldResult's message, naming the argument as torch does
_NAMED = r"'\w[\w ]*' is a tensor of a torch.func transform"
TRANSFORMS = ["functionalize", "vmap", "grad", "jvp"]


def _under(transform, body, y):
    """body(y_of_the_transform) run under transform, for the 0-d float tensor y."""

    def f(t):
        body(t)
        return t * 1

    if transform == "functionalize":
        return func.functionalize(f)(y)
    if transform == "vmap":
        return func.vmap(f)(y.expand(2).clone())
    if transform == "grad":
        return func.grad(lambda t: f(t).sum())(y)
    return func.jvp(f, (y,), (torch.ones_like(y),))


def _name(func_):
    return getattr(func_, "__qualname__", getattr(func_, "__name__", repr(func_)))


def _call(function, x, *args):
    """function on x as a user writes it: x.<name>(...) for a Tensor method or operator."""
    name = getattr(function, "__name__", "")
    if getattr(torch.Tensor, name, None) is function:
        return getattr(x, name)(*args)
    return function(x, *args)


def _patterns():
    """Each in-place function with the first argument pattern that takes a 0-d tensor
    ("y") where the dense matrix's call accepts it; None for the functions of d alone."""
    tried = [("y",), ("y", 0.5), ("y", "y"), (0.5, "y"), ("y", "y", 0.5), ("y", "y", "y")]
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in sorted(_ELEMENTWISE_INPLACE, key=lambda f: (_name(f), str(f))):
            chosen = None
            for pattern in tried:
                dense = ScalarTensor(N, 1.5).tensor()
                args = [torch.tensor(0.25) if a == "y" else a for a in pattern]
                try:
                    _call(f, dense, *args)
                except Exception:  # noqa: BLE001  (a pattern the function does not take)
                    continue
                chosen = pattern
                break
            found.append((f, chosen))
    return found


PATTERNS = _patterns()
WITH_TENSOR = [(f, p) for f, p in PATTERNS if p is not None]


def test_the_sweep_covers_the_in_place_functions():
    assert len(WITH_TENSOR) >= 40, [(_name(f), p) for f, p in PATTERNS]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(
    ("function", "pattern"), WITH_TENSOR, ids=[f"{_name(f)}{p}" for f, p in WITH_TENSOR]
)
def test_a_transform_tensor_written_into_d_raises_naming_it(function, pattern, transform):
    d = ScalarTensor(N, 1.5)
    returned = []

    def body(y):
        returned.append(_call(function, d, *[y if a == "y" else a for a in pattern]))

    try:
        _under(transform, body, torch.tensor(0.25))
    except CannotHoldResult as err:
        assert re.search(_NAMED, str(err)), str(err)
    except TypeError as err:
        # torch's argument parser refusing the transform's tensor before any handler
        # runs (nan_to_num_'s nan under grad): the dense matrix's own call says the same
        dense = ScalarTensor(N, 1.5).tensor()
        with pytest.raises(TypeError) as dense_err:
            _under(
                transform,
                lambda y: _call(function, dense, *[y if a == "y" else a for a in pattern]),
                torch.tensor(0.25),
            )
        assert str(dense_err.value) == str(err)
    else:
        # torch's in-place operators (Tensor.__ipow__) turn a TypeError into
        # NotImplemented, so that Python runs the out-of-place form (d ** y) instead
        assert returned == [NotImplemented], returned
    assert d.value == 1.5 and d.N == N


_FORMS = in_place_forms(structured_calls())
OUT_FORMS = [f for f in _FORMS if f.form == "out"]


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_out_with_a_transform_tensor_raises_naming_it(transform):
    # every out= form of a structured call, with the transform's matrix as its input
    failures, checked = [], 0
    for form in OUT_FORMS:
        dtype = form.case.dtype
        if not dtype.is_floating_point:
            continue
        out = ScalarTensor(N, VALUES[dtype], dtype=dtype)
        args = form.case.arguments(N)

        def body(y, form=form, out=out, args=args, dtype=dtype):
            x = (y * torch.eye(N)).to(dtype)
            form.func(x, *args, out=out)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _under(transform, body, torch.tensor(0.25))
            failures.append(f"{form.label}: no error")
        except CannotHoldResult as err:
            if not re.search(_NAMED, str(err)):
                failures.append(f"{form.label}: {err}")
        except Exception as err:  # noqa: BLE001
            failures.append(f"{form.label}: {type(err).__name__}: {str(err)[:120]}")
        if out.value != VALUES[dtype]:
            failures.append(f"{form.label}: changed the ScalarTensor written")
        checked += 1
    assert checked >= 10 and not failures, failures


def _outcome(run):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    except Exception as err:  # noqa: BLE001  (compared: the same error type)
        return type(err).__name__
    return None


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_in_place_calls_of_constants_work_under_transforms(transform):
    """Every in-place and out= form of every structured call, with numbers and
    ScalarTensors as operands (constants of the transform), changes d under the
    transform as it does outside it, or raises the same error."""
    failures = []
    for form in _FORMS:
        dtype = form.case.dtype
        outside = ScalarTensor(N, VALUES[dtype], dtype=dtype)
        inside = ScalarTensor(N, VALUES[dtype], dtype=dtype)
        written = {}

        def run(x, form=form, written=written):
            written["tensor"] = form.run(x, N)[1]

        want = _outcome(lambda run=run, outside=outside: run(outside))
        want_pair = written.get("tensor")
        want_pair = None if want_pair is None else repr(want_pair._pair.tolist())
        got = _outcome(
            lambda run=run, inside=inside: _under(transform, lambda y: run(inside), torch.ones(()))
        )
        if got != want:
            failures.append(f"{form.label}: {got} under {transform}, {want} outside")
        elif want is None and repr(written["tensor"]._pair.tolist()) != want_pair:
            failures.append(f"{form.label}: {written['tensor']._pair} != {want_pair}")
    assert not failures, failures
