"""The settings' thread model: context managers act in their own thread only and restore
exactly, whatever other threads do meanwhile; the set_* functions act for every thread.

Two threads step through deliberate interleavings of their blocks (A enters, B enters, A
leaves, B leaves; and B leaves first), each checking after every step what it sees,
while the main thread, which overrides nothing, must keep seeing the process-wide value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs
from tensortools.dispatch import TensorWrapper

ORDERS = [("A+", "B+", "A-", "B-"), ("A+", "B+", "B-", "A-"), ("B+", "A+", "A-", "B-")]


def run_in_turns(order, steps: dict[str, Callable[[], None]]) -> None:
    """Run steps named like "A+" in two threads A and B, one at a time, in `order`;
    re-raise the first failure."""
    turn, errors = [0], []
    cond = threading.Condition()

    def worker(name: str) -> None:
        for index, step in enumerate(order):
            if step[0] != name:
                continue
            with cond:
                if not cond.wait_for(lambda: turn[0] == index or errors, timeout=30):
                    errors.append(TimeoutError(step))
                if errors:
                    return
            try:
                steps[step]()
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)
            with cond:
                turn[0] += 1
                cond.notify_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def check_thread_local(
    enter: Callable[[str], Any], seen: Callable[[], Any], values: dict[str, Any], default: Any
) -> None:
    """For each order: thread X enters a block (enter(X) returns its context manager) that
    makes seen() give values[X] in that thread, until it leaves; everyone else sees
    default, the process-wide value, before, during and after."""
    for order in ORDERS:
        managers: dict[str, Any] = {}
        inside: set[str] = set()

        def step(name: str, entering: bool) -> Callable[[], None]:
            def act() -> None:
                if entering:
                    managers[name] = enter(name)
                    managers[name].__enter__()
                    inside.add(name)
                else:
                    managers[name].__exit__(None, None, None)
                    inside.discard(name)
                assert seen() == (values[name] if name in inside else default), (order, name)
                assert main_view[-1] == default

            return act

        main_view = [seen()]
        steps = {f"{n}+": step(n, True) for n in "AB"} | {f"{n}-": step(n, False) for n in "AB"}
        run_in_turns(order, steps)
        assert seen() == default, order


def test_tracking_is_per_thread():
    def seen():
        return type(torch.add(MetadataTensor(torch.ones(2), {"k": 1}), 1)).__name__

    check_thread_local(
        lambda n: MetadataTensor.using_tracking(n == "B"),
        seen,
        {"A": "Tensor", "B": "MetadataTensor"},
        "MetadataTensor",
    )


def test_merge_policy_is_per_thread():
    def seen():
        a, b = MetadataTensor(torch.ones(1), {"a": 1}), MetadataTensor(torch.ones(1), {"b": 2})
        return tuple(sorted((a + b).metadata))

    check_thread_local(
        lambda n: MetadataTensor.using_merge_policy("union" if n == "A" else "first"),
        seen,
        {"A": ("a", "b"), "B": ("a",)},
        ("a",),
    )


class Strictable(TensorWrapper):
    pass


class StrictableChild(Strictable):
    pass


@pytest.mark.parametrize(
    "cls,make",
    [
        (ScalarTensor, lambda: ScalarTensor(2, 1.0)),
        (MetadataTensor, lambda: MetadataTensor(torch.ones(2))),
        (Strictable, lambda: StrictableChild(torch.ones(2))),  # a subclass follows its parent
    ],
    ids=["ScalarTensor", "MetadataTensor", "user type"],
)
def test_policy_is_per_thread(cls, make):
    def seen():
        try:
            torch.exp(make())
            return "fallback"
        except TypeError:
            return "strict"

    check_thread_local(
        lambda n: cls.using_policy("strict" if n == "A" else "fallback"),
        seen,
        {"A": "strict", "B": "fallback"},
        "fallback",
    )
    assert cls.policy == "fallback"


def test_capture_logs_collects_its_own_thread_only():
    logger = logging.getLogger("tensortools.logging")
    level, handlers = logger.level, list(logger.handlers)
    for order in ORDERS:
        logs, managers, idents = {}, {}, {}

        def step(name: str, entering: bool) -> Callable[[], None]:
            def act() -> None:
                if entering:
                    managers[name] = capture_logs()
                    logs[name] = managers[name].__enter__()
                    idents[name] = threading.get_ident()
                torch.neg(LoggingTensor(torch.ones(1)))
                if not entering:
                    managers[name].__exit__(None, None, None)
                    torch.neg(LoggingTensor(torch.ones(1)))  # after its block: not captured

            return act

        with capture_logs() as main_logs:
            run_in_turns(order, {f"{n}{s}": step(n, s == "+") for n in "AB" for s in "+-"})
        assert main_logs == [], order
        for name in "AB":
            # its call after entering and its call before leaving; no other thread's
            assert len(logs[name]) == 2, (order, name)
            assert {r.thread for r in logs[name]} == {idents[name]}
    assert logger.level == level and logger.handlers == handlers


def test_capture_logs_leaves_the_logger_alone():
    logger = logging.getLogger("tensortools.logging")
    seen = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record)

    handler = Collect()
    logger.addHandler(handler)
    try:
        level = logger.level
        with capture_logs() as logs:
            torch.neg(LoggingTensor(torch.ones(1)))
            assert logger.level == level
        assert len(logs) == 1 and seen == []  # not enabled for INFO: handlers get nothing
        logger.setLevel(logging.INFO)
        with capture_logs() as logs:
            torch.neg(LoggingTensor(torch.ones(1)))
        assert len(logs) == 1 and len(seen) == 1  # enabled: both
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_global_setters_act_for_every_thread():
    results = {}

    def worker():
        results["tracking"] = type(torch.neg(MetadataTensor(torch.ones(1)))).__name__
        try:
            torch.exp(ScalarTensor(2, 1.0))
            results["policy"] = "fallback"
        except TypeError:
            results["policy"] = "strict"

    previous = MetadataTensor.set_tracking(False), ScalarTensor.set_policy("strict")
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    finally:
        MetadataTensor.set_tracking(previous[0])
        ScalarTensor.set_policy(previous[1])
    assert results == {"tracking": "Tensor", "policy": "strict"}


def test_a_thread_override_beats_the_global_value_in_that_thread_only():
    previous = ScalarTensor.set_policy("strict")
    try:
        with ScalarTensor.using_policy("fallback"):
            torch.exp(ScalarTensor(2, 1.0))  # the override holds here
            assert ScalarTensor.policy == "fallback"
        assert ScalarTensor.policy == "strict"
    finally:
        ScalarTensor.set_policy(previous)


def test_class_body_policy_and_bad_policies():
    class Declared(TensorWrapper):
        policy = "strict"

    assert Declared.policy == "strict" and TensorWrapper.policy == "fallback"
    with Declared.using_policy("fallback"):
        assert Declared.policy == "fallback"
    assert Declared.policy == "strict"
    with pytest.raises(ValueError, match="'policy' must be one of"):

        class Bad(TensorWrapper):  # noqa: F841
            policy = "lenient"

    with pytest.raises(ValueError, match="'policy' must be one of"):
        ScalarTensor.using_policy("lenient")
    with pytest.raises(ValueError, match="'policy' must be one of"):
        MetadataTensor.using_merge_policy("sometimes")


def test_class_body_settings_of_a_metadata_tensor_subclass():
    class Untracked(MetadataTensor):
        tracking = False

    class Unioned(MetadataTensor):
        merge_policy = "union"

    assert type(torch.neg(Untracked(torch.ones(1), {"k": 1}))) is torch.Tensor
    a, b = Unioned(torch.ones(1), {"a": 1}), Unioned(torch.ones(1), {"b": 2})
    assert (a + b).metadata == {"a": 1, "b": 2}
    assert MetadataTensor.tracking is True and MetadataTensor.merge_policy == "first"
    with Untracked.using_tracking(True):
        assert isinstance(torch.neg(Untracked(torch.ones(1))), Untracked)
    with pytest.raises(ValueError, match="'policy' must be one of"):

        class Bad(MetadataTensor):  # noqa: F841
            merge_policy = "sometimes"


def test_blocks_that_end_out_of_order_leave_nothing_behind():
    """A generator suspended inside a block and closed after its caller's block ended:
    each block removes its own override only."""

    def policy_block():
        with ScalarTensor.using_policy("strict"):
            yield

    def capture_block():
        with capture_logs() as logs:
            yield logs

    with MetadataTensor.using_tracking(False):
        suspended = policy_block()
        next(suspended)
        assert ScalarTensor.policy == "strict"  # (the generator runs in this context)
    assert MetadataTensor.tracking is True and ScalarTensor.policy == "strict"
    suspended.close()
    assert MetadataTensor.tracking is True and ScalarTensor.policy == "fallback"
    assert type(torch.neg(MetadataTensor(torch.ones(1), {"k": 1}))) is MetadataTensor

    with capture_logs() as outer:
        suspended = capture_block()
        inner = next(suspended)
    suspended.close()
    torch.neg(LoggingTensor(torch.ones(1)))  # after both blocks: nobody collects it
    assert len(outer) == 0 and len(inner) == 0


def test_a_block_ended_in_another_thread_ends_in_its_own():
    """A block left from another thread (its generator finalized there) takes its override
    back from the thread that opened it, and leaves the other thread's alone."""
    block = ScalarTensor.using_policy("strict")
    block.__enter__()
    seen = []

    def leave_elsewhere():
        with MetadataTensor.using_tracking(False):
            block.__exit__(None, None, None)
            seen.append((ScalarTensor.policy, MetadataTensor.tracking))

    thread = threading.Thread(target=leave_elsewhere)
    thread.start()
    thread.join()
    assert seen == [("fallback", False)]
    assert ScalarTensor.policy == "fallback" and MetadataTensor.tracking is True


