"""The compiled path's record (tensortools/dispatch/compiled_path.py): a wrapper class states
its facts as class attributes (``_fast_*``), the base builds one WrapperRecord from them,
and C reads it by its fields' names; the record follows the class by itself (a hook or a
fact assigned later, a setting changed: no private call); the gate is C's, asked from
Python (``path_of``); torch.compile traces the stand-ins of one module."""

from __future__ import annotations

import gc
import logging

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, capture_logs
from tensortools._native import C
from tensortools._settings import ClassSetting
from tensortools.dispatch import TensorWrapper, polyfills
from tensortools.dispatch.compiled_path import WrapperRecord, path_of
from tensortools.dispatch.wrapper import WrapperPath

#: Calls of every shape the compiled path takes: functions, methods, operators, keywords.
CALLS = {
    "torch.add(x, 1)": lambda x: torch.add(x, 1),
    "torch.neg(x)": lambda x: torch.neg(x),
    "x * x": lambda x: x * x,
    "x.sum(dim=0)": lambda x: x.sum(dim=0),
    "torch.mul(x, 2, out=None)": lambda x: torch.mul(x, 2),
    "x.exp()": lambda x: x.exp(),
    "torch.where(x > 0, x, 0.0)": lambda x: torch.where(x > 0, x, 0.0),
}


def _audited(name: str) -> type:
    """A user type that logs in Python and states, as class attributes, that the compiled
    path stands in for its hooks while its logger is off."""
    logger = logging.getLogger(f"tensortools.test.{name}")
    logger.setLevel(logging.WARNING)

    class Audited(TensorWrapper):
        _fast_wrap = WrapperPath.WRAP
        _fast_logger = logger
        seen: list = []

        @classmethod
        def _python_torch_function(cls, func, types, args=(), kwargs=None):
            cls.seen.append(func)
            return super()._python_torch_function(func, types, args, kwargs)

    return Audited


def _check_result(out, x, call, cls):
    want = call(x.as_subclass(torch.Tensor))
    assert type(out) is cls
    torch.testing.assert_close(out.as_subclass(torch.Tensor), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_user_type_stating_its_facts_gets_the_compiled_path(name):
    call = CALLS[name]
    Audited = _audited("facts")
    x = Audited._make(torch.linspace(-1.0, 2.0, 6).reshape(2, 3))
    assert Audited._fast.kind == WrapperPath.WRAP and Audited._fast.logger is Audited._fast_logger
    _check_result(call(x), x, call, Audited)
    assert Audited.seen == []  # (the compiled path: the Python path never ran)
    Audited._fast_logger.setLevel(logging.INFO)  # a listener: the gate sends calls to Python
    try:
        _check_result(call(x), x, call, Audited)
        assert Audited.seen, "the gate did not send the call to the Python path"
    finally:
        Audited._fast_logger.setLevel(logging.WARNING)


_HOOKS = ("context", "wrap", "fallback", "call_plain", "_python_torch_function")


@pytest.mark.parametrize("hook", _HOOKS)
def test_a_hook_or_fact_assigned_later_is_seen_without_a_private_call(hook):
    class Later(TensorWrapper):
        pass

    class Below(Later):
        pass

    x = Below._make(torch.arange(4.0))
    assert Later._fast.kind == Below._fast.kind == WrapperPath.WRAP
    seen = []
    original = getattr(TensorWrapper, hook).__func__

    def replaced(cls, *args, **kwargs):
        seen.append(hook)
        return original(cls, *args, **kwargs)

    setattr(Later, hook, classmethod(replaced))  # (no call of any private method after it)
    assert Later._fast.kind == Below._fast.kind == WrapperPath.PYTHON
    out = torch.add(x, 1)
    assert hook in seen and type(out) is Below
    assert torch.equal(out.as_subclass(torch.Tensor), torch.arange(4.0) + 1)
    delattr(Later, hook)  # the base's hook again: the compiled path again
    assert Later._fast.kind == Below._fast.kind == WrapperPath.WRAP
    seen.clear()
    torch.add(x, 1)
    assert seen == []


def test_facts_assigned_later_rebuild_the_record():
    class Gated(TensorWrapper):
        pass

    logger = logging.getLogger("tensortools.test.later")
    Gated._fast_logger = logger
    assert Gated._fast.logger is logger
    Gated._fast_wrap = WrapperPath.PLAIN
    assert Gated._fast.kind == WrapperPath.PLAIN
    out = torch.neg(Gated._make(torch.ones(2)))  # PLAIN: the plain call alone
    assert type(out) is torch.Tensor and torch.equal(out, -torch.ones(2))
    del Gated._fast_wrap
    assert Gated._fast.kind == WrapperPath.WRAP


def _check_level(cls, level):
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"{cls.__name__}: 'level' must be an int, got {type(level).__name__}")
    return level


