"""Every wrapper type's two paths give one answer.

Most calls on a TensorWrapper type take the compiled path (csrc/python/wrapper_dispatch.cpp);
the Python path (``_python_torch_function``) defines the behaviour. Every sample of
PyTorch's operator database is run through both, for MetadataTensor (tracking on and
off), LoggingTensor (nothing listening) and a type of a user's own (with a handler), and
the results must agree: the same exception type, or the same structure, types, values
(bit for bit) and metadata.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map_only

from tensortools import LoggingTensor, MetadataTensor, coverage
from tensortools.coverage.samples import _UNDEFINED_VALUES
from tensortools.dispatch import TensorWrapper

pytest.importorskip("expecttest", reason="op_db needs the expecttest package")


class Measured(TensorWrapper):
    """A user's type: results keep the type; abs has a handler of its own."""


@Measured.implements(torch.abs)
def _measured_abs(input):
    with torch._C.DisableTorchFunctionSubclass():
        return Measured._make(torch.abs(input.as_subclass(torch.Tensor)))


@contextlib.contextmanager
def python_path(cls):
    """Every call on cls takes the Python path inside the block."""
    record = cls._fast
    cls._fast = (0, *record[1:])
    try:
        yield
    finally:
        cls._fast = record


def _maker(cls):
    if cls is MetadataTensor:
        return lambda t: MetadataTensor(t, {"k": 1})
    return cls._make


def _fresh(obj, cls):
    """The sample's arguments as new instances of cls (in-place calls change them)."""
    make = _maker(cls)

    def wrap(t):
        with torch._C.DisableTorchFunctionSubclass():
            t = t.detach().clone().requires_grad_(t.requires_grad) if t.is_leaf else t
        try:
            return make(t)
        except TypeError:  # layouts a subclass cannot hold
            return t

    return tree_map_only(torch.Tensor, wrap, obj)


def _run(cls, op, inp, args, kwargs):
    torch.default_generator.manual_seed(0)
    try:
        return op(*_fresh((inp, *args), cls), **_fresh(kwargs, cls)), None
    except Exception as err:  # noqa: BLE001 - compared between the paths
        return None, type(err)


def _describe(result) -> list:
    """Each leaf of a result as (type, dtype, shape, metadata) and its plain value."""
    leaves, spec = tree_flatten(result)
    described = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            with torch._C.DisableTorchFunctionSubclass():
                plain = leaf.as_subclass(torch.Tensor) if leaf.layout == torch.strided else leaf
                described.append(
                    (
                        type(leaf).__name__,
                        leaf.dtype,
                        tuple(leaf.shape),
                        leaf.__dict__.get("metadata"),
                        plain,
                    )
                )
        else:
            described.append((type(leaf).__name__, leaf))
    return [str(spec), described]


def _differ(a, b) -> str:
    (spec_a, leaves_a), (spec_b, leaves_b) = _describe(a), _describe(b)
    if spec_a != spec_b or len(leaves_a) != len(leaves_b):
        return f"structure {spec_a} vs {spec_b}"
    for x, y in zip(leaves_a, leaves_b):
        if len(x) != len(y) or x[:-1] != y[:-1]:
            return f"{x[:-1]} vs {y[:-1]}"
        vx, vy = x[-1], y[-1]
        if isinstance(vx, torch.Tensor):
            if vx.layout != vy.layout:
                return f"layout {vx.layout} vs {vy.layout}"
            if vx.layout == torch.strided and "empty" not in str(vx.__class__):
                try:
                    torch.testing.assert_close(vx, vy, rtol=0, atol=0, equal_nan=True)
                except AssertionError as err:
                    return str(err).splitlines()[0]
        elif not (vx == vy or vx != vx and vy != vy):  # (nan equals nan)
            return f"{vx!r} vs {vy!r}"
    return ""


CASES = {
    "MetadataTensor tracking": (MetadataTensor, True),
    "MetadataTensor not tracking": (MetadataTensor, False),
    "LoggingTensor": (LoggingTensor, True),
    "user type": (Measured, True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_and_python_paths_agree_on_every_op_db_sample(case):
    cls, tracking = CASES[case]
    assert cls._fast[0] != 0, "the compiled path is not taken at all"
    cases = list(coverage.sample_cases(max_samples=2))
    assert len(cases) > 1000
    failures = []
    previous = MetadataTensor.set_tracking(tracking)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, op, inp, args, kwargs in cases:
                fast, fast_error = _run(cls, op, inp, args, kwargs)
                with python_path(cls):
                    slow, slow_error = _run(cls, op, inp, args, kwargs)
                if fast_error or slow_error:
                    if fast_error is not slow_error:
                        failures.append(f"{name}: raised {fast_error} vs {slow_error}")
                    continue
                if name in _UNDEFINED_VALUES:
                    fast, slow = tree_map_only(torch.Tensor, lambda t: t.shape, (fast, slow))
                reason = _differ(fast, slow)
                if reason:
                    failures.append(f"{name}: {reason}")
    finally:
        MetadataTensor.set_tracking(previous)
    assert not failures, f"{len(failures)} samples differ:\n" + "\n".join(failures[:40])


def test_sparse_results_are_refused_on_both_paths():
    for path in (contextlib.nullcontext(), python_path(MetadataTensor)):
        with path:
            with pytest.raises(TypeError, match="cannot hold a result of layout"):
                MetadataTensor(torch.eye(3), {}).to_sparse()
