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
import operator
import warnings

import pytest
import torch
from _support import tiers
from torch.utils._pytree import tree_flatten, tree_map_only

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs, coverage
from tensortools.coverage.samples import UNDEFINED_VALUES
from tensortools.dispatch import TensorWrapper
from tensortools.dispatch.wrapper import WrapperPath

pytest.importorskip("expecttest", reason="op_db needs the expecttest package")


class Measured(TensorWrapper):
    """A user's type: results keep the type; abs has a handler of its own."""


@Measured.implements(torch.abs)
def _measured_abs(input):
    with torch._C.DisableTorchFunctionSubclass():
        return Measured._make(torch.abs(input.as_subclass(torch.Tensor)))


class Validated(MetadataTensor):
    """A user's subclass keeping its metadata behind a validating property, stored under
    another name (the compiled path must read and write it through the property)."""

    @property
    def metadata(self):
        return self.__dict__["_checked"]

    @metadata.setter
    def metadata(self, value):
        if not isinstance(value, dict):
            raise TypeError("metadata must be a dict")
        self.__dict__["_checked"] = dict(value, checked=True)


class Child(MetadataTensor):
    """A plain subclass, mixed with its parent's instances in one call."""


@contextlib.contextmanager
def python_path(*classes):
    """Every call on the classes takes the Python path inside the block."""
    records = [cls._fast for cls in classes]
    for cls, record in zip(classes, records):
        cls._fast = (0, *record[1:])
    try:
        yield
    finally:
        for cls, record in zip(classes, records):
            cls._fast = record


def _batch(t):
    """t as a batch of t.shape[0] samples (a 0-d tensor: not a batch)."""
    if t.dim() == 0:
        return MetadataTensor(t, {"k": 1})
    return MetadataTensor.wrap_batch(t, {"id": list(range(t.shape[0]))}, t.shape[0])


def _maker(cls):
    if cls is MetadataTensor:
        return lambda t: MetadataTensor(t, {"k": 1})
    if cls is _BATCH:
        return _batch
    if cls is Validated:
        return lambda t: Validated(t, {"k": 1})
    if cls is Child:  # the first tensor the parent's, the others the child's
        made = []

        def make(t):
            made.append(t)
            if len(made) == 1:
                return MetadataTensor(t, {"k": 1, "parent": True})
            return Child(t, {"k": 1, "child": len(made)})

        return make
    return cls._make


def _fresh(obj, cls, make=None):
    """The sample's arguments as new instances of cls (in-place calls change them)."""
    make = make or _maker(cls)

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
    make = _maker(cls)  # (one maker for the whole sample: Child's counts the tensors)
    try:
        return op(*_fresh((inp, *args), cls, make), **_fresh(kwargs, cls, make)), None
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
                        getattr(leaf, "metadata", None),
                        getattr(leaf, "batch_size", None),
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


#: (a stand-in for MetadataTensor in CASES: its instances are batches)
_BATCH = type("_Batch", (), {})

