"""Every wrapper type's two paths give one answer.

Most calls on a TensorWrapper type take the compiled path (csrc/python/wrapper_dispatch.cpp);
the Python path (``_python_torch_function``) defines the behaviour. Every sample of
PyTorch's operator database is run through both, for MetadataTensor (tracking on and
off), LoggingTensor (nothing listening) and a type of a user's own (with a handler), and
the results must agree: the same exception type, or the same structure, types, values
(bit for bit) and metadata.
"""

from __future__ import annotations

import collections
import contextlib
import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map_only

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs, coverage
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


# -- cases found by review: each compares the two paths on a class of input ----------------


def _both_paths(cls, func, *args, **kwargs):
    fast = func(*args, **kwargs)
    with python_path(cls):
        slow = func(*args, **kwargs)
    return fast, slow


def test_list_and_tuple_subclasses_find_the_same_metadata():
    class Items(list):
        pass

    Pair = collections.namedtuple("Pair", "a b")
    a, b = MetadataTensor(torch.ones(2), {"k": 1}), torch.zeros(2)
    for container in (Items([b, a]), Pair(b, a), [b, [b, (a,)]], ((((a,),),),)):
        fast, slow = _both_paths(MetadataTensor, torch.cat, [torch.cat(_flat(container))])
        assert fast.metadata == slow.metadata, container
    for container in (Items([b, a]), Pair(b, a)):
        fast, slow = _both_paths(MetadataTensor, torch.stack, container)
        assert fast.metadata == slow.metadata and torch.equal(fast, slow)


def _flat(container):
    return (
        list(tree_flatten(container)[0])
        if not isinstance(container, list)
        else [t for t in tree_flatten(list(container))[0]]
    )


def test_results_carry_the_gradients_of_the_python_path():
    # (C-path results are new tensors; the Python path's are as_subclass aliases of the
    # plain result: views of it, with an AliasBackward0 node. Values, types and gradients
    # agree.)
    for cls in (MetadataTensor, LoggingTensor, Measured):
        leaf = torch.ones(3, requires_grad=True)
        x = _maker(cls)(leaf)
        fast, slow = _both_paths(cls, torch.mul, x, 2)
        assert type(fast) is type(slow) is cls and torch.equal(fast, slow)
        assert getattr(fast, "metadata", None) == getattr(slow, "metadata", None)
        (fast.sum() + 10 * slow.sum()).backward()
        assert torch.equal(leaf.grad, torch.full((3,), 22.0))


def test_a_capture_does_not_change_values_types_or_gradients():
    leaf = torch.ones(3, requires_grad=True)
    x = LoggingTensor(leaf)
    y = torch.sin(x) * 2
    with capture_logs() as logs:
        z = torch.sin(x) * 2
    assert len(logs) == 2 and type(y) is type(z) is LoggingTensor and torch.equal(y, z)
    (y.sum() + z.sum()).backward()
    torch.testing.assert_close(leaf.grad, 4 * torch.cos(torch.ones(3)), rtol=0, atol=0)


class Dispatching(TensorWrapper):
    """A wrapper type with a __torch_dispatch__ of its own, below autograd."""

    seen: list = []

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(str(func))
        with torch._C._DisableTorchDispatch():
            args = [
                torch.Tensor._make_subclass(torch.Tensor, a) if isinstance(a, cls) else a
                for a in args
            ]
        return func(*args, **(kwargs or {}))


def test_torch_dispatch_of_a_subclass_sees_calls_on_either_paths_results():
    assert Dispatching._fast[0] == 0  # (only as_subclass sets the keys it needs)
    x = Dispatching._make(torch.ones(3))
    for result in _both_paths(Dispatching, torch.add, x, 1):
        assert torch._C._dispatch_keys(result).has(torch._C.DispatchKey.Python)
        Dispatching.seen.clear()
        torch.mul(result, 2)
        assert Dispatching.seen == ["aten.mul.Tensor"]


def test_static_hooks_and_hooks_assigned_later_take_the_python_path():
    class Static(TensorWrapper):
        @staticmethod
        def wrap(tensor, context):
            out = tensor.as_subclass(Static)
            out.tag = "static"
            return out

    assert Static._fast[0] == 0 and torch.neg(Static._make(torch.ones(1))).tag == "static"

    class Later(TensorWrapper):
        pass

    Later.wrap = classmethod(lambda cls, t, c: "custom wrap")
    Later._on_settings_change()  # (as the record's comment says)
    assert torch.neg(Later._make(torch.ones(1))) == "custom wrap"


def test_torch_function_modes_see_operators_between_scalar_tensors():
    class Seen(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", str(func)))
            if ScalarTensor in types:
                return ScalarTensor.__torch_function__(func, types, args, kwargs)
            return func(*args, **(kwargs or {}))

    a, b = ScalarTensor(3, 2.0), ScalarTensor(3, 5.0)
    with Seen() as mode:
        total = a + b
    assert mode.names[0] == "__add__" and total.value == 7.0


def test_concurrent_setters_leave_a_record_that_matches_the_settings():
    import sys
    import threading

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(100):
            barrier = threading.Barrier(2)

            def toggle_tracking():
                barrier.wait()
                for value in (False, True, False, True):
                    MetadataTensor.set_tracking(value)

            def to_union():
                barrier.wait()
                MetadataTensor.set_merge_policy("union")

            threads = [threading.Thread(target=toggle_tracking), threading.Thread(target=to_union)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert MetadataTensor._fast[0] == 0, trial  # union: the Python path
            MetadataTensor.set_merge_policy("first")
            assert MetadataTensor._fast[0] == 2
    finally:
        sys.setswitchinterval(old_interval)
        MetadataTensor.set_merge_policy("first")
        MetadataTensor.set_tracking(True)
