"""What tensortools tells torch.compile, told when torch.compile's front end (``torch._dynamo``)
is loaded rather than when tensortools is.

Loading dynamo loads the rest of torch's compiler (sympy, inductor's config, ...): about as
much again as ``import torch``. A program that never compiles should not pay that for
importing tensortools, so each module that has something to register (a stand-in traced in
place of a C function, a function taken as constant, a method dynamo must not trace)
hands it to :func:`when_dynamo_loads`. The registrations run at once if dynamo is already
loaded, else right after ``torch._dynamo`` has been imported (by ``torch.compile``,
``torch.export``, or any ``import torch._dynamo``): before dynamo has traced anything.
"""

from __future__ import annotations

import importlib.abc
import sys
import warnings
from collections.abc import Callable
from types import ModuleType

__all__ = ["run_whole_when_entered", "when_dynamo_loads"]

_DYNAMO = "torch._dynamo"
_PENDING: list[Callable[[], None]] = []


def when_dynamo_loads(register: Callable[[], None]) -> Callable[[], None]:
    """Run ``register()`` once dynamo is loaded: now, if it is; else right after
    ``torch._dynamo`` has been imported. Returns ``register`` (a decorator)."""
    if _loaded():
        _run(register)
    else:
        _PENDING.append(register)
        if not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterDynamoImport())
    return register


def run_whole_when_entered(function: Callable) -> Callable:
    """Make dynamo run ``function`` as written, with every call it makes, where it reaches
    it as a frame of its own (a frame it runs eagerly: one it fell back to eager for, the
    call at a graph break); traced from a compiled frame, it is inlined as ever. For the
    __torch_function__ frames: compiled on their own, their graphs are not guarded on
    ``func`` where it is a method or slot descriptor (``Tensor.add``, ``Tensor.__add__``)
    or a property's getter (dynamo guards none of them), and a later call of another
    function with the same arguments ran the first one's graph. Returns ``function``."""
    code = function.__code__

    def _run_whole() -> None:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))

    _run_whole.__qualname__ = f"run_whole_when_entered({function.__qualname__})"
    when_dynamo_loads(_run_whole)
    return function


def _loaded() -> bool:
    module = sys.modules.get(_DYNAMO)
    spec = getattr(module, "__spec__", None)
    # (a module still being imported is in sys.modules already: not loaded yet)
    return module is not None and not getattr(spec, "_initializing", False)


def _run(register: Callable[[], None]) -> None:
    try:
        register()
    except Exception as exc:  # an import of dynamo must not fail because of tensortools
        warnings.warn(
            f"tensortools could not register {register.__module__}.{register.__qualname__} "
            f"with torch.compile ({type(exc).__name__}: {exc}); compiled code over "
            "tensortools' types may differ from eager",
            RuntimeWarning,
            stacklevel=2,
        )


def _run_pending() -> None:
    while _PENDING:
        _run(_PENDING.pop(0))


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: lets the other finders find ``torch._dynamo`` and makes its
    loader run the pending registrations once the module has been executed. It leaves
    sys.meta_path as soon as it has done so (the loader stays the finder's own)."""

    def find_spec(self, name: str, path, target: ModuleType | None = None):
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            exec_module(module)
            del loader.exec_module  # (the loader's own method again)
            _run_pending()

        loader.exec_module = exec_then_register
        return spec