CASES = {
    "MetadataTensor tracking": (MetadataTensor, True),
    "MetadataTensor batches": (_BATCH, True),
    "MetadataTensor not tracking": (MetadataTensor, False),
    "LoggingTensor": (LoggingTensor, True),
    "user type": (Measured, True),
    "subclass with a metadata property": (Validated, True),
    "parent and subclass mixed": (Child, True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_and_python_paths_agree_on_every_op_db_sample(case):
    maker, tracking = CASES[case]
    cls = MetadataTensor if maker is _BATCH else maker
    assert cls._fast.kind != WrapperPath.PYTHON, "the compiled path is not taken at all"
    # every op_db entry in the full tier, by default the seeded fifth every sweep shares
    ops = tiers.op_db_names(5)
    cases = list(coverage.sample_cases(max_samples=2, ops=ops))
    assert len(cases) > (1000 if tiers.full() else 200)
    failures = []
    previous = MetadataTensor.set_tracking(tracking)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, op, inp, args, kwargs in cases:
                fast, fast_error = _run(maker, op, inp, args, kwargs)
                with python_path(cls, MetadataTensor):
                    slow, slow_error = _run(maker, op, inp, args, kwargs)
                if fast_error or slow_error:
                    if fast_error is not slow_error:
                        failures.append(f"{name}: raised {fast_error} vs {slow_error}")
                    continue
                if name in UNDEFINED_VALUES:
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
    for container in (Items([b, a]), Pair(b, a)):  # (along dim 1: not a batch of samples)
        fast, slow = _both_paths(MetadataTensor, torch.stack, container, dim=1)
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
    assert Dispatching._fast.kind == WrapperPath.PYTHON  # (only as_subclass sets the keys it needs)
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

    assert (
        Static._fast.kind == WrapperPath.PYTHON
        and torch.neg(Static._make(torch.ones(1))).tag == "static"
    )

    class Later(TensorWrapper):
        pass

    Later.wrap = classmethod(lambda cls, t, c: "custom wrap")  # (the record follows by itself)
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
            assert MetadataTensor._fast.kind == WrapperPath.PYTHON, trial  # union: the Python path
            MetadataTensor.set_merge_policy("first")
            assert MetadataTensor._fast.kind == WrapperPath.WRAP_METADATA
    finally:
        sys.setswitchinterval(old_interval)
        MetadataTensor.set_merge_policy("first")
        MetadataTensor.set_tracking(True)


# -- metadata from every argument that carries it, results returned as they are ---------

POLICIES = ["first", "union", "strict", lambda dicts: {"count": len(dicts)}]


def _merged(policy, dicts):
    """The reference merge of the argument dicts, in argument order."""
    if not dicts:
        return {}
    if callable(policy):
        return policy(dicts)
    if policy == "first":
        return dict(dicts[0])
    merged = {}
    for d in dicts:
        for key, value in d.items():
            if policy == "strict" and key in merged and merged[key] != value:
                raise ValueError(key)
            merged.setdefault(key, value)
    return merged


# (arguments of a call, as a function of parent p, child c, plain t) -> the call
MIXED_CALLS = {
    "add(parent, child)": lambda p, c, t: ((p, c), {}, torch.add),
    "add(child, parent)": lambda p, c, t: ((c, p), {}, torch.add),
    "add(input=child, other=parent)": lambda p, c, t: ((), {"input": c, "other": p}, torch.add),
    "cat(tensors=[plain, parent, child])": lambda p, c, t: ((), {"tensors": [t, p, c]}, torch.cat),
    "cat([child, plain, parent])": lambda p, c, t: (([c, t, p],), {}, torch.cat),
    # (along dim 1: along dim 0 samples make a batch, which needs the same keys)
    "stack((parent, (child,)), dim=1)": lambda p, c, t: (([p, c],), {"dim": 1}, torch.stack),
    "where(mask, other=parent, input=child)": lambda p, c, t: (
        (t > 0, c),
        {"other": p},
        torch.where,
    ),
}


@pytest.mark.parametrize("policy", POLICIES, ids=["first", "union", "strict", "callable"])
@pytest.mark.parametrize("call", MIXED_CALLS)
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_every_policy_sees_the_metadata_of_every_class(policy, call, path):
    """A call mixing a MetadataTensor with an instance of a subclass (and sibling
    subclasses) merges the metadata of every carrying argument, in argument order, under
    every policy, on both paths."""
    parent = MetadataTensor(torch.tensor([1.0, -2.0]), {"k": 1, "parent": "p"})
    child = Child(torch.tensor([3.0, 4.0]), {"k": 1, "child": "c"})
    plain = torch.tensor([0.5, -0.5])
    args, kwargs, func = MIXED_CALLS[call](parent, child, plain)
    order = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, MetadataTensor)]
    expected = _merged(policy, [a.metadata for a in order])
    context = python_path(Child, MetadataTensor) if path == "python" else contextlib.nullcontext()
    with context, MetadataTensor.using_merge_policy(policy):
        result = func(*args, **kwargs)
    assert isinstance(result, MetadataTensor)
    assert result.metadata == expected


@pytest.mark.parametrize("policy", ["first", "union", "strict"])
def test_strict_policy_sees_a_parents_conflicting_metadata(policy):
    parent = MetadataTensor(torch.ones(2), {"k": 1})
    child = Child(torch.ones(2), {"k": 2})
    with MetadataTensor.using_merge_policy(policy):
        if policy == "strict":
            with pytest.raises(ValueError, match="conflicting values 2 and 1"):
                child + parent
        else:
            assert (child + parent).metadata == {"k": 2}


def test_a_property_subclass_keeps_its_metadata_on_every_path():
    v = Validated(torch.ones(3), {"k": 1})
    assert v.metadata == {"k": 1, "checked": True} and "metadata" not in v.__dict__
    for result in _both_paths(Validated, torch.add, v, 1):
        assert type(result) is Validated
        assert result.metadata == {"k": 1, "checked": True}  # (the setter ran once more)
    for result in _both_paths(Validated, torch.max, v, dim=0):
        assert result.values.metadata == {"k": 1, "checked": True}


