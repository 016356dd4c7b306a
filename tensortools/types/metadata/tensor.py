"""MetadataTensor: a tensor whose ``metadata`` dict follows it through any computation.

The class, on the rules for its dicts (``dicts``) and for how results take them
(``results``, written in C), and on ``batch_settle``, which applies the batch records
(:mod:`tensortools.dispatch.batch_rules`, registered by :meth:`MetadataTensor.batch_rule`
beside the functions they serve) to a call's results."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.overrides import _is_torch_function_mode_enabled
from torch.utils._pytree import tree_leaves

from tensortools import _spec as coverage_spec
from tensortools._settings import ClassSetting
from tensortools.dispatch import TensorWrapper
from tensortools.dispatch.batch_rules import COMPILED, RUNNERS
from tensortools.dispatch.batch_rules import batch_rule as _batch_rule
from tensortools.dispatch.compiled_path import path_of
from tensortools.dispatch.wrapper import INSTANCE_WRAPS, WrapperPath, argument_tensors
from tensortools.types.metadata.batch_settle import settle
from tensortools.types.metadata.dicts import (
    MergePolicy,
    check_batch,
    check_merge_policy,
    merge,
    metadata_of,
    sample_rows,
)
from tensortools.types.metadata.results import (
    PENDING,
    PendingMetadata,
    batch_size_of,
    carriers,
    first_carrier,
    register_class,
    take_metadata,
    traced_take_from,
)

__all__ = ["MetadataTensor"]

#: The functions whose calls with a batch among their arguments the compiled path may run
#: and judge itself: the registry's view of its "keep" records and declared verdicts (the
#: same dict, kept in step with them). See Note [Batch rules] in docs/design.md.
BATCH_CALLS: dict[Callable, Any] = COMPILED


def _check_merge_policy(cls: type, policy: Any) -> MergePolicy:
    check_merge_policy(policy)
    return policy


def _check_tracking(cls: type, enabled: Any) -> bool:
    if not isinstance(enabled, bool):
        raise TypeError(f"{cls.__name__}: 'tracking' must be a bool, got {type(enabled).__name__}")
    return enabled


#: The class's two settings (docs/settings.md), read at call time through value_for.
MERGE_POLICY = ClassSetting("first", storage="_global_merge_policy", check=_check_merge_policy)
TRACKING = ClassSetting(True, storage="_global_tracking", check=_check_tracking)


class _FirstCarrier(tuple):
    """The context of a traced call under the "first" merge policy: (the first carrier of
    metadata among its arguments, or None; its batch size)."""

    __slots__ = ()


class _BatchContext(dict):
    """The metadata results take from a call whose first metadata-carrying argument is a
    batch, and that batch's size."""

    __slots__ = ("batch_size",)


