"""Calls handed to handlers as torch binds them.

torch passes ``__torch_function__`` a call's arguments as the caller wrote them:
``torch.linalg.det(A=d)`` arrives with ``A`` as a keyword, ``torch.linalg.vector_norm(x=d)``
with a NumPy-style alias of ``input``, ``x.flip(0, 1)`` with the dims spread out,
``F.softmax(d, 1)`` with ``_stacklevel=`` added. A handler is written for the function it
is registered for and names its parameters as it likes, so the table binds each call to
torch's own parameters first (:func:`bind`), with the form actually called (``x.norm``
puts ``dtype`` where ``torch.norm`` has ``out``) and the overload torch picks
(``torch.std(x, False)`` is ``unbiased=False``):

- an int of another library (``np.int64``) where torch takes an int arrives as the
  Python int torch's parser binds (:func:`as_python_ints`);
- a list of ints that a method takes spread out arrives as one tuple (``x.flip(0, 1)``
  and ``x.flip(-1)`` as ``flip(x, (0, 1))`` and ``flip(x, (-1,))``);
- a handler's parameter named as torch documents its position for all overloads
  (``vsplit``'s ``indices_or_sections``, ``get_testing_overrides()``'s names;
  :mod:`tensortools.dispatch.documented`) takes whatever an overload puts there, unless
  the handler also names that overload's parameter; an alias torch documents
  (``torch.swapaxes``) arrives in the form of the function it aliases;
- an argument reaches the handler's parameter of torch's name for it, else the handler's
  parameter in torch's position (unless the handler gave that one another of torch's
  names), else the handler's ``**kwargs`` by torch's name;
- a positional argument that torch binds to another parameter than most of its overloads
  put there (``torch.std(x, False)``, ``torch.max(x, y)``) arrives by torch's name;
- a keyword the handler cannot take is left out where its value is torch's default
  (``out=None``) or it is ``_stacklevel`` (which only places warnings);
- a handler of ``(*args, **kwargs)`` alone gets the call as torch passed it (its spread
  ints and another form's positions aside).

A call the handler's signature still cannot take (more positional arguments than it has
parameters, a keyword it does not know with a value that matters, an argument given
twice) is not the handler's: the table leaves it to the class's policy (the fallback runs
it on plain tensors, where torch binds it itself).
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from tensortools._compiler import when_dynamo_loads
from tensortools.dispatch.documented import documented_aliases
from tensortools.dispatch.signatures import ALIASES, Positions, accepts, torch_positions

__all__ = [
    "HandlerShape",
    "argument",
    "as_python_ints",
    "bind",
    "foreign_ints",
    "plain_up_to",
    "torch_positions",
]

_INF = float("inf")


class HandlerShape(NamedTuple):
    """What a handler's signature takes (None for a callable without one: anything)."""

    #: its positional parameters' names, in order ('' for a positional-only one)
    positional: tuple[str, ...]
    #: whether it takes ``*args``
    more_positional: bool
    #: the names it takes by keyword
    keywords: frozenset
    #: whether it takes ``**kwargs``
    more_keywords: bool
    #: how many positional arguments it takes (inf with ``*args``)
    most_positional: float

    @classmethod
    def of(cls, handler: Callable) -> HandlerShape | None:
        """The shape of the handler a decorator wraps (functools.wraps), with the keywords
        the decorator's own signature adds (``out=``)."""
        try:
            params = inspect.signature(handler).parameters.values()
            outer = inspect.signature(handler, follow_wrapped=False).parameters.values()
        except (TypeError, ValueError):
            return None
        positional = tuple(
            (p.name if p.kind is p.POSITIONAL_OR_KEYWORD else "")
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        keywords = frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ) | frozenset(p.name for p in outer if p.kind is p.KEYWORD_ONLY)
        kinds = {p.kind for p in params}
        more = inspect.Parameter.VAR_POSITIONAL in kinds
        return cls(
            positional,
            more,
            keywords,
            inspect.Parameter.VAR_KEYWORD in kinds,
            _INF if more else len(positional),
        )

    @property
    def takes_anything(self) -> bool:
        """``(*args, **kwargs)`` alone: the call is passed on as torch passed it."""
        return not self.positional and self.more_positional and self.more_keywords