def test_a_weakly_held_result_is_left_to_its_holder():
    """A result that only a weak reference (a cache) holds besides the call: the compiled
    path wraps an alias, as the Python path does, and the cache's object stays plain."""
    import weakref

    store, cache = [], weakref.WeakValueDictionary()

    def pop_cached(x):
        if torch.overrides.has_torch_function((x,)):
            return torch.overrides.handle_torch_function(pop_cached, (x,), x)
        return store.pop()

    m = MetadataTensor(torch.ones(2), {"k": 1})
    for path in (contextlib.nullcontext(), python_path(MetadataTensor)):
        store.append(torch.zeros(2))
        cache["held"] = store[0]
        with path:
            result = pop_cached(m)
        assert type(result) is MetadataTensor and result.metadata == {"k": 1}
        assert type(cache["held"]) is torch.Tensor
        assert result is not cache["held"] and result.data_ptr() == cache["held"].data_ptr()
    # nothing holds it: the compiled path may change the new tensor itself (no alias)
    store.append(torch.zeros(2))
    assert type(pop_cached(m)) is MetadataTensor


IN_PLACE = {
    "plain.add_(m)": lambda plain, m: plain.add_(m),
    "plain += m": lambda plain, m: operator.iadd(plain, m),
    "plain.mul_(m)": lambda plain, m: plain.mul_(m),
    "plain.copy_(m)": lambda plain, m: plain.copy_(m),
    "torch.add(m, 1, out=plain)": lambda plain, m: torch.add(m, 1, out=plain),
    "torch.mul(m, m, out=plain)": lambda plain, m: torch.mul(m, m, out=plain),
    "torch.cat([m, m], out=plain)": lambda plain, m: torch.cat([m[:1], m[1:]], out=plain),
    "F.relu(plain, inplace=True) + m": lambda plain, m: torch.nn.functional.relu_(plain),
    "plain.clamp_(min=m)": lambda plain, m: plain.clamp_(min=m),
    "torch.max(m, 0, out=(v, i))": lambda plain, m: torch.max(
        m.unsqueeze(1), 1, out=(plain, torch.empty(2, dtype=torch.long))
    )[0],
}


@pytest.mark.parametrize("kind", [MetadataTensor, LoggingTensor, Measured])
@pytest.mark.parametrize("call", IN_PLACE)
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_in_place_on_a_plain_tensor_returns_it_itself(kind, call, path):
    """A call that writes into a plain tensor (in place, out=) with a typed argument
    returns that very tensor, still plain, as torch does without types; the values are
    those of the plain computation."""
    m = kind._make(torch.tensor([1.5, -2.0])) if kind is not MetadataTensor else None
    m = m if m is not None else MetadataTensor(torch.tensor([1.5, -2.0]), {"k": 1})
    plain = torch.tensor([0.25, 4.0])
    expected_target = plain.clone()
    expected = IN_PLACE[call](expected_target, m.as_subclass(torch.Tensor))
    context = python_path(kind) if path == "python" else contextlib.nullcontext()
    with context:
        result = IN_PLACE[call](plain, m)
    assert result is plain and type(plain) is torch.Tensor
    assert torch.equal(plain, expected_target) and torch.equal(result, expected)


RETURNED_UNWRITTEN = {
    "plain.to(m) (no conversion: torch returns plain)": lambda plain, m: plain.to(m),
    "plain.type_as(m)": lambda plain, m: plain.type_as(m),
    "histogramdd(m, bins=[plain]) bin edges": lambda plain, m: torch.histogramdd(
        m.reshape(2, 1), [plain.sort().values]
    ).bin_edges[0],
}


@pytest.mark.parametrize("kind", [MetadataTensor, LoggingTensor, Measured])
@pytest.mark.parametrize("call", RETURNED_UNWRITTEN)
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_an_argument_returned_unwritten_is_wrapped_as_a_result(kind, call, path):
    """A call that returns a plain argument it did not write (torch's to() or type_as()
    returning its input, histogramdd returning the given bin edges) gives a result of the
    type, as any other result, and leaves the argument plain."""
    m = kind._make(torch.tensor([1.5, -2.0])) if kind is not MetadataTensor else None
    m = m if m is not None else MetadataTensor(torch.tensor([1.5, -2.0]), {"k": 1})
    plain = torch.tensor([0.25, 4.0])
    context = python_path(kind) if path == "python" else contextlib.nullcontext()
    with context:
        result = RETURNED_UNWRITTEN[call](plain, m)
    assert isinstance(result, kind) and type(plain) is torch.Tensor
    if kind is MetadataTensor:
        assert result.metadata == {"k": 1}
