"""Every operator over hostile arguments: each tensor argument in turn made a meta tensor,
sparse (COO, CSR, hybrid COO and CSR), 0-d, of another dtype, a list, or on another
device. Each call is either refused with the error of its class (TypeError for the wrong
kind, ValueError for a wrong shape or device) naming the argument, or, where the operator
takes such an argument (a sparse adj, a 0-d value, a dtype that value converts from), it
gives the plain-PyTorch maths's value. Both the public entry points (tensortools.ops) and
the raw operators (torch.ops.tensortools, the C++ checks alone) are swept. The calls and
what each takes as valid come from every operator's record (``error_calls`` and
``raw_accepts`` of ``TestSamples`` in tests/test_ops_<op>.py; _support/op_records.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from _support.op_records import cases, public_operator, records
from _support.op_samples import D, OperatorTests, T
from conftest import cuda_usable

from tensortools import ops


def _r(*shape):
    return torch.randn(shape, dtype=D)


class Variant(NamedTuple):
    error: type[Exception]  # the class a refusal must have
    make: Callable  # tensor -> the hostile argument, or None where it does not apply


VARIANTS = {
    "meta": Variant(ValueError, lambda t: t.to("meta")),
    "coo": Variant(TypeError, lambda t: t.to_sparse() if t.dim() >= 1 else None),
    "csr": Variant(TypeError, lambda t: t.to_sparse_csr() if t.dim() >= 2 else None),
    "hybrid coo": Variant(TypeError, lambda t: t.to_sparse(1) if t.dim() >= 2 else None),
    "hybrid csr": Variant(
        TypeError, lambda t: t.to_sparse_csr(dense_dim=t.dim() - 2) if t.dim() >= 3 else None
    ),
    "0-d": Variant(ValueError, lambda t: t.reshape(-1)[0].clone() if t.dim() >= 1 else None),
    "int64": Variant(TypeError, lambda t: (t * 10).to(torch.int64)),
    "bool": Variant(TypeError, lambda t: t > 0),
    "complex64": Variant(TypeError, lambda t: t.to(torch.complex64)),
    "float16": Variant(TypeError, lambda t: t.to(torch.float16)),
    "float32": Variant(TypeError, lambda t: t.to(torch.float32)),  # beside float64 ones
    "list": Variant(TypeError, lambda t: [t.tolist()]),
}
if cuda_usable():
    VARIANTS["cuda"] = Variant(ValueError, lambda t: t.cuda())


#: Every operator's public entry points (the ``error_calls`` of its record).
CALLS = cases("error_calls")


def _public_cases():
    for call in sorted(CALLS):
        for arg, value in CALLS[call].make().items():
            for variant in sorted(VARIANTS):
                if VARIANTS[variant].make(value) is not None:
                    yield call, arg, variant


def _assert_same(got, want):
    """Values, or (for meta results, which have none) shapes and dtypes."""
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        if g.is_meta or w.is_meta:
            assert g.is_meta and (g.shape, g.dtype) == (w.shape, w.dtype)
        else:
            torch.testing.assert_close(g, w)


def _copy(a):
    """A dense copy (the reference's own: training writes the running statistics)."""
    if not isinstance(a, torch.Tensor):
        return copy.deepcopy(a)
    return a.to_dense() if a.layout != torch.strided else a.clone()


@pytest.mark.parametrize("call,arg,variant", list(_public_cases()))
def test_public_entry_point(call, arg, variant):
    c, v = CALLS[call], VARIANTS[variant]
    args = c.make()
    args[arg] = v.make(args[arg])
    if variant in c.accepts.get(arg, ()):
        want_args = {k: _copy(a) for k, a in args.items()}
        _assert_same(c.fn(**args), c.reference(**want_args))
        return
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        c.fn(**args)
    assert info.type is v.error, (info.type, str(info.value))
    assert f"'{arg}'" in str(info.value), str(info.value)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_argument_on_meta_gives_the_shapes_of_the_maths(call):
    """Meta everywhere is no hostile call: it is how torch.compile traces; the results
    have the reference's shapes and dtypes."""
    c = CALLS[call]
    args = c.make()
    want = c.reference(**copy.deepcopy(args))
    got = c.fn(**{k: a.to("meta") for k, a in args.items()})
    _assert_same(
        got, tuple(w.to("meta") for w in want) if isinstance(want, tuple) else want.to("meta")
    )


# --- the raw operators: what the C++ checks refuse on their own ---------------------

#: Variants the raw operators' C++ checks see (a sparse or list argument never reaches
#: them: the dispatcher refuses a layout with no kernel, pybind11 a list).
RAW_VARIANTS = ("meta", "0-d", "int64", "bool", "complex64", "float16", "float32")
#: Raw operator -> the arguments and variants it takes as valid (each record's ``raw_accepts``).
RAW_ACCEPTS = cases("raw_accepts")


def _raw_samples():
    for tests in records().values():
        samples = list(tests.sample_inputs("cpu", ["contiguous"], [D]))
        for name in sorted(tests.builders):
            sample = next(s for s in samples if s.op == name)
            yield name, sample.args, tests.references[name], tests.numbers.get(name, ())


RAW = {name: (args, ref, numbers) for name, args, ref, numbers in _raw_samples()}


def _raw_cases():
    for name, (args, _, numbers) in sorted(RAW.items()):
        schema = getattr(T, name).default._schema.arguments
        for index, (a, s) in enumerate(zip(args, schema)):
            if not isinstance(a, torch.Tensor):
                continue
            for variant in RAW_VARIANTS:
                # a 0-d tensor read as a number may come from the CPU (as in torch)
                if variant == "meta" and index in numbers:
                    continue
                if VARIANTS[variant].make(a) is not None:
                    yield name, index, s.name, variant


@pytest.mark.parametrize("name,index,arg,variant", list(_raw_cases()))
def test_raw_operator(name, index, arg, variant):
    args, ref, _ = RAW[name]
    args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    args[index] = VARIANTS[variant].make(args[index])
    op = getattr(T, name).default
    if variant in RAW_ACCEPTS.get(name, {}).get(arg, ()):
        want = ref(*[_copy(a) for a in args])
        torch.testing.assert_close(op(*args), want)
        return
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        op(*args)
    assert info.type is VARIANTS[variant].error, (info.type, str(info.value))
    assert f"'{arg}'" in str(info.value), str(info.value)


def test_hybrid_adj_is_refused_before_any_product():
    """The checks run before the products: a profile of the refused call holds none."""
    hybrid = _r(4, 4).to_sparse(1)  # 1 sparse and 1 dense dimension, shape 4 x 4
    with torch.profiler.profile() as prof, pytest.raises(TypeError, match="'adj'.*hybrid"):
        T.graph_conv(hybrid, _r(4, 2), _r(2, 3), None)
    assert not [e for e in prof.events() if e.name in ("aten::mm", "aten::addmm")]


# -- errors that say what happened -----------------------------------------------------


def test_an_input_of_the_wrong_width_is_named_with_what_weights_expects():
    S, F = 16, 9
    weights, bias = torch.randn(3 * S, S + F), torch.randn(3 * S)
    h = c = torch.randn(4, S)
    wrong = torch.randn(4, 16)
    with pytest.raises(ValueError) as info:
        ops.lltm(wrong, weights, bias, h, c)
    message = str(info.value)
    assert "'input' has 16 features but 'weights' [48, 25] expects 9" in message, message
    assert "state_size 16 from 'old_h'" in message, message
    with pytest.raises(ValueError, match=r"'input' has 16 features but 'weights' \[48, 25\]"):
        ops.lltm_sequence(wrong.expand(3, 4, 16), weights, bias, h, c)
    # a state of another size: weights' rows disagree with it
    small = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"'weights' \[48, 25\] has 48 rows but 'old_h' has "):
        ops.lltm(torch.randn(4, F), weights, bias, small, small)


