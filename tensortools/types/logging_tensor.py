"""LoggingTensor: a tensor that records every torch call made on it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch._guards  # (TracingContext: whether torch.compile is tracing)
from torch import Tensor

from tensortools import _spec as coverage_spec
from tensortools._compiler import when_dynamo_loads
from tensortools._native import C as _C
from tensortools._settings import ThreadStore, pop, push
from tensortools.dispatch import TensorMethod, TensorWrapper
from tensortools.dispatch.wrapper import WrapperPath

__all__ = ["LoggingTensor", "CapturedLogs", "CallStats", "capture_logs", "LOGGER_NAME"]

#: The standard-library logger LoggingTensor records go to.
LOGGER_NAME = "tensortools.logging"
_logger = logging.getLogger(LOGGER_NAME)

# The capture_logs blocks open in the calling thread, as a stack (tensortools._settings
# push/pop) of the lists their records go to, or None. Other threads' calls never reach
# them.
_CAPTURES = ThreadStore()
# True while the calling thread is inside a recorded call (running it, or handing its
# record to the logger's handlers): the calls made meanwhile, by another type's handler
# or by a logging.Handler's emit, are not the user's and are not recorded.
_RECORDING = ThreadStore()


class LoggingTensor(TensorWrapper):
    """A ``torch.Tensor`` that logs every torch function and method called on it.

    Each call is one record on the logger ``"tensortools.logging"`` at level INFO, with
    the attributes ``function`` (qualified name, e.g. ``torch.add``), ``arguments`` (a short
    summary: tensors as type, dtype and shape, never their values) and ``duration``
    (seconds). Nothing is measured or formatted while the logger is not enabled for INFO
    and no :func:`capture_logs` block is active in the calling thread. Results are
    LoggingTensors.

    ``LoggingTensor(data)``: ``data`` is a tensor (shared, not copied) or anything
    ``torch.as_tensor`` takes.

    With another overriding type in a call (say a MetadataTensor or a ScalarTensor), the
    call is logged once, whatever the order of the arguments, and that type's result is
    returned as it is: logging observes (``observes_calls``), the other type's result
    carries data. Calls made while a call is recorded (inside another type's handler, or
    by a ``logging.Handler`` that uses LoggingTensors in ``emit``) are not recorded again.
    """

    observes_calls = True

    @staticmethod
    def __new__(cls, data: Any) -> LoggingTensor:
        return cls._make(data)

    def __init__(self, data: Any) -> None:
        pass  # everything happens in __new__

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            return f"LoggingTensor({Tensor.__repr__(self.as_subclass(Tensor))})"

    # -- dispatch: the compiled path of TensorWrapper (while nothing listens), and the
    # Python one, which logs ---------------------------------------------------------------
    # (stated here, so that the compiled path stands in for this class's hooks: a
    # listener, or a capture in this thread, sends calls to the Python path)
    _fast_wrap = WrapperPath.WRAP
    _fast_logger = _logger
    _fast_captures = _CAPTURES

    # Under torch.compile: a graph break per call, run and logged eagerly.
    # See Note [The compiled paths] in docs/design.md.
    __torch_function__ = classmethod(_C.wrapper_torch_function_eager)

    @classmethod
    def _python_torch_function(cls, func, types, args=(), kwargs=None):
        captures = _CAPTURES.get()
        captures = () if captures is None else [records for _, records in captures["logs"]]
        to_logger = _logger.isEnabledFor(logging.INFO)
        if not (captures or to_logger) or _RECORDING.get() or _compiler_internal():
            return super()._python_torch_function(func, types, args, kwargs)
        _RECORDING.set(True)
        try:
            name = _qualified_name(func)
            arguments = _summary(args, kwargs)
            start = time.perf_counter()
            failed = None
            try:
                return super()._python_torch_function(func, types, args, kwargs)
            except BaseException as exc:  # KeyboardInterrupt too: the call did not return
                failed = type(exc).__name__
                raise
            finally:
                _emit(name, arguments, time.perf_counter() - start, failed, captures, to_logger)
        finally:
            _RECORDING.set(None)


@when_dynamo_loads
def _never_traced() -> None:
    # (see __torch_function__ above; a subclass's override reaches this one by super())
    python_path = LoggingTensor.__dict__["_python_torch_function"].__func__
    LoggingTensor._python_torch_function = classmethod(torch._dynamo.disable(python_path))


def _compiler_internal() -> bool:
    """Whether torch.compile is tracing a function in this thread: the calls it makes then
    (reading the properties of its inputs to stand them in) are its own, not the user's."""
    return torch._guards.TracingContext.try_get() is not None


def _emit(
    name: str, arguments: str, duration: float, failed: str | None, captures: tuple, to_logger: bool
) -> None:
    record = _logger.makeRecord(
        _logger.name,
        logging.INFO,
        "(unknown file)",
        0,
        "%s(%s) %s in %.1f us",
        (name, arguments, f"raised {failed}" if failed else "returned", duration * 1e6),
        None,
        extra={"function": name, "arguments": arguments, "duration": duration, "failed": failed},
    )
    for records in captures:
        records.append(record)
    if to_logger:
        _logger.handle(record)