# Every kind of block, with what the calling thread sees inside it and outside.
BLOCKS = {
    "tracking": (lambda: MetadataTensor.using_tracking(False), lambda: MetadataTensor.tracking),
    "merge_policy": (
        lambda: MetadataTensor.using_merge_policy("union"),
        lambda: MetadataTensor.merge_policy,
    ),
    "using_policy ScalarTensor": (
        lambda: ScalarTensor.using_policy("strict"),
        lambda: ScalarTensor.policy,
    ),
    "using_policy MetadataTensor": (
        lambda: MetadataTensor.using_policy("strict"),
        lambda: MetadataTensor.policy,
    ),
    "using_policy user type": (
        lambda: Strictable.using_policy("strict"),
        lambda: StrictableChild.policy,
    ),
    "capture_logs": (capture_logs, lambda: _collected_now()),
}


def _collected_now() -> bool:
    """Whether a call on a LoggingTensor made now in this thread lands in any capture."""
    from tensortools.types.logging_tensor import _CAPTURES

    return _CAPTURES.get() is not None


def _finalize_close(holder):
    holder.pop().close()


def _finalize_throw(holder):
    with pytest.raises(KeyError):
        holder.pop().throw(KeyError("stop"))


def _finalize_drop(holder):
    holder.clear()  # the last reference: CPython finalizes the generator here


