"""Every operator over hostile arguments: each tensor argument in turn made a meta tensor,
sparse (COO, CSR, hybrid COO and CSR), 0-d, of another dtype, a list, or on another
device. Each call is either refused with the error of its class (TypeError for the wrong
kind, ValueError for a wrong shape or device) naming the argument, or, where the operator
takes such an argument (a sparse adj, a 0-d value, a dtype that value converts from), it
gives the plain-PyTorch maths's value. Both the public entry points (tensortools.ops) and
the raw operators (torch.ops.tensortools, the C++ checks alone) are swept."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from _support.op_samples import D, T
from conftest import cuda_usable

from tensortools import ops, reference


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


class Call(NamedTuple):
    """A public entry point, its valid float64 CPU arguments (made anew for each call),
    the plain-PyTorch maths, and the hostile variants of each argument it takes."""

    fn: Callable
    make: Callable
    reference: Callable
    accepts: dict[str, frozenset[str]] = {}


def _lltm_args():
    return dict(input=_r(2, 3), weights=_r(12, 7), bias=_r(12), old_h=_r(2, 4), old_cell=_r(2, 4))


def _sequence_args():
    return dict(input=_r(3, 2, 3), weights=_r(12, 7), bias=_r(12), h0=_r(2, 4), c0=_r(2, 4))


def _conv_bn_args():
    return dict(
        input=_r(2, 3, 5, 5),
        weight=_r(4, 3, 3, 3),
        running_mean=_r(4),
        running_var=_r(4).abs() + 0.5,
        gamma=_r(4),
        beta=_r(4),
    )


def _graph_conv_reference(adj, x, weight, bias):
    return reference.graph_conv(adj.to_dense() if adj.is_sparse else adj, x, weight, bias)


def _as_input_dtype(value, input):
    """value as add_diagonal and scale read it: converted to input's dtype."""
    return value.to(input.dtype)


def _eye_like(input):
    return torch.eye(input.shape[-1], dtype=input.dtype, device=input.device)


_VALUE_KINDS = frozenset({"int64", "bool", "float16", "float32"})

CALLS = {
    "lltm": Call(ops.lltm, _lltm_args, reference.lltm),
    "lltm_sequence": Call(ops.lltm_sequence, _sequence_args, reference.lltm_sequence),
    "fused_conv_bn2d(training)": Call(
        partial(ops.fused_conv_bn2d, training=True, padding=1),
        _conv_bn_args,
        partial(reference.fused_conv_bn2d, training=True, padding=1),
    ),
    "fused_conv_bn2d(eval)": Call(
        partial(ops.fused_conv_bn2d, training=False, padding=1),
        _conv_bn_args,
        partial(reference.fused_conv_bn2d, training=False, padding=1),
    ),
    "axpby": Call(
        partial(ops.axpby, alpha=2.0, beta=-0.5),
        lambda: dict(x=_r(3, 4), y=_r(3, 4)),
        partial(reference.axpby, alpha=2.0, beta=-0.5),
        # a 0-d tensor broadcasts
        {"x": frozenset({"0-d"}), "y": frozenset({"0-d"})},
    ),
    "graph_conv": Call(
        ops.graph_conv,
        lambda: dict(adj=_r(5, 5), x=_r(5, 3), weight=_r(3, 2), bias=_r(2)),
        _graph_conv_reference,
        {"adj": frozenset({"coo", "csr"})},
    ),
    "scale": Call(
        ops.scale,
        lambda: dict(input=_r(2, 3, 3), value=torch.tensor(1.5, dtype=D)),
        lambda input, value: input * _as_input_dtype(value, input),
        # every real dtype and shape; the value converts to input's dtype
        # a CPU 0-d value is a number: it goes with an input on any device
        {"input": frozenset({"meta", "0-d", "int64", "float16", "float32"}), "value": _VALUE_KINDS},
    ),
    "add_diagonal": Call(
        ops.add_diagonal,
        lambda: dict(input=_r(2, 3, 3), value=torch.tensor(1.5, dtype=D)),
        lambda input, value: input + _as_input_dtype(value, input) * _eye_like(input),
        {"input": frozenset({"meta", "int64", "float16", "float32"}), "value": _VALUE_KINDS},
    ),
}


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
#: Raw operator -> the arguments and variants it takes as valid.
RAW_ACCEPTS = {
    "axpby": {"x": {"0-d"}, "y": {"0-d"}},  # broadcasting
    "scale": {"input": {"0-d"}},  # any shape
    "scale_finite": {"input": {"0-d"}},
}
MODULES = ("axpby", "conv_bn2d", "graph_conv", "lltm", "lltm_sequence", "scalar_ops")


def _raw_samples():
    for module in MODULES:
        tests = importlib.import_module(f"test_ops_{module}").TestSamples
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


def test_every_operator_and_operator_test_file_is_listed_here():
    # a new operator joins CALLS and MODULES (docs/adding-an-operator.md, Tests)
    assert {name.split("(")[0] for name in CALLS} == set(ops.__all__)
    here = Path(__file__).parent
    with_samples = {
        p.stem.removeprefix("test_ops_")
        for p in here.glob("test_ops_*.py")
        if p.name != Path(__file__).name and "class TestSamples(" in p.read_text()
    }
    assert set(MODULES) == with_samples


def test_an_operator_called_while_another_thread_imports_dtensor(monkeypatch):
    """The DTensor check reads torch.distributed.tensor only where it is imported; while
    another thread imports it, the module is listed without DTensor yet. The call is then
    an ordinary one (it raised AttributeError from eight threads)."""
    import sys
    import types

    x, y = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "torch.distributed.tensor", types.ModuleType("partial"))
        got = ops.axpby(x, y, 2.0, 3.0)
    torch.testing.assert_close(got, reference.axpby(x, y, 2.0, 3.0))
