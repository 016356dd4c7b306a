"""What :mod:`tensortools.coverage` and :func:`tensortools.testing.check_type` need to know
of a type, in one object: a :class:`TypeSpec` (how to make an instance of a plain tensor,
how to read back the plain tensor it stands for, what its results must be, what its
outcomes mean in its own words). Each type registers one here, beside its class; a
subclass without one of its own uses its nearest parent's.

Users reach it as :mod:`tensortools.coverage.spec` (and :class:`TypeSpec` as
``tensortools.testing.TypeSpec``). It lives here, a leaf over :mod:`tensortools.dispatch`
alone, so that the types register their specs without importing the tools (the coverage
report, its command, the testing kit): layers point down (docs/design.md, "Layers").

A type that registers nothing gets the defaults: a ``TorchFunctionTable`` has no stand-in
(the report classifies its functions but runs no samples); a ``TensorWrapper`` makes every
tensor of a sample an instance with its constructor, ``cls(tensor)``, and requires every
tensor result to be of the type. A type made otherwise says how, once, for both tools::

    register(MyType, make=lambda tensor: MyType(tensor, unit="m"))

or, from the command line, ``python -m tensortools.coverage pkg.MyType --make
pkg.make_my_type`` (a function of one tensor). A `make` or `rule` registered for a family
of classes may take a keyword ``cls``: it is given the class being checked.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map_only

from tensortools.dispatch import TensorWrapper

__all__ = [
    "CoverageSpec",
    "TypeSpec",
    "register",
    "spec_for",
    "wrap_every_tensor",
    "results_of_the_type",
]


def _no_stand_in(cls: type, input: Any, args: tuple, kwargs: dict) -> tuple | None:
    return None


def _plain_call(cls: type, call: Callable[[], Any]) -> tuple[Any, str]:
    return call(), ""


@dataclasses.dataclass(frozen=True)
class TypeSpec:
    """One type, as the testing kit and the coverage report see it.

    The kit's words are the only ones: ``make(plain_tensor)`` gives an instance (None: no
    stand-in, the tensor stays plain; raising ``tensortools.testing.Unsupported`` declines
    it), ``densify(instance)`` the plain tensor it stands for (given: a structured type,
    whose gradients are of other tensors), ``rule(instance, result)`` what breaks the
    type's rules in a result ('' when nothing does; see ``check_type``).
    """

    #: the type (None in a spec registered with :func:`register` before it is bound)
    cls: type | None = None
    #: make(tensor): an instance standing for a plain tensor (None: from `substitute`)
    make: Callable[..., Any] | None = None
    #: densify(instance): the plain tensor an instance stands for (None: the instance as
    #: a plain tensor, or its ``.tensor()``)
    densify: Callable[[Any], Tensor] | None = None
    #: rule(instance, result): '' when a result follows the type's rules, else what
    #: breaks them (None: floating-point results of the type, for the kit)
    rule: Callable[..., str] | None = None
    #: reference(function, plain input, args, kwargs): the expected result (None: the
    #: function on the plain input)
    reference: Callable[[Callable, Tensor, tuple, dict], Any] | None = None
    #: the type's deliberate "not supported" answers: exception classes or a predicate
    refusals: tuple[type[BaseException], ...] | Callable[[BaseException], bool] = ()
    #: the type's settings: name -> (context-manager factory, reader of the value)
    settings: Mapping[str, tuple[Callable[[], Any], Callable[[], Any]]] | None = None
    #: classes weights_only loading may rebuild while the kit runs (serialization, batches)
    safe_globals: Sequence[Any] = ()
    #: attributes the type changes on its own (caches): not compared as state
    volatile_attrs: Iterable[str] = ()
    #: whether the type's views are copies (the edges check lists them, not failed)
    views_copy: bool = False
    #: sample_state(instance): the state a row of a batch must keep (batches check)
    sample_state: Callable[[Any], Any] | None = None
    #: collate_fn(instances): the type's own collate (batches check)
    collate_fn: Callable[[list], Any] | None = None
    #: whether the type's answers must equal the plain computation bit for bit (False: to
    #: rounding, for types that compute some calls their own way)
    exact: bool = True
    #: what a table entry means for this type, in its own words (printed beside the count)
    handled_means: str = "a handler in the type's table"
    #: what the fallback means for this type ("fallback" is a gap for some types and the
    #: whole design of others)
    fallback_means: str = "the type's fallback method"
    #: substitute(cls, input, args, kwargs): the coverage report's sample with instances
    #: of cls in place of (some of) its tensors, or None where the type has no stand-in
    substitute: Callable[[type, Any, tuple, dict], tuple | None] = _no_stand_in
    #: call(cls, run): the coverage report runs a sample's call on the type; its result,
    #: and '' or what went wrong beside it (a logging type checks that it was logged)
    call: Callable[[type, Callable[[], Any]], tuple[Any, str]] = _plain_call

    def __post_init__(self) -> None:
        if self.cls is not None and not isinstance(self.cls, type):
            raise TypeError(f"TypeSpec: 'cls' must be a class, got {type(self.cls).__name__}")
        for name in ("make", "densify", "rule", "reference", "sample_state", "collate_fn"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"TypeSpec: {name!r} must be callable, got {type(value).__name__}")
        attrs = self.volatile_attrs
        if isinstance(attrs, str) or not all(isinstance(a, str) for a in attrs):
            raise TypeError("TypeSpec: 'volatile_attrs' must be attribute names (strings)")

    @property
    def instance(self) -> Callable[[type, Tensor], Any] | None:
        """Deprecated: ``make`` as the coverage report's old ``instance(cls, tensor)``."""
        _renamed("instance", "make")
        return None if self.make is None else _old_instance(self.make)

    @property
    def result_problem(self) -> Callable[[type, Any], str]:
        """Deprecated: ``rule`` as the coverage report's old ``result_problem(cls, result)``."""
        _renamed("result_problem", "rule")
        return _old_result_problem(self.rule)

    def for_class(self, cls: type) -> TypeSpec:
        """This spec for `cls` (a spec registered for a parent serves its subclasses)."""
        return self if self.cls is cls else dataclasses.replace(self, cls=cls)

    def make_for(self, cls: type) -> Callable[[Tensor], Any] | None:
        """``make`` of one tensor for `cls` (given the class where it takes ``cls``), or the
        first tensor of `substitute` where no ``make`` is given; None where neither is."""
        if self.make is not None:
            return _given_cls(self.make, cls)
        if self.substitute is _no_stand_in:
            return None
        substitute = self.substitute

        def make(t: Tensor) -> Any:
            substituted = substitute(cls, t, (), {})
            return None if substituted is None else substituted[0]

        return make

    def rule_for(self, cls: type) -> Callable[..., str] | None:
        """``rule`` for `cls` (given the class where it takes ``cls``), or None."""
        return None if self.rule is None else _given_cls(self.rule, cls)


