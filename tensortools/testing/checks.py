"""The registry of :func:`~tensortools.testing.check_type`'s checks: every check, the kit's
own and a user's, is one function of one signature, ``check(run, samples, options)``,
registered by name with :func:`register_check` (as ``torch.library.opcheck`` runs the
tests named in its ``test_utils``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "Check",
    "CheckFunction",
    "check_names",
    "default_checks",
    "each_sample",
    "register_check",
    "registered",
    "resolve_options",
    "unregister_check",
]

#: check(run, samples, options): runs the check over the run's samples (op_db's, shaped by
#: the run's `samples` hook), recording what fails with ``run.fail(name, sample, reason)``;
#: `options` are the check's options (its defaults, updated by check_type's `options`).
CheckFunction = Callable[[Any, Sequence[Any], Mapping[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class Check:
    """One registered check."""

    name: str
    function: CheckFunction
    #: whether check_type runs it when not told which checks to run
    default: bool = True
    #: its options and their defaults (check_type's ``options={name: {...}}`` sets them)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: whether it needs op_db's samples (False: it makes its own, and runs without op_db)
    uses_samples: bool = True


_REGISTRY: dict[str, Check] = {}


def register_check(
    name: str,
    *,
    default: bool = True,
    options: Mapping[str, Any] | None = None,
    uses_samples: bool = True,
    replace: bool = False,
) -> Callable[[CheckFunction], CheckFunction]:
    """A decorator registering ``check(run, samples, options)`` as check `name`: run by
    :func:`~tensortools.testing.check_type` when named in its ``checks`` (and, where
    `default`, when ``checks`` is not given), after the checks registered before it.

    `options` are its option names and their defaults; check_type's
    ``options={name: {...}}`` overrides them (an option not declared here is an error).
    The check gets the run (``run.cls``, ``run.spec``, ``run.make``, ``run.instance(t)``,
    ``run.typed(sample)``, ``run.plain(obj)``, ``run.fail(name, sample, reason)``), the
    samples (:class:`~tensortools.testing.Sample`: ``.name``, ``.label``, ``.info.op``,
    ``.call``) and its options; an exception it raises is a failure of the check, not a
    crash of the run. A name already registered is an error unless `replace`."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register_check: 'name' must be an identifier, got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"register_check: a check named {name!r} is registered already")
    if options is not None and not (
        isinstance(options, Mapping) and all(isinstance(k, str) for k in options)
    ):
        raise TypeError("register_check: 'options' must map option names to defaults")

    def decorate(fn: CheckFunction) -> CheckFunction:
        if not callable(fn):
            raise TypeError(f"register_check: {name!r} must be a function, got {fn!r}")
        _REGISTRY[name] = Check(name, fn, bool(default), dict(options or {}), uses_samples)
        return fn

    return decorate


def unregister_check(name: str) -> None:
    """Remove check `name` (a user's check, as a test's fixture does after it)."""
    if _REGISTRY.pop(name, None) is None:
        raise ValueError(f"unregister_check: no check named {name!r}")


def registered(name: str) -> Check:
    return _REGISTRY[name]


def check_names() -> tuple[str, ...]:
    """Every registered check, in the order they run."""
    return tuple(_REGISTRY)


def default_checks() -> tuple[str, ...]:
    """The checks check_type runs unless told which."""
    return tuple(n for n, c in _REGISTRY.items() if c.default)


def known_checks(checks: Iterable[str]) -> tuple[str, ...]:
    """`checks` as a tuple, every name registered (else a ValueError naming the others)."""
    if isinstance(checks, str):
        raise TypeError(f"check_type: 'checks' must be names of checks, got the string {checks!r}")
    checks = tuple(checks)
    unknown = [c for c in checks if c not in _REGISTRY]
    if unknown:
        raise ValueError(f"check_type: unknown checks {unknown}; known: {list(_REGISTRY)}")
    return checks


def resolve_options(options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict]:
    """Each check's options: its defaults updated by `options` (check name -> {option:
    value}); a check or an option nobody registered is a ValueError naming it."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"check_type: 'options' must map check names to their options, got {options!r}"
        )
    unknown = [c for c in options if c not in _REGISTRY]
    if unknown:
        raise ValueError(
            f"check_type: 'options' names unknown checks {unknown}; known: {list(_REGISTRY)}"
        )
    resolved = {}
    for name, check in _REGISTRY.items():
        given = options.get(name, {})
        if not isinstance(given, Mapping):
            raise TypeError(f"check_type: options[{name!r}] must be a mapping, got {given!r}")
        bad = sorted(set(given) - set(check.options))
        if bad:
            raise ValueError(
                f"check_type: unknown options {bad} for check {name!r}; "
                f"its options: {sorted(check.options) or 'none'}"
            )
        resolved[name] = {**check.options, **given}
    return resolved


def each_sample(
    run: Any,
    name: str,
    samples: Sequence[Any],
    step: Callable[[Any, int], None],
    first: int | None = None,
    input_only: bool = False,
) -> None:
    """``step(sample, k)`` for each sample (k: its index among its function's samples),
    guarded as check `name` (an exception is a failure of that sample); with `first`,
    only each function's first `first` samples; with `input_only`, only the samples
    whose instances all sit in the input (and k counts those)."""
    seen: dict[str, int] = {}
    for s in samples:
        if input_only and not s.input_only:
            run.tick()
            continue
        k = seen[s.name] = seen.get(s.name, -1) + 1
        run.tick()
        if first is not None and k >= first:
            continue
        run.guarded(name, s, lambda s=s, k=k: step(s, k))
