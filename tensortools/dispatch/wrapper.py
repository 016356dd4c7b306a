"""TensorWrapper: a ``torch.Tensor`` subclass whose results stay of its type, with a
fallback that runs calls on plain tensors and wraps what they return, and saving and
loading of its instances' attributes.

The class and its registration with torch.compile are here; the walk of a call's
arguments and the wrap of its results in ``results``, what the compiled path
(csrc/python/wrapper_dispatch.cpp) reads and calls back in ``compiled_path``. See Note
[The compiled paths] in docs/design.md."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.overrides import _is_torch_function_mode_enabled

from tensortools._compiler import run_whole_when_entered, when_dynamo_loads
from tensortools._native import C as _C
from tensortools.dispatch import polyfills  # noqa: F401  (what torch.compile traces instead)
from tensortools.dispatch.compiled_path import (
    RECORD_INPUTS,
    WrapperPath,
    WrapperRecord,
    keeps_hooks,
    record_of,
)
from tensortools.dispatch.results import (
    FRESH_RESULTS,
    INSTANCE_WRAPS,
    NO_WRAP,
    argument_tensors,
    plain_aliases,
    wrap_outputs,
)
from tensortools.dispatch.table import (
    TorchFunctionTable,
    is_python_operator,
    refusing_endless_recursion,
)

# (the records of the compiled path and the walk of arguments and results are in
# compiled_path and results; they are exported here too, where the types have always
# imported them)
__all__ = [
    "FRESH_RESULTS",
    "INSTANCE_WRAPS",
    "NO_WRAP",
    "TensorWrapper",
    "WrapperPath",
    "WrapperRecord",
    "argument_tensors",
    "keeps_hooks",
    "wrap_outputs",
]


class _RecordedClass(type(Tensor)):
    """The metaclass of wrapper types: a class's compiled-path record (``cls._fast``) is
    built once the class is made (its body's settings adopted), and rebuilt, for it and its
    subclasses, whenever a fact or hook it is built from is assigned or deleted."""

    def __init__(cls, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls._on_table_change()

    def __setattr__(cls, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in RECORD_INPUTS:
            with cls._registry_lock:
                cls._on_settings_change()

    def __delattr__(cls, name: str) -> None:
        super().__delattr__(name)
        if name in RECORD_INPUTS:
            with cls._registry_lock:
                cls._on_settings_change()


class TensorWrapper(TorchFunctionTable, Tensor, metaclass=_RecordedClass):
    """Base for ``torch.Tensor`` subclasses whose results stay of their type.

    The fallback runs the torch function with subclass dispatch disabled (no unwrapping
    needed, so an un-intercepted call costs little) and turns every tensor it returns
    into the type via :meth:`wrap`, given what :meth:`context` drew from the arguments.
    When another overriding type takes part in the call, this type's instances are
    passed on as plain tensors and the call is left to the others, so both types act.
    Results that another type returned are re-wrapped only if ``wrap_foreign`` is true.
    """

    wrap_foreign: ClassVar[bool] = False

    # -- __torch_function__: compiled for the common call, in Python for the rest --------
    # csrc/python/wrapper_dispatch.cpp runs a call that has no handler, under the
    # "fallback" policy, with no setting overridden in the calling thread and no other
    # overriding type taking part, as the Python path would: the plain call, its results
    # wrapped. It reads one record per class, _fast (a WrapperRecord), which
    # compiled_path.record_of builds from the facts below when the class is made, a fact
    # or hook is assigned, a handler is registered or a process-wide setting changes. A
    # subclass states its own facts as class attributes; the compiled path stands in for
    # the hooks (context, wrap, fallback, call_plain, _python_torch_function) of the
    # nearest class that states _fast_wrap, and a class that replaces one takes the Python
    # path.
    _fast: ClassVar[WrapperRecord] = WrapperRecord(kind=int(WrapperPath.PYTHON), handlers={})
    #: how the common call's results are wrapped: WRAP (as the class, by
    #: TensorWrapper.wrap), WRAP_METADATA (each with a copy of the metadata of the first
    #: instance of _fast_carrier among the arguments), PLAIN (not at all), PYTHON (never
    #: compiled)
    _fast_wrap: ClassVar[WrapperPath] = WrapperPath.WRAP
    #: (setting, value) pairs: the compiled path runs only while each setting's
    #: process-wide value for the class is that value (else PYTHON)
    _fast_requires: ClassVar[tuple] = ()
    #: bool settings: while one's process-wide value for the class is False, PLAIN (in a
    #: tuple, so that a setting, a descriptor, is not bound as this attribute)
    _fast_switches: ClassVar[tuple] = ()
    #: a logging.Logger, or None: while it is enabled for INFO, calls take the Python path
    _fast_logger: ClassVar[Any] = None
    #: a per-thread store (tensortools._settings.ThreadStore), or None: while it holds a
    #: value in the calling thread, calls take the Python path
    _fast_captures: ClassVar[Any] = None
    #: for WRAP_METADATA, the class whose instances carry the metadata (None: the class
    #: that states _fast_wrap)
    _fast_carrier: ClassVar[type | None] = None
    #: for WRAP_METADATA, the functions whose calls with a batch among the carriers may
    #: stay on the compiled path, a dict: None keeps the batch, a declared Rows or OverDims
    #: of the batch registry is judged by it (anything else: the Python path); None: batches
    #: are no concern of the type. See Note [Batch rules] in docs/design.md.
    _fast_batch_calls: ClassVar[Mapping | None] = None

    @classmethod
    def _on_table_change(cls) -> None:
        cls._fast = record_of(cls)

    @classmethod
    def _python_torch_function(cls, func, types, args=(), kwargs=None):
        """__torch_function__ in Python: the definition of every call's behaviour."""
        if _is_torch_function_mode_enabled() and not torch._C._is_torch_function_enabled():
            # Called under a TorchFunctionMode with subclass dispatch disabled, that is from
            # the plain call of this very call: the mode declined it (returned
            # NotImplemented), and torch, which shows modes a method's self whatever the
            # setting, showed it the instance again and, declined again, came back here.
            # The plain call runs as subclass dispatch asked, out of the mode's sight
            # (which declined it twice); the outer call wraps what it returns.
            with torch._C.DisableTorchFunction():
                return func(*args, **(kwargs or {}))
        with refusing_endless_recursion(cls, func):
            return TorchFunctionTable.__torch_function__.__func__(cls, func, types, args, kwargs)

    @classmethod
    @run_whole_when_entered
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # A Python frame around the compiled function, so that torch.compile, which cannot
        # trace C, reaches a call of it and traces its Python stand-in instead
        # (tensortools.dispatch.polyfills).
        return _wrapper_torch_function(cls, func, types, args, kwargs)

    @classmethod
    def _make(cls, data: Any) -> TensorWrapper:
        """An instance sharing data's storage (and autograd graph); data may also be
        anything torch.as_tensor takes."""
        tensor = data if isinstance(data, Tensor) else torch.as_tensor(data)
        try:
            with torch._C.DisableTorchFunctionSubclass():
                return tensor.as_subclass(cls)
        except RuntimeError as err:  # layouts a subclass cannot share (sparse CSR, ...)
            raise TypeError(
                f"{cls.__name__}: cannot wrap a tensor of layout {tensor.layout}: {err}"
            ) from err

    @classmethod
    def context(cls, func: Callable, args: tuple, kwargs: dict) -> Any:
        """What :meth:`wrap` needs from the call's arguments (default: nothing)."""
        return None

    @classmethod
    def wrap(cls, tensor: Tensor, context: Any) -> Tensor:
        """Turn one plain result tensor into ``cls``."""
        return cls._instance(tensor)

    @classmethod
    def _instance(cls, tensor: Tensor) -> Tensor:
        """tensor as an instance of cls: itself where wrap_outputs changed its class in
        place (a new result of a function in FRESH_RESULTS), else torch's alias
        (``as_subclass``: the same values and gradients, but a view)."""
        return tensor if type(tensor) is cls else tensor.as_subclass(cls)

    # -- saving and loading -------------------------------------------------------------
    # An instance's state is its attributes (__dict__): pickle, copy and torch.save write
    # them, and loading (also torch.load(weights_only=True)) restores exactly those. An
    # attribute may be any name a user can set that the class does not define (a crafted
    # file could otherwise set __class__, or shadow a method); saving refuses the others
    # up front, so that whatever saves also loads.

    @classmethod
    def _check_state(cls, state: Any, error: type[Exception]) -> dict:
        """state as a dict of attributes an instance may hold, or raise `error`."""
        if not isinstance(state, dict):
            raise error(
                f"{cls.__name__}: invalid saved state; expected a dict of "
                f"attributes, got {type(state).__name__}"
            )
        for name in state:
            if not (isinstance(name, str) and name.isidentifier()) or hasattr(cls, name):
                raise error(
                    f"{cls.__name__}: invalid saved state; {name!r} is not an "
                    "attribute an instance may hold (a name the class does not "
                    "define)"
                )
        return state

    def __getstate__(self) -> dict:
        return dict(self._check_state(self.__dict__, pickle.PicklingError))

    def __setstate__(self, state: Any) -> None:
        if state is None:  # the rebuild step of __reduce_ex__; the state follows
            return
        self.__dict__.update(self._check_state(state, pickle.UnpicklingError))

    def __reduce_ex__(self, proto: int) -> tuple:
        # As torch.Tensor.__reduce_ex__, but with the state as pickle's separate "state"
        # item, applied once the tensor exists: an attribute that refers back to the
        # tensor (metadata holding it, say) then loads as that very tensor.
        state = self.__getstate__()
        with torch._C.DisableTorchFunctionSubclass():
            func, args = Tensor._reduce_ex_internal(self, proto)
        return (torch._tensor._rebuild_from_type_v2, (func, type(self), args, None), state)

    def __deepcopy__(self, memo: dict) -> TensorWrapper:
        # torch.Tensor.__deepcopy__ of a plain alias copies the storage through memo (so
        # views deep-copied in the same call share the new storage, as plain tensors' do);
        # the type, autograd state and attributes are set here.
        if id(self) in memo:
            return memo[id(self)]
        with torch._C.DisableTorchFunctionSubclass():
            if not self.is_leaf:
                raise RuntimeError(
                    "Only Tensors created explicitly by the user (graph "
                    "leaves) support the deepcopy protocol at the moment"
                )
            plain = self.detach()
            memo.setdefault(id(memo), []).append(plain)  # memo holds its id: keep it alive
            new = Tensor.__deepcopy__(plain, memo).as_subclass(type(self))
            new.requires_grad_(self.requires_grad)
            grad = self.grad
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        if grad is not None:
            grad = copy.deepcopy(grad, memo)
            with torch._C.DisableTorchFunctionSubclass():
                new.grad = grad
        return new

    @classmethod
    def call_plain(
        cls, func: Callable, types: tuple, args: tuple, kwargs: dict
    ) -> tuple[Any, dict[int, Tensor]]:
        """Run ``func`` with this type's instances taken as plain tensors.

        Returns the result and, when another overriding type took part (and so got this
        type's instances as plain aliases), a map from those aliases back to them.
        """
        if is_python_operator(func):
            # The function it wraps computes without asking __torch_function__ again. The
            # wrapper asks has_torch_function, which torch.compile answers with no regard
            # for disabled subclass dispatch: traced, `1.5 - x` came back here until it
            # raised, and Python said the operands were unsupported. Eager, both give the
            # same result.
            func = func.__wrapped__
        if not cls.others_take_part(types):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs), {}
        originals: dict[int, Tensor] = {}
        args, kwargs = plain_aliases(cls, args, originals), plain_aliases(cls, kwargs, originals)
        return func(*args, **kwargs), originals

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        context = cls.context(func, args, kwargs)
        return cls._run_and_wrap(func, types, args, kwargs, argument_tensors(args, kwargs), context)

    @classmethod
    def _run_and_wrap(cls, func, types, args, kwargs, tensors: list, context: Any) -> Any:
        """The fallback's call and wrap, given the argument tensors (argument_tensors) and
        the context: for a subclass's fallback that has them already."""
        result, originals = cls.call_plain(func, types, args, kwargs)
        if func in NO_WRAP:
            return result
        return wrap_outputs(cls, result, context, originals, (func, args, kwargs, tensors))