def _given_cls(fn: Callable, cls: type) -> Callable:
    try:
        takes_cls = "cls" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    return functools.partial(fn, cls=cls) if takes_cls else fn


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"TypeSpec.{old} is deprecated: read TypeSpec.{new} (TypeSpec.{new}_for(cls) gives it "
        "bound to a class)",
        DeprecationWarning,
        stacklevel=3,
    )


# (cached: the old form of one function is one object, as the field it reads is)
@functools.cache
def _old_instance(make: Callable) -> Callable[[type, Tensor], Any]:
    return lambda cls, tensor: _given_cls(make, cls)(tensor)


@functools.cache
def _old_result_problem(rule: Callable | None) -> Callable[[type, Any], str]:
    if rule is None:
        return lambda cls, result: ""
    return lambda cls, result: _given_cls(rule, cls)(None, result)


#: The name of this object before it served the testing kit too (kept for old imports).
CoverageSpec = TypeSpec

# The coverage vocabulary's old names for two fields: what to write instead.
_RENAMED = {"instance": "make", "result_problem": "rule"}

# class -> its spec; weak, so that classes made and dropped (in tests) are not kept
_SPECS: weakref.WeakKeyDictionary[type, TypeSpec] = weakref.WeakKeyDictionary()


def register(cls: type, spec: TypeSpec | None = None, **changes: Any) -> TypeSpec:
    """Register cls's spec (for cls and its subclasses without one of their own): `spec`,
    or the spec cls has now with `changes` (fields of :class:`TypeSpec`). Returns it."""
    if not isinstance(cls, type):
        raise TypeError(f"register: 'cls' must be a class, got {type(cls).__name__}")
    for old, new in _RENAMED.items():
        if old in changes:
            if new in changes:
                raise TypeError(f"register: give {new!r} alone ({old!r} is its old name)")
            warnings.warn(
                f"register(..., {old}=f) is deprecated: write register(..., {new}=g), "
                f"{'g(tensor)' if new == 'make' else 'g(instance, result)'} taking a "
                "keyword 'cls' where it needs the class",
                DeprecationWarning,
                stacklevel=2,
            )
            changes[new] = _old_named(old, changes.pop(old))
    unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(TypeSpec)})
    if unknown:
        raise TypeError(f"register: unknown TypeSpec fields {unknown}")
    spec = dataclasses.replace(spec or spec_for(cls), cls=cls, **changes)
    _SPECS[cls] = spec
    return spec


def _old_named(old: str, fn: Callable) -> Callable:
    if old == "instance":
        return lambda tensor, *, cls: fn(cls, tensor)
    return lambda x, result, *, cls: fn(cls, result)


def spec_for(cls: type) -> TypeSpec:
    """The spec that holds for cls: its own, or its nearest parent's, or the default."""
    for klass in cls.__mro__:
        spec = _SPECS.get(klass)
        if spec is not None:
            return spec
    return TypeSpec()


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def wrap_every_tensor(cls: type, input: Any, args: tuple, kwargs: dict) -> tuple | None:
    """Every tensor of the sample as its spec's ``make`` gives it (the class's constructor,
    ``cls(tensor)``, where none is given; a tensor ``make`` gives None for stays plain);
    None for samples with no tensor (factories), or with one of a layout the type cannot
    hold."""
    spec = spec_for(cls)
    make = _given_cls(spec.make, cls) if spec.make is not None else cls
    wrapped: list = []

    def one(t: Tensor) -> Any:
        wrapped.append(t)
        x = make(t)
        return t if x is None else x

    try:
        substituted = tree_map_only(Tensor, one, (input, args, kwargs), is_leaf=_is_size)
    except TypeError:  # a layout the type cannot wrap (sparse CSR)
        return None
    return substituted if wrapped else None


def results_of_the_type(x: Any, result: Any, *, cls: type) -> str:
    """A rule: every tensor a call returns is of the type."""
    for t in tree_leaves(result, is_leaf=_is_size):
        if isinstance(t, Tensor) and not isinstance(t, cls):
            return f"a result is {type(t).__name__}, not {cls.__name__}"
    return ""


register(
    TensorWrapper,
    TypeSpec(
        fallback_means="the plain call on the wrapped tensors, tensor results wrapped",
        substitute=wrap_every_tensor,
        rule=results_of_the_type,
    ),
)
