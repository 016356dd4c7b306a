"""What :mod:`tensortools.coverage` and :func:`tensortools.testing.check_type` need to know
of a type: how it stands in for one of PyTorch's operator samples, how to run and judge a
sample's call, and what its outcomes mean in its own words. Each type registers a
:class:`CoverageSpec` here, beside its class; a subclass without one of its own uses its
nearest parent's (the spec's functions receive the class being checked).

Users reach it as :mod:`tensortools.coverage.spec`. It lives here, a leaf over
:mod:`tensortools.dispatch` alone, so that the types register their specs without
importing the tools (the coverage report, its command, the testing kit): layers point
down (docs/design.md, "Layers").

A type that registers nothing gets the defaults: a ``TorchFunctionTable`` has no stand-in
(the report classifies its functions but runs no samples); a ``TensorWrapper`` makes every
tensor of a sample an instance with its constructor, ``cls(tensor)``, and requires every
tensor result to be of the type. A type made otherwise says how, once, for both the
coverage report and :func:`tensortools.testing.check_type` (whose
``options_from_coverage_hooks`` reads it)::

    register(MyType, instance=lambda cls, tensor: MyType(tensor, unit="m"))

or, from the command line, ``python -m tensortools.coverage pkg.MyType --make
pkg.make_my_type`` (a function of one tensor).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map_only

from tensortools.dispatch import TensorWrapper

__all__ = ["CoverageSpec", "register", "spec_for", "wrap_every_tensor", "results_of_the_type"]


def _no_stand_in(cls: type, input: Any, args: tuple, kwargs: dict) -> tuple | None:
    return None


def _plain_call(cls: type, call: Callable[[], Any]) -> tuple[Any, str]:
    return call(), ""


def _no_problem(cls: type, result: Any) -> str:
    return ""


def _as_the_type(cls: type, tensor: Tensor) -> Any:
    """The type's own constructor on the tensor, as user code makes an instance (its
    ``__init__`` runs: attributes it sets are there). A type whose constructor takes
    more than the tensor registers ``instance=`` (see :func:`register`)."""
    return cls(tensor)


@dataclasses.dataclass(frozen=True)
class CoverageSpec:
    """How the coverage report and the testing kit run a type's samples."""

    #: whether the type's answers must equal the plain computation bit for bit (False: to
    #: rounding, for types that compute some calls their own way)
    exact: bool = True
    #: what a table entry means for this type, in its own words (printed beside the count)
    handled_means: str = "a handler in the type's table"
    #: what the fallback means for this type ("fallback" is a gap for some types and the
    #: whole design of others)
    fallback_means: str = "the type's fallback method"
    #: substitute(cls, input, args, kwargs): the sample with instances of cls in place of
    #: (some of) its tensors, or None where the type has no stand-in for it
    substitute: Callable[[type, Any, tuple, dict], tuple | None] = _no_stand_in
    #: call(cls, run): run a sample's call on the type; its result, and '' or what went
    #: wrong beside it (a logging type checks that the call was logged)
    call: Callable[[type, Callable[[], Any]], tuple[Any, str]] = _plain_call
    #: result_problem(cls, result): '' when a result follows the type's rules, else what
    #: breaks them
    result_problem: Callable[[type, Any], str] = _no_problem
    #: instance(cls, tensor): for wrap_every_tensor, the instance standing for a sample's
    #: tensor
    instance: Callable[[type, Tensor], Any] | None = None


# class -> its spec; weak, so that classes made and dropped (in tests) are not kept
_SPECS: weakref.WeakKeyDictionary[type, CoverageSpec] = weakref.WeakKeyDictionary()


def register(cls: type, spec: CoverageSpec | None = None, **changes: Any) -> CoverageSpec:
    """Register cls's spec (for cls and its subclasses without one of their own): `spec`,
    or the spec cls has now with `changes` (fields of :class:`CoverageSpec`). Returns it."""
    if not isinstance(cls, type):
        raise TypeError(f"register: 'cls' must be a class, got {type(cls).__name__}")
    spec = dataclasses.replace(spec or spec_for(cls), **changes)
    _SPECS[cls] = spec
    return spec


def spec_for(cls: type) -> CoverageSpec:
    """The spec that holds for cls: its own, or its nearest parent's, or the default."""
    for klass in cls.__mro__:
        spec = _SPECS.get(klass)
        if spec is not None:
            return spec
    return CoverageSpec()


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def wrap_every_tensor(cls: type, input: Any, args: tuple, kwargs: dict) -> tuple | None:
    """Every tensor of the sample as its spec's ``instance``; None for samples with no
    tensor (factories), or with one of a layout the type cannot hold."""
    instance = spec_for(cls).instance or _as_the_type
    wrapped: list = []

    def make(t: Tensor) -> Any:
        wrapped.append(t)
        return instance(cls, t)

    try:
        substituted = tree_map_only(Tensor, make, (input, args, kwargs), is_leaf=_is_size)
    except TypeError:  # a layout the type cannot wrap (sparse CSR)
        return None
    return substituted if wrapped else None


def results_of_the_type(cls: type, result: Any) -> str:
    """Every tensor a call returns is of the type."""
    for t in tree_leaves(result, is_leaf=_is_size):
        if isinstance(t, Tensor) and not isinstance(t, cls):
            return f"a result is {type(t).__name__}, not {cls.__name__}"
    return ""


register(
    TensorWrapper,
    CoverageSpec(
        fallback_means="the plain call on the wrapped tensors, tensor results wrapped",
        substitute=wrap_every_tensor,
        result_problem=results_of_the_type,
        instance=_as_the_type,
    ),
)