_wrapper_torch_function = _C.wrapper_torch_function

INSTANCE_WRAPS.add(TensorWrapper.wrap.__func__)


def _in_place_functions() -> set[Callable]:
    """torch's in-place function forms (``torch.zero_``, ``torch.relu_``, ``F.elu_``, ...):
    the public builtins of torch's function namespaces named with one trailing underscore."""
    found = set()
    for namespace in (torch, torch.nn.functional, torch.special, torch.linalg):
        for name in dir(namespace):
            if name.startswith("_") or not name.endswith("_") or name.endswith("__"):
                continue
            func = getattr(namespace, name, None)
            if callable(func) and type(func).__name__ == "builtin_function_or_method":
                found.add(func)
    return found


def _dispatch_in_place_functions_under_compile() -> None:
    # Eager torch hands torch.zero_(x) and the other in-place function forms to the
    # arguments' __torch_function__, but torch.overrides.get_overridable_functions leaves
    # them out, and torch.compile dispatches only the functions that list names: traced,
    # torch.zero_(x) ran as a plain operator and returned a plain Tensor where eager
    # returns x. Naming them in the set torch.compile reads makes it dispatch them as eager
    # does (for plain tensors nothing changes: there is no __torch_function__ to call).
    try:
        from torch._dynamo.variables.torch import get_overridable_functions
    except ImportError:  # a torch that reads another list: nothing to extend
        return
    functions = get_overridable_functions()
    if isinstance(functions, set):  # (a cached set, which every later call returns)
        functions.update(_in_place_functions())


when_dynamo_loads(_dispatch_in_place_functions_under_compile)
