"""What torch documents of its functions, beside what its argument parser binds.

torch's docs (and ``torch.overrides.get_testing_overrides()``, the signatures PyTorch's own
override tests register handlers with) name a function's parameters once for all its
overloads: ``torch.vsplit(input, indices_or_sections)`` where the schemas have
``sections`` and ``indices``, ``Tensor.view(shape)`` where they have ``size`` and
``dtype``. :func:`documented_names` gives those names, position by position, which
:mod:`tensortools.dispatch.binding` accepts beside the schemas' own.

The docs also name aliases ("Alias for :func:`torch.transpose`": ``torch.swapaxes``,
``torch.swapdims``, ``torch.absolute``, ``torch.concat``, ...): separate functions that
compute the same. :func:`documented_aliases` gives those that take the same parameters,
which a handler registered for one of them answers too.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable

import torch

__all__ = ["documented_aliases", "documented_names"]

# "swapaxes(input, axis0, axis1) -> Tensor", "view(*shape) -> Tensor"
_SIGNATURE = re.compile(r"^\s*(\w+)\((.*?)\)\s*->", re.MULTILINE)
# "Alias for :func:`torch.transpose`.", "Alias of :func:`torch.cat`.", "Alias for :func:`abs_`"
_ALIAS = re.compile(r"Alias (?:for|of)\s+:(?:func|meth):`~?([\w.]+)`")


@functools.cache
def _testing_overrides() -> dict:
    try:
        return torch.overrides.get_testing_overrides()
    except Exception:  # (a torch without it: the docstrings alone)
        return {}


def _is_method(func: Callable) -> bool:
    return getattr(torch.Tensor, getattr(func, "__name__", ""), None) is func


def _override_names(func: Callable) -> list[str]:
    override = _testing_overrides().get(func)
    if override is None:
        return []
    try:
        params = inspect.signature(override).parameters.values()
    except (TypeError, ValueError):
        return []
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            break
        names.append(p.name)
        if p.kind is p.VAR_POSITIONAL:
            break
    return names


def _docstring_names(func: Callable) -> list[str]:
    doc = getattr(func, "__doc__", None)
    name = getattr(func, "__name__", None)
    if not isinstance(doc, str) or not name:
        return []
    match = next((m for m in _SIGNATURE.finditer(doc[:2000]) if m.group(1) == name), None)
    if match is None:
        return []
    names = ["self"] if _is_method(func) else []
    depth, part, parts = 0, "", []
    for ch in match.group(2) + ",":  # (commas inside brackets: Optional[Tuple[int, int]])
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            parts.append(part.strip())
            part = ""
        else:
            part += ch
    for part in parts:
        if part == "*" or part.startswith("**"):
            break
        key = part.lstrip("*").split("=")[0].split(":")[0].strip()
        if key == "args" and part.startswith("*"):
            break  # (to(*args, **kwargs): no names)
        if not key.isidentifier():
            break  # (a form this parse does not know: the names up to it)
        names.append(key)
        if part.startswith("*"):
            break
    return names


@functools.cache
def documented_names(func: Callable) -> tuple[frozenset, ...]:
    """The names torch documents for each position of ``func`` (for a ``Tensor`` method,
    position 0 is the tensor): those of its docstring's signature and of
    ``get_testing_overrides()``'s lambda for it; an empty tuple where it documents none."""
    found: list[set[str]] = []
    for names in (_override_names(func), _docstring_names(func)):
        for i, name in enumerate(names):
            if i == len(found):
                found.append(set())
            found[i].add(name)
    return tuple(frozenset(s) for s in found)


def _resolve(name: str, near: Callable) -> Callable | None:
    """The function a docstring's ``torch.x.y`` (or, in a method's docs, ``abs_``,
    ``Tensor.clamp``) names."""
    parts = name.split(".")
    if parts[0] == "Tensor" or (_is_method(near) and parts[0] != "torch"):
        owner, parts = torch.Tensor, parts[1:] if parts[0] == "Tensor" else parts
    elif parts[0] == "torch":
        owner, parts = torch, parts[1:]
    else:
        return None
    for part in parts:
        owner = getattr(owner, part, None)
    return owner if callable(owner) else None


def _same_parameters(a: Callable, b: Callable) -> bool:
    """Whether two functions take the same parameters (positions and defaults), as their
    schemas or Python signatures say: an alias that takes others (``torch.pinverse``'s
    rcond, ``linalg.pinv``'s rtol) is a function of its own."""
    from tensortools.dispatch.signatures import torch_positions

    p, q = torch_positions(a), torch_positions(b)
    if not p.layout or len(p.layout) != len(q.layout) or len(p.names) != len(q.names):
        return False
    return all(p.defaults.get(x) == q.defaults.get(y) for x, y in zip(p.layout, q.layout))


@functools.cache
def _alias_groups() -> dict[Callable, frozenset]:
    spaces = (torch, torch.Tensor, torch.special, torch.linalg, torch.nn.functional)
    groups: dict[Callable, set] = {}
    for space in spaces:
        for name in dir(space):
            if name.startswith("_"):
                continue
            func = getattr(space, name, None)
            doc = getattr(func, "__doc__", None)
            match = _ALIAS.search(doc[:600]) if callable(func) and isinstance(doc, str) else None
            target = match and _resolve(match.group(1), func)
            if target is None or target is func or not _same_parameters(func, target):
                continue
            group = groups.get(func, {func}) | groups.get(target, {target})
            for member in group:
                groups[member] = group
    return {f: frozenset(g - {f}) for f, g in groups.items()}


def documented_aliases(func: Callable) -> frozenset:
    """The functions torch documents as aliases of ``func`` (or ``func`` as an alias of),
    that take the same parameters: ``torch.swapaxes`` and ``torch.swapdims`` for
    ``torch.transpose``, ``torch.concat`` and ``torch.concatenate`` for ``torch.cat``."""
    try:
        return _alias_groups().get(func, frozenset())
    except TypeError:  # (an unhashable callable)
        return frozenset()