def plain_up_to(func: Callable, form: Callable, shape: HandlerShape | None) -> float:
    """How many positional arguments a call of `func`, without keywords, may give and reach
    the handler of `shape`, written for `form`, as they are (more go through :func:`bind`),
    its ints spread out aside (``torch_positions(func).spread``)."""
    positions = torch_positions(func)
    limit = _INF if shape is None else shape.most_positional
    moved = _translation(func, form)
    if moved is not None:
        limit = min(limit, moved[0])
        positions = torch_positions(form)
    if shape is not None and positions.ambiguous_from < len(shape.positional):
        limit = min(limit, positions.ambiguous_from)
    return limit


def bind(
    func: Callable, form: Callable, shape: HandlerShape | None, args: tuple, kwargs: dict
) -> tuple[tuple, dict] | None:
    """The call ``func(*args, **kwargs)`` as the handler of signature `shape`, written for
    the function `form` (func itself or the torch function whose method func is), takes
    it, or None where the handler cannot take it (the policy then decides)."""
    positions = torch_positions(func)
    args = tuple(map(as_python_ints, args))
    kwargs = {k: as_python_ints(v) for k, v in kwargs.items()}
    if positions.spread and len(args) > 3 - positions.spread and all(map(_is_int, args[1:])):
        args = (args[0], args[1:])  # (x.flip(0, 1): torch's flip(x, (0, 1)))
    moved = _translation(func, form)
    if moved is not None:
        args, kwargs = _as_form(moved, args, kwargs)
        if args is None:
            return None
        func, positions = form, torch_positions(form)
    if shape is None or shape.takes_anything:
        return args, kwargs
    if len(args) > positions.ambiguous_from < len(shape.positional):
        args, kwargs = _resolve_overload(positions, shape, args, kwargs)
    given = len(args)
    if given > shape.most_positional:
        return None
    if not kwargs:
        return args, kwargs
    key = (func, id(shape), given, *kwargs)  # (shapes live as long as the table's cache)
    plan = _PLANS.get(key, _UNPLANNED)
    if plan is _UNPLANNED:
        if len(_PLANS) > 4096:  # (a bound on memory: the combinations met are few)
            _PLANS.clear()
        plan = _PLANS[key] = _plan(positions, shape, given, tuple(kwargs))
    if plan is None:
        return None
    appended, renamed, left_out = plan
    for k, default in left_out:
        if default is not _ANY and not _is_default(kwargs[k], default):
            return None
    if appended:
        args = (*args, *[kwargs[k] for k in appended])
    return args, {to: kwargs[k] for k, to in renamed}


_PLANS: dict[tuple, Any] = {}
_UNPLANNED = object()
_NO_DEFAULT = object()
_STACKLEVEL = "_stacklevel"
_ANY = object()  # (any value of _stacklevel is left out)


def _is_int(value: Any) -> bool:
    return (type(value) is int) or isinstance(value, torch.SymInt)


def _foreign_int(value: Any) -> bool:
    """An int of another library that torch's parser takes for one (np.int64): an
    object of a type with ``__index__`` that is neither int, bool, a SymInt nor a tensor
    or tensor-like (a 0-dim tensor is an int to the parser, but not one to normalise)."""
    kind = type(value)
    return (
        kind not in (int, bool, list, tuple)
        and hasattr(kind, "__index__")
        and not hasattr(kind, "__torch_function__")
        and not isinstance(value, torch.SymInt)
    )


def foreign_ints(args: tuple, positions: tuple[int, ...]) -> bool:
    """Whether an argument in one of `positions` (those torch takes ints in) is, or
    holds, an int of another library (:func:`as_python_ints` turns them into ints)."""
    for i in positions:
        if i < len(args):
            value = args[i]
            if type(value) is int:
                continue
            if _foreign_int(value) or (
                type(value) in (list, tuple) and any(map(_foreign_int, value))
            ):
                return True
    return False