@pytest.mark.parametrize("value", [0, 1, 2, 3])
def test_a_setting_the_facts_require_follows_without_a_private_call(value):
    level = ClassSetting(1, storage="_global_level", check=_check_level)

    class Leveled(TensorWrapper):
        level = ClassSetting  # (replaced below: the body's own descriptor)

    Leveled.level = level
    level.__set_name__(Leveled, "level")
    Leveled._fast_requires = ((level, 1),)
    previous = level.set(Leveled, value)
    try:
        want = WrapperPath.WRAP if value == 1 else WrapperPath.PYTHON
        assert Leveled._fast.kind == want
        x = Leveled._make(torch.ones(3))
        assert path_of(Leveled, torch.add, (Leveled,)) == want
        out = torch.add(x, value)
        assert type(out) is Leveled and torch.equal(
            out.as_subclass(torch.Tensor), 1.0 + value + 0 * x.as_subclass(torch.Tensor)
        )
    finally:
        level.set(Leveled, previous)


def _gate_cases():
    """(cls, func, types, what to set up) over the conditions of the gate."""
    Plain = type("Plain", (TensorWrapper,), {})
    Other = type("Other", (TensorWrapper,), {})
    Handled = type("Handled", (TensorWrapper,), {})
    Handled.implements(torch.sin)(lambda x: "handled")
    return [
        ("a plain call", Plain, torch.add, (Plain,), None, WrapperPath.WRAP),
        ("another type takes part", Plain, torch.add, (Plain, Other), None, WrapperPath.PYTHON),
        (
            "a parent takes part",
            Handled,
            torch.add,
            (Handled, TensorWrapper),
            None,
            WrapperPath.WRAP,
        ),
        ("a handler", Handled, torch.sin, (Handled,), None, WrapperPath.PYTHON),
        ("no handler", Handled, torch.cos, (Handled,), None, WrapperPath.WRAP),
        (
            "strict",
            Plain,
            torch.add,
            (Plain,),
            lambda: Plain.using_policy("strict"),
            WrapperPath.PYTHON,
        ),
        ("metadata", MetadataTensor, torch.add, (MetadataTensor,), None, WrapperPath.WRAP_METADATA),
        (
            "tracking off",
            MetadataTensor,
            torch.add,
            (MetadataTensor,),
            lambda: MetadataTensor.using_tracking(False),
            WrapperPath.PYTHON,
        ),
        ("logging", LoggingTensor, torch.add, (LoggingTensor,), None, WrapperPath.WRAP),
        ("a capture", LoggingTensor, torch.add, (LoggingTensor,), capture_logs, WrapperPath.PYTHON),
        (
            "subclass dispatch off",
            Plain,
            torch.add,
            (Plain,),
            torch._C.DisableTorchFunctionSubclass,
            WrapperPath.PYTHON,
        ),
    ]