class MetadataTensor(TensorWrapper):
    """A ``torch.Tensor`` carrying a ``metadata`` dict through every torch function,
    method, operator, indexing and autograd.

    ``MetadataTensor(data, metadata=None)``: ``data`` is a tensor (shared, not copied, so
    gradients flow back to it) or anything ``torch.as_tensor`` takes. Every tensor a call
    returns (in tuples, lists and named tuples too) is a MetadataTensor with its own copy
    of the merged metadata of the call's MetadataTensor arguments. How several inputs'
    metadata merge is the setting ``merge_policy``'s to say; ``tracking`` turns the whole
    mechanism off. Each is set for every thread (``set_<name>``), for a block in the
    current thread only (``using_<name>``) and read as ``cls.<name>``, as every setting is
    (docs/settings.md); a subclass body may declare its own.

    When another overriding type takes part in a call, the result is a MetadataTensor
    even if that type produced it: metadata is data and must not be lost.

    A MetadataTensor made by collation or ``torch.stack`` of samples is a batch along
    dim 0 (:attr:`batch_size`): indexing, ``unbind``, ``split`` and the other calls that
    take it apart along dim 0 give each piece its own samples' metadata
    (``docs/metadata-tensor.md``, "Batches").
    """

    wrap_foreign: ClassVar[bool] = True
    merge_policy: ClassVar[MergePolicy] = MERGE_POLICY
    tracking: ClassVar[bool] = TRACKING

    metadata: dict = PendingMetadata()  # (an instance's own dict, once it has one)
    #: (a result of a compiled function: the dict it takes a copy of when first read, and
    #: the rows of it where it holds some of a batch's samples)
    _pending_metadata: ClassVar[dict | None] = None
    _pending_rows: ClassVar[Any] = None

    @staticmethod
    def __new__(cls, data: Any, metadata: Mapping | None = None) -> MetadataTensor:
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(
                f"MetadataTensor: 'metadata' must be a dict, got {type(metadata).__name__}"
            )
        out = cls._make(data)
        out.metadata = dict(metadata or {})
        return out

    def __init__(self, data: Any, metadata: Mapping | None = None) -> None:
        pass  # everything happens in __new__

    @property
    def batch_size(self) -> int | None:
        """The number of samples along dim 0 when this tensor is a batch (made by
        collation, ``torch.stack`` of samples along dim 0, or a call on a batch), else
        None. In a batch, each metadata value holds one entry per sample: a list, or a
        tensor with one row per sample. Setting it (an int, or None to treat the batch
        as one tensor) checks that the metadata and dim 0 hold that many samples."""
        return batch_size_of(self)

    @batch_size.setter
    def batch_size(self, size: int | None) -> None:
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise TypeError(
                    f"{type(self).__name__}: 'batch_size' must be a non-negative int or None, "
                    f"got {size!r}"
                )
            check_batch(metadata_of(self, {}), size, sample_rows(self))
        take_metadata(self, None, size, False)

    @property
    def is_batch(self) -> bool:
        """Whether this tensor is a batch of samples along dim 0 (see :attr:`batch_size`)."""
        return batch_size_of(self) is not None

    @classmethod
    def wrap_batch(cls, data: Tensor, metadata: dict, batch_size: int) -> MetadataTensor:
        """``data`` (a plain tensor, shared) as a batch of ``batch_size`` samples along dim
        0 with ``metadata``, each of whose values holds one entry per sample (checked)."""
        context = _BatchContext(metadata)
        context.batch_size = batch_size
        check_batch(context, batch_size, sample_rows(data))
        return cls.wrap(data, context)

    #: Decorator: what calls of a function do to a batch's samples, one record per function
    #: (:func:`tensortools.dispatch.batch_rules.batch_rule`; docs/metadata-tensor.md).
    batch_rule = staticmethod(_batch_rule)

    def __getitem__(self, index: Any) -> Tensor:
        # A batch's b[i] and b[i:j] (a per-sample loop's call) straight to the batch
        # rule, without torch's round trip through __torch_function__ (which cost three
        # times a plain MetadataTensor's index), where nothing else could see the call:
        # no TorchFunctionMode, and the fallback as the compiled path would take it.
        if (
            (type(index) is int or type(index) is slice)
            and batch_size_of(self) is not None
            and not _is_torch_function_mode_enabled()
            and path_of(type(self), _GETITEM, (type(self),)) == _WRAP_METADATA
        ):
            cls = type(self)
            return cls.fallback(_GETITEM, (cls,), (self, index), {})
        return _GETITEM(self, index)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            data = Tensor.__repr__(self.as_subclass(Tensor))
        return f"Metadata:\n{self.metadata!r}\ndata:\n{data}"

    @classmethod
    def _check_state(cls, state: Any, error: type[Exception]) -> dict:
        if isinstance(state, dict) and "metadata" in state:
            # (the class's own `metadata` reads the instance's: see results.PendingMetadata)
            rest = {k: v for k, v in state.items() if k != "metadata"}
            state = {**super()._check_state(rest, error), "metadata": state["metadata"]}
        else:
            state = super()._check_state(state, error)
        if not isinstance(state.get("metadata", {}), dict):
            raise error(
                f"{cls.__name__}: invalid saved state; 'metadata' must be a dict, "
                f"got {type(state['metadata']).__name__}"
            )
        size = state.get("_batch_size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise error(
                f"{cls.__name__}: invalid saved state; '_batch_size' must be a "
                f"non-negative int or None, got {size!r}"
            )
        return state

    def __getstate__(self) -> dict:
        metadata_of(self)  # (a result of a compiled function takes its copy now)
        state = super().__getstate__()
        for name in PENDING:
            state.pop(name, None)
        size = batch_size_of(self)
        if size is not None:  # (what saves also loads: a batch that holds its samples)
            try:
                check_batch(dict(metadata_of(self, {})), size, sample_rows(self))
            except ValueError as err:
                raise pickle.PicklingError(str(err)) from None
        return state

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        if state is not None:
            self.metadata = dict(self.__dict__.get("metadata", {}))
            size = batch_size_of(self)
            if size is not None:
                try:
                    check_batch(self.metadata, size, sample_rows(self))
                except ValueError as err:
                    raise pickle.UnpicklingError(
                        f"{type(self).__name__}: invalid saved state; {err}"
                    ) from None

    # -- settings --------------------------------------------------------------------

    @classmethod
    def set_merge_policy(cls, policy: MergePolicy) -> MergePolicy:
        """How results merge the metadata of several MetadataTensor inputs:
        ``"first"`` (the first MetadataTensor argument's dict, the default),
        ``"strict"`` (a key with different values raises ValueError), ``"union"`` (all
        keys; the first argument holding a key gives its value) or a callable taking the
        list of input dicts and returning the result's dict. Returns the previous one."""
        return MERGE_POLICY.set(cls, policy)

    @classmethod
    def using_merge_policy(cls, policy: MergePolicy) -> contextlib.AbstractContextManager:
        """Context manager: ``policy`` inside the block, in the current thread only."""
        return MERGE_POLICY.override(cls, policy)

    @classmethod
    def set_tracking(cls, enabled: bool) -> bool:
        """Turn metadata tracking on or off, for every thread; returns the previous
        setting. While off, calls return plain tensors at plain-tensor speed."""
        return TRACKING.set(cls, enabled)

    @classmethod
    def using_tracking(cls, enabled: bool) -> contextlib.AbstractContextManager:
        """Context manager: tracking on or off inside the block, in the current thread
        only."""
        return TRACKING.override(cls, enabled)

    # -- dispatch --------------------------------------------------------------------

    @classmethod
    def context(cls, func, args, kwargs) -> dict:
        # The metadata of every MetadataTensor among the arguments, whatever its class
        # (a parent's or a sibling's instance carries metadata as much as cls's own), in
        # order, also inside lists and tuples (not inside dicts: see argument_tensors).
        # A batch among them passes its size on when it is the first (whose metadata
        # the "first" policy keeps).
        return cls._context_of(argument_tensors(args, kwargs))

    @classmethod
    def _context_of(cls, tensors: list) -> dict:
        """context, given the call's argument tensors (argument_tensors)."""
        policy = MERGE_POLICY.value_for(cls)
        if (
            policy == "first"
            and torch.compiler.is_compiling()
            and cls._fast.kind == _WRAP_METADATA  # (not with a user's hooks: they take dicts)
        ):
            # (the first carrier itself: its dict is taken by reference, never read, so
            # that no value of it becomes a guard of the graph)
            return _FirstCarrier(first_carrier(MetadataTensor, tensors))
        found, size = carriers(MetadataTensor, tensors)
        merged = merge(policy, found)
        if size is None:
            return merged
        context = _BatchContext(merged)
        context.batch_size = size
        return context

    @classmethod
    def wrap(cls, tensor: Tensor, context: dict) -> MetadataTensor:
        out = cls._instance(tensor)
        if type(context) is _FirstCarrier:  # (traced: see _context_of)
            traced_take_from(out, *context)
            return out
        size = context.batch_size if type(context) is _BatchContext else None
        take_metadata(out, context, size, True)
        return out

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        # See Note [Batch rules] in docs/design.md: func's record may run the call itself
        # (taking a batch apart, joining batches); settle applies its verdict to the
        # results. (Where another overriding type takes part, the call is left to it.)
        runs = RUNNERS.get(func)
        if runs is not None and not cls.others_take_part(types):
            result = runs(cls, func, types, args, kwargs)
            if result is not NotImplemented:
                return result
        # (the arguments walked once, for the context, the wrap and the rule alike)
        tensors = argument_tensors(args, kwargs)
        if getattr(cls.context, "__func__", None) is _OWN_CONTEXT:
            context = cls._context_of(tensors)
        else:
            context = cls.context(func, args, kwargs)
        out = cls._run_and_wrap(func, types, args, kwargs, tensors, context)
        return settle(func, args, kwargs, out, tensors, MetadataTensor)

    @classmethod
    def _settle_batch(cls, func, args, kwargs, out, tensors):
        """settle for the compiled path's results of a batch's call that it wraps in
        Python (tuples, an argument returned): compiled_path.wrap_result."""
        return settle(func, args, kwargs, out, tensors, MetadataTensor)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A class body's own `tracking = False` or `merge_policy = "union"` becomes that
        # class's process-wide setting.
        MERGE_POLICY.adopt(cls)
        TRACKING.adopt(cls)

    # -- dispatch: the compiled path of TensorWrapper, and the Python one ----------------
    # (results take a copy of the first carrier's metadata; tracking off: the plain call;
    # another merge policy, or a replaced hook: the Python path; compiled_path.record_of)
    _fast_wrap = WrapperPath.WRAP_METADATA
    _fast_requires = ((MERGE_POLICY, "first"),)
    _fast_switches = (TRACKING,)
    _fast_batch_calls = BATCH_CALLS  # (the batch registry's table: the one line to change)

    @classmethod
    def _python_torch_function(cls, func, types, args=(), kwargs=None):
        """__torch_function__ in Python: every call the compiled path does not take."""
        if path_of(cls, func, types) == _WRAP_METADATA:
            # (a batch's call, which the compiled path leaves here with every setting at
            # its process-wide value: the fallback, without the walk through the table)
            return cls.fallback(func, types, args, kwargs or {})
        if TRACKING.value_for(cls):
            return super()._python_torch_function(func, types, args, kwargs)
        return cls.call_plain(func, types, args, kwargs or {})[0]