def as_python_ints(value: Any) -> Any:
    """value with every int of another library in it (np.int64, at the top or in a list
    or tuple) as the Python int torch's parser binds (``operator.index``): handlers and
    rules see ``x.flip(np.int64(0))`` as ``x.flip((0,))``, ``b.sum(np.int64(1))`` as
    ``b.sum(1)``."""
    if type(value) in (list, tuple):
        if any(map(_foreign_int, value)):
            return type(value)(operator.index(v) if _foreign_int(v) else v for v in value)
        return value
    return operator.index(value) if _foreign_int(value) else value


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (
        type(value) is type(default) and type(value) in (bool, int, float, str) and value == default
    )


def _plan(positions: Positions, shape: HandlerShape, given: int, keys: tuple) -> tuple | None:
    """How a call of `given` positional arguments and keyword arguments `keys` reaches the
    handler: (the keys appended as positional arguments, in order; (key, the handler's
    name for it) for the rest; (key, torch's default) for the keys left out where they have
    that value), or None where it cannot."""
    own_names = {name: j for j, name in enumerate(shape.positional) if name}
    slots: dict[int, str] = {}  # the handler's position -> the key that gives it
    renamed: list[tuple[str, str]] = []
    left_out: list[tuple[str, Any]] = []
    for key in keys:
        name = key
        if positions.parsed and key in ALIASES and key not in positions.names:
            name = ALIASES[key]
        j = own_names.get(name)
        i = positions.index.get(name)
        if j is None and i is not None and i < len(shape.positional):
            own = shape.positional[i]
            if positions.layout[i] == name and not (own in positions.names and own != name):
                j = i  # (a parameter the handler names its own way)
            elif _documented(positions, shape, i, name):
                j = i  # (vsplit's indices= for a handler of torch's indices_or_sections)
        elif j is None and i is not None and shape.more_positional and not shape.more_keywords:
            j = i if name not in shape.keywords else None  # (x.tile(dims=) for (self, *reps))
        if j is not None:
            if j < given or j in slots:
                return None  # given twice: torch's own TypeError, from the fallback
            slots[j] = key
        elif shape.more_keywords or name in shape.keywords:
            renamed.append((key, name))
        elif key == _STACKLEVEL:
            left_out.append((key, _ANY))
        elif positions.defaults.get(name, _NO_DEFAULT) is not _NO_DEFAULT:
            left_out.append((key, positions.defaults[name]))
        else:
            return None
    appended: list[str] = []
    while given + len(appended) in slots:
        appended.append(slots.pop(given + len(appended)))
    for j, key in slots.items():  # (after a gap: by the handler's name)
        if j >= len(shape.positional) or not shape.positional[j]:
            return None  # (positional-only or *args: a gap before it cannot be left)
        renamed.append((key, shape.positional[j]))
    names = [to for _, to in renamed]
    if len(set(names)) < len(names) or set(names) & set(shape.positional[: given + len(appended)]):
        return None
    return tuple(appended), tuple(renamed), tuple(left_out)


def _resolve_overload(
    positions: Positions, shape: HandlerShape, args: tuple, kwargs: dict
) -> tuple[tuple, dict]:
    """The positional arguments from the first position that torch's overloads name
    differently on, by torch's name, where the overload torch takes for them (by their
    types) names one otherwise than the handler does (by its name for the position where
    that is one of torch's, else most overloads' name)."""
    n = len(args)
    matched = [
        o
        for o in positions.overloads
        if len(o) >= n and all(accepts(kind, size, a) for (_, kind, size), a in zip(o, args))
    ]
    start = positions.ambiguous_from
    if not matched or any(o[start:n] != matched[0][start:n] for o in matched):
        return args, kwargs  # (none, or overloads that differ: as given)
    first = None
    for i in range(start, n):
        name, own = matched[0][i][0], shape.positional[i] if i < len(shape.positional) else ""
        if _documented(positions, shape, i, name):
            continue
        torchs = {o[i][0] for o in positions.overloads if i < len(o)}
        if name != (own if own in torchs else positions.layout[i]):
            first = i
            break
    if first is None:
        return args, kwargs
    moved = {name: a for (name, _, _), a in zip(matched[0][first:n], args[first:])}
    if set(moved) & set(kwargs):
        return args, kwargs  # (given twice: torch's TypeError)
    return args[:first], {**moved, **kwargs}