def test_the_gate_is_cs_and_python_asks_it():
    for name, cls, func, types, scope, want in _gate_cases():
        if scope is None:
            got = path_of(cls, func, types)
        else:
            with scope():
                got = path_of(cls, func, types)
        assert got == want, name
    with pytest.raises(TypeError, match="'types' a tuple"):
        path_of(MetadataTensor, torch.add, [MetadataTensor])
    with pytest.raises(TypeError, match="'cls' must be a class"):
        path_of(1, torch.add, ())


@pytest.mark.parametrize(
    "record",
    [
        WrapperRecord(kind=int(WrapperPath.WRAP), handlers={}),
        (int(WrapperPath.WRAP), {}, None, None, None, None),  # (by position: not a record)
        None,
    ],
    ids=["record", "tuple", "none"],
)
def test_c_reads_the_record_by_its_class_and_names(record):
    class Read(TensorWrapper):
        pass

    Read._fast = record
    want = WrapperPath.WRAP if type(record) is WrapperRecord else WrapperPath.PYTHON
    assert path_of(Read, torch.add, (Read,)) == want
    out = torch.add(Read._make(torch.ones(2)), 1)
    assert type(out) is Read and torch.equal(out.as_subclass(torch.Tensor), torch.full((2,), 2.0))


def test_a_record_class_without_the_fields_is_refused_by_name():
    from torch.utils._pytree import SUPPORTED_NODES

    from tensortools._settings import OVERRIDES
    from tensortools.dispatch.compiled_path import wrap_result
    from tensortools.dispatch.results import NO_WRAP

    with pytest.raises(TypeError, match="record_type"):
        C.wrapper_dispatch_setup(
            torch.Tensor, frozenset(NO_WRAP), wrap_result, OVERRIDES, SUPPORTED_NODES, tuple
        )


def test_the_stand_ins_cover_every_c_function_a_call_reaches():
    assert set(polyfills.STAND_INS) == {
        C.wrapper_torch_function,
        C.scalar_torch_function,
        C.wrapper_path_of,
    }
    x = torch.ones(3)
    assert polyfills.traced_path_of(MetadataTensor, torch.add, (MetadataTensor,)) == 0
    m = MetadataTensor(x, {"a": 1})
    out = polyfills.traced_torch_function(MetadataTensor, torch.add, (MetadataTensor,), (m, 1))
    assert type(out) is MetadataTensor and out.metadata == {"a": 1}
    assert torch.equal(out.as_subclass(torch.Tensor), x + 1)


@pytest.mark.parametrize("bad", [7, "WRAP", None])
def test_a_bad_fact_is_refused_naming_it(bad):
    with pytest.raises(TypeError, match="'_fast_wrap' must be a WrapperPath"):
        type("Bad", (TensorWrapper,), {"_fast_wrap": bad})
    gc.collect()  # (the class that was refused, out of its parent's subclasses)


def test_only_own_types_is_one_rule_for_both_paths():
    # C's rule against its definition in Python, over every pair of a family of classes
    # (own, parent, child, sibling, foreign, torch.Tensor, a tensor-like, not a class).
    from tensortools import ScalarTensor
    from tensortools.dispatch.compiled_path import only_own_types

    class Base(TensorWrapper):
        pass

    class Child(Base):
        pass

    class Sibling(Base):
        pass

    class Foreign(TensorWrapper):
        pass

    family = [Base, Child, Sibling, Foreign, TensorWrapper, torch.Tensor, ScalarTensor]

    def reference(cls, types):
        return all(
            t is torch.Tensor
            or (isinstance(t, type) and (issubclass(t, cls) or issubclass(cls, t)))
            for t in types
        )

    checked = 0
    for cls in (Base, Child, ScalarTensor):
        for a in family:
            for b in family:
                for types in ((a,), (a, b), ()):
                    assert only_own_types(cls, types) is reference(cls, types), (cls, types)
                    checked += 1
    assert checked == 3 * 7 * 7 * 3
    assert only_own_types(Base, (Base, "not a class")) is False
    with pytest.raises(TypeError, match="'types' a tuple"):
        only_own_types(Base, [Base])