_OWN_CONTEXT = MetadataTensor.context.__func__
_GETITEM = Tensor.__getitem__


_WRAP_METADATA = int(WrapperPath.WRAP_METADATA)


register_class(MetadataTensor)  # (the class whose instances batch_size_of reads)
# torch.load(weights_only=True) may rebuild MetadataTensors once tensortools is imported.
INSTANCE_WRAPS.add(MetadataTensor.wrap.__func__)
torch.serialization.add_safe_globals([MetadataTensor])


def _keeps_the_metadata(x, result, *, cls):
    # The rule for results of instances the spec makes: of the type, with their metadata.
    problem = coverage_spec.results_of_the_type(x, result, cls=cls)
    # (a batch of the samples, from torch.stack: one entry per sample)
    for t in tree_leaves(result):
        size = batch_size_of(t)
        want = {"coverage": 1} if size is None else {"coverage": [1] * size}
        if not problem and isinstance(t, cls) and metadata_of(t) != want:
            problem = f"a result's metadata is {metadata_of(t)!r}"
    return problem


coverage_spec.register(
    MetadataTensor,
    handled_means="a rule of its own for the metadata",
    fallback_means=(
        "the plain call, tensor results carrying the merged metadata: the type's design, not a gap"
    ),
    make=lambda tensor, *, cls: cls(tensor, {"coverage": 1}),
    rule=_keeps_the_metadata,
)