@pytest.mark.parametrize("module", ["LLTM", "LLTMSequence"])
@pytest.mark.parametrize(
    "state, got",
    [
        (torch.randn(4, 16), r"one tensor of shape \[4, 16\]"),
        (torch.randn(2, 4, 16), r"one tensor of shape \[2, 4, 16\]"),
        ((torch.randn(4, 16),), "a tuple of 1"),
        ({"h": 1}, "dict"),
    ],
    ids=["tensor", "stacked", "tuple of 1", "dict"],
)
def test_a_state_that_is_not_a_pair_is_named(module, state, got):
    import tensortools.nn as tnn

    cell = getattr(tnn, module)(9, 16)
    x = torch.randn(4, 9) if module == "LLTM" else torch.randn(3, 4, 9)
    with pytest.raises(
        TypeError, match=rf"{module}: 'state' must be a pair \(h0?, c0?\).*; got {got}"
    ):
        cell(x, state)


def test_an_error_inside_a_types_wrap_says_so_and_chains_it():
    from tensortools.dispatch import TensorWrapper

    class Failing(TensorWrapper):
        @classmethod
        def wrap(cls, tensor, context):
            raise RuntimeError("the type's own failure")

    x = Failing._make(torch.ones(2))
    for call in (lambda: torch.add(x, 1), lambda: x + 1, lambda: x.sin()):
        with pytest.raises(RuntimeError, match="Failing.wrap raised RuntimeError") as info:
            call()
        assert "layout" not in str(info.value)
        assert "the type's own failure" in str(info.value)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert str(info.value.__cause__) == "the type's own failure"


def test_every_operator_has_error_calls_and_every_test_file_a_record():
    # a new operator's record gives its error_calls (docs/adding-an-operator.md, Tests)
    assert {public_operator(name) for name in CALLS} == set(ops.__all__)
    here = Path(__file__).parent
    with_samples = {
        p.stem.removeprefix("test_ops_")
        for p in here.glob("test_ops_*.py")
        if p.name != Path(__file__).name and "class TestSamples(" in p.read_text()
    }
    assert set(records()) == with_samples
    assert all(issubclass(r, OperatorTests) for r in records().values())


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_operator_called_while_another_thread_imports_dtensor(monkeypatch, call):
    """The DTensor check reads torch.distributed.tensor only where it is imported; while
    another thread imports it, the module is listed without DTensor yet. The call is then
    an ordinary one (it raised AttributeError from eight threads)."""
    import sys
    import types

    c = CALLS[call]
    args = c.make()
    want_args = {k: _copy(a) for k, a in args.items()}
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "torch.distributed.tensor", types.ModuleType("partial"))
        got = c.fn(**args)
    _assert_same(got, c.reference(**want_args))