FINALIZERS = {"close": _finalize_close, "throw": _finalize_throw, "drop": _finalize_drop}


@pytest.mark.parametrize("finalize", FINALIZERS)
@pytest.mark.parametrize("where", ["other thread", "same thread, after the caller's block"])
@pytest.mark.parametrize("kind", BLOCKS)
def test_a_block_held_by_a_generator_ends_wherever_the_generator_is_finalized(
    kind, where, finalize
):
    """A block opened inside a generator that is finalized in another thread (closed,
    thrown into, or dropped) ends in the thread that opened it, and leaves the finalizing
    thread's own settings alone; nothing stays behind in either."""
    block, seen = BLOCKS[kind]
    outside = seen()

    def holding():
        with block():
            yield seen()
            yield "never reached"

    holder = [holding()]  # (the generator's only reference: "drop" clears it)
    inside = next(holder[0])
    assert inside != outside and seen() == inside  # (the generator ran in this thread)
    if where == "other thread":
        errors, finalizer_saw = [], []

        def finalize_there():
            try:
                finalizer_saw.append(seen())
                FINALIZERS[finalize](holder)
                finalizer_saw.append(seen())
            except BaseException as err:  # noqa: BLE001 - re-raised below
                errors.append(err)

        thread = threading.Thread(target=finalize_there)
        thread.start()
        thread.join(30)
        assert not errors, errors
        assert finalizer_saw == [outside, outside]  # its own thread never saw the block
    else:
        with MetadataTensor.using_tracking(True), ScalarTensor.using_policy("fallback"):
            pass  # (another block opened and closed meanwhile)
        FINALIZERS[finalize](holder)
    assert not holder and seen() == outside
    from tensortools._settings import OVERRIDES
    from tensortools.types.logging_tensor import _CAPTURES

    assert OVERRIDES.get() is None and _CAPTURES.get() is None