def _qualified_name(func: Any) -> str:
    # By the function's own name first: torch.overrides.resolve_name may give an alias
    # (torch.mm is also torch.spmm).
    if isinstance(func, TensorMethod):  # (a method called on a tensor-like object)
        func = func.method
    name = getattr(func, "__name__", None)
    if name and getattr(torch, name, None) is func:
        return f"torch.{name}"
    if name and getattr(Tensor, name, None) is func:
        return f"torch.Tensor.{name}"
    resolved = torch.overrides.resolve_name(func)
    if resolved:
        return resolved
    module = getattr(func, "__module__", None) or ""
    qualname = getattr(func, "__qualname__", None) or name or repr(func)
    return f"{module}.{qualname}" if module else qualname


def _summary(args: tuple, kwargs: dict | None, limit: int = 6) -> str:
    parts = [_describe(a) for a in args[:limit]]
    if len(args) > limit:
        parts.append("...")
    parts += [f"{k}={_describe(v)}" for k, v in (kwargs or {}).items()]
    return ", ".join(parts)


# Arguments shown as they are: options (strings, dtypes, devices, layouts), shapes, None.
_SHOWN = (str, torch.dtype, torch.device, torch.layout, torch.memory_format, type(None))


def _describe(obj: Any, depth: int = 0) -> str:
    """A short description of an argument that holds none of the call's data: tensors by
    type, dtype and shape (at any depth), shapes (torch.Size) and options as they are,
    numbers (which may become data: a fill value, an assigned item) and any other object
    by their type."""
    if isinstance(obj, Tensor):
        with torch._C.DisableTorchFunction():  # (no call of the user's: no mode sees it)
            dtype = str(obj.dtype).removeprefix("torch.")
            return f"{type(obj).__name__}[{dtype}, {tuple(obj.shape)}]"
    if isinstance(obj, torch.Size):
        return str(tuple(obj))
    if isinstance(obj, (list, tuple)):
        if depth >= 2:
            return f"{type(obj).__name__}[{len(obj)}]"
        inner = ", ".join(_describe(o, depth + 1) for o in obj[:4])
        more = ", ..." if len(obj) > 4 else ""
        return f"[{inner}{more}]" if isinstance(obj, list) else f"({inner}{more})"
    if isinstance(obj, _SHOWN):
        text = repr(obj)
        return text if len(text) <= 40 else text[:37] + "..."
    return type(obj).__name__


@dataclasses.dataclass
class CallStats:
    """Calls of one function in a captured run, and their total duration in seconds."""

    calls: int = 0
    total_seconds: float = 0.0


class CapturedLogs(list):
    """The log records of a :func:`capture_logs` block (a list of ``logging.LogRecord``)."""

    def summary(self) -> dict[str, CallStats]:
        """Calls and total time per function, most time first."""
        stats: dict[str, CallStats] = {}
        for record in self:
            s = stats.setdefault(record.function, CallStats())
            s.calls += 1
            s.total_seconds += record.duration
        return dict(sorted(stats.items(), key=lambda kv: -kv[1].total_seconds))

    def format_summary(self) -> str:
        """:meth:`summary` as a text table."""
        lines = [f"{'function':<40} {'calls':>6} {'total':>12}"]
        for name, s in self.summary().items():
            lines.append(f"{name:<40} {s.calls:>6} {s.total_seconds * 1e6:>10.1f}us")
        return "\n".join(lines)


@contextlib.contextmanager
def capture_logs() -> Iterator[CapturedLogs]:
    """Collect the LoggingTensor records of the block, in the calling thread.

    Yields a `CapturedLogs` list that fills as the block runs::

        with tensortools.capture_logs() as logs:
            y = torch.add(LoggingTensor(x), 1)
        logs[0].function        # 'torch.add'
        logs.summary()          # {'torch.add': CallStats(calls=1, total_seconds=...)}

    Only calls made in the calling thread are collected; the logger's
    level and handlers are left as they are (records reach its handlers only when it is
    enabled for INFO, as without a capture).
    """
    records = CapturedLogs()
    marker = push(_CAPTURES, "logs", records)
    try:
        yield records
    finally:
        pop(_CAPTURES, "logs", marker)


torch.serialization.add_safe_globals([LoggingTensor])


def _logged_call(cls, call):
    # The coverage report's check around a sample's call: it was logged.
    with capture_logs() as logs:
        result = call()
    return result, "" if logs else "the call was not logged"


coverage_spec.register(
    LoggingTensor,
    handled_means="a handler of its own",
    fallback_means=(
        "logged, then the plain call, tensor results wrapped: the type's design, not a gap"
    ),
    call=_logged_call,
)