def _documented(positions: Positions, shape: HandlerShape, i: int, name: str) -> bool:
    """Whether the handler's parameter in position i has the name torch documents for
    that position in all its overloads (vsplit's indices_or_sections, view's shape,
    get_testing_overrides()'s), so takes the argument an overload calls `name` there;
    unless the handler takes `name` itself, in a later position or by keyword only
    (torch.std(x, False) is unbiased=False for a handler that names unbiased)."""
    own = shape.positional[i] if i < len(shape.positional) else ""
    if not own or own == name or i >= len(positions.documented):
        return False
    if own not in positions.documented[i]:
        return False
    if name in shape.positional:
        return shape.positional.index(name) < i  # (gru's packed overload: hx in 2, not 1)
    return name not in shape.keywords


@functools.cache
def _translation(func: Callable, form: Callable) -> tuple | None:
    """How a call of `func` (a Tensor method written in Python) becomes one of `form` (the
    torch function it is an alias of) where their parameters differ: (the first position
    they put another parameter in, each position's name in form, func's names -> form's),
    or None where they agree."""
    if func is form:
        return None
    f, g = torch_positions(func), torch_positions(form)
    if (
        len(f.layout) < 2
        or len(g.layout) < 2
        or (f.parsed or g.parsed)
        and not _aliased(func, form)
    ):
        return None
    rename = {}
    for i, name in enumerate(f.layout[1:], 1):
        if name not in g.names and i < len(g.layout) and g.layout[i] not in f.names:
            rename[name] = g.layout[i]  # (Tensor.split's split_size)
        else:
            rename[name] = name
    differs = [i for i, name in enumerate(f.layout[1:], 1) if g.index.get(rename[name]) != i]
    if not differs and all(k == v for k, v in rename.items()):
        return None
    names = tuple(rename[name] for name in f.layout[1:])
    return (differs[0] if differs else _INF), names, rename


@when_dynamo_loads
def _register_with_dynamo() -> None:
    # (as torch_positions: a constant of its arguments, which dynamo would trace through
    # functools.cache into the scan of torch's documented aliases)
    for fact in (_translation, _translation.__wrapped__):
        torch.compiler.assume_constant_result(fact)


def _aliased(func: Callable, form: Callable) -> bool:
    """Whether func (or the torch function whose method it is) is an alias torch documents
    of form: torch.swapaxes's axis0 is torch.transpose's dim0."""
    aliases = documented_aliases(form)
    owner = getattr(torch, getattr(func, "__name__", ""), None)
    return func in aliases or owner in aliases


def _as_form(moved: tuple, args: tuple, kwargs: dict) -> tuple[Any, dict]:
    first, names, rename = moved
    keywords = {rename.get(k, k): v for k, v in kwargs.items()}
    if len(args) > first:
        extra = dict(zip(names[first - 1 :], args[first:]))
        if len(extra) < len(args) - first or set(extra) & set(keywords):
            return None, kwargs  # (more than func takes, or given twice: torch's TypeError)
        args, keywords = args[:first], {**extra, **keywords}
    return args, keywords


def argument(
    func: Callable, args: tuple, kwargs: Mapping, position: int, default: Any = None
) -> Any:
    """The argument torch binds to `position` of the call ``func(*args, **kwargs)``, given
    by position, by torch's name or by an alias; `default` where the call leaves it out."""
    if position < len(args):
        return as_python_ints(args[position])
    positions = torch_positions(func)
    for key, value in kwargs.items():
        if positions.parsed and key in ALIASES and key not in positions.names:
            key = ALIASES[key]
        if positions.index.get(key) == position:
            return as_python_ints(value)
    return default