def test_a_capture_finalized_elsewhere_stops_collecting():
    """The cost the audit measured: a capture left open collected every later call."""

    def capturing():
        with capture_logs() as logs:
            yield logs

    gen = capturing()
    logs = next(gen)
    thread = threading.Thread(target=gen.close)
    thread.start()
    thread.join(30)
    x = LoggingTensor(torch.ones(2))
    for _ in range(100):
        x = x + 1
    assert len(logs) == 0


# -- one vocabulary: every setting of every type is set, scoped and read the same way ----

#: Two valid values of each setting (the default first) and one it refuses.
VALUES = {
    "policy": ("fallback", "strict", "lenient"),
    "merge_policy": ("first", "union", "sometimes"),
    "tracking": (True, False, None),
}


def settings_of(cls: type) -> dict[str, Any]:
    """name -> ClassSetting, for every setting cls has (its own and its parents')."""
    from tensortools._settings import ClassSetting

    found = {}
    for klass in reversed(cls.__mro__):
        found.update({n: s for n, s in vars(klass).items() if isinstance(s, ClassSetting)})
    return found


SETTINGS = [
    (cls, name)
    for cls in (ScalarTensor, MetadataTensor, LoggingTensor, Strictable, StrictableChild)
    for name in settings_of(cls)
]


def test_every_type_has_the_settings_it_documents():
    assert {(c.__name__, n) for c, n in SETTINGS} >= {
        (t, "policy") for t in ("ScalarTensor", "MetadataTensor", "LoggingTensor", "Strictable")
    } | {("MetadataTensor", "merge_policy"), ("MetadataTensor", "tracking")}
    assert all(name in VALUES for _, name in SETTINGS)


@pytest.mark.parametrize("cls,name", SETTINGS, ids=lambda x: getattr(x, "__name__", x))
def test_every_setting_is_set_scoped_and_read_one_way(cls, name):
    default, other, refused = VALUES[name]
    setter, scope = getattr(cls, f"set_{name}"), getattr(cls, f"using_{name}")
    assert getattr(cls, name) == default
    with scope(other):
        assert getattr(cls, name) == other
        assert settings_of(cls)[name].value_for(cls) == other  # (the call-time read)
    assert getattr(cls, name) == default
    assert setter(other) == default
    try:
        assert getattr(cls, name) == other
        with scope(default):
            assert getattr(cls, name) == default
        assert getattr(cls, name) == other
    finally:
        assert setter(default) == other
    word = f"'{name.rsplit('_')[-1]}"  # (the error names the setting)
    with pytest.raises((ValueError, TypeError), match=word):
        scope(refused)  # (refused when given, before any block is entered)
    with pytest.raises((ValueError, TypeError), match=word):
        setter(refused)
    assert getattr(cls, name) == default


def test_a_change_reaches_the_class_through_its_registered_owner_only():
    """tensortools._settings runs what a change means as registered (register_owner), not
    by looking a method up by name."""
    from tensortools._settings import ClassSetting, register_owner

    calls = []
    SETTING = ClassSetting(0, storage="_global_level")

    class Unowned:
        level = SETTING

        @classmethod
        def _on_settings_change(cls):  # (a name the settings never look up)
            calls.append(("by name", cls))

    class Owned(Unowned):
        pass

    assert SETTING.set(Unowned, 1) == 0 and Unowned.level == 1 and calls == []
    lock = threading.RLock()
    register_owner(Owned, on_change=lambda cls: calls.append((lock._is_owned(), cls)), lock=lock)
    assert SETTING.set(Owned, 2) == 1 and Owned.level == 2 and Unowned.level == 1
    assert calls == [(True, Owned)]  # (called under the owner's lock)


def test_settings_are_read_through_the_setting_at_call_time():
    """No module reads a setting's process-wide storage (``cls._global_<name>``) itself:
    the setting reads it (value_for at call time, global_value for the records)."""
    import ast
    import pathlib

    import tensortools

    root = pathlib.Path(tensortools.__file__).parent
    readers = {
        f"{path.relative_to(root)}:{node.lineno}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "_settings.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_global_")
    }
    assert not readers
