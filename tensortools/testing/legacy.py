"""check_type's keywords before the :class:`~tensortools._spec.TypeSpec` and the options
mapping: each still works, with a DeprecationWarning saying what to write instead."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

from tensortools._spec import TypeSpec

__all__ = ["OPTION_KEYWORDS", "SPEC_KEYWORDS", "translate"]

#: Old keywords that are facts of the type: now fields of its TypeSpec.
SPEC_KEYWORDS = (
    "reference",
    "rule",
    "refusals",
    "settings",
    "safe_globals",
    "volatile_attrs",
    "views_copy",
    "sample_state",
    "collate_fn",
)

#: Old keywords that were one check's option: keyword -> (check, option).
OPTION_KEYWORDS = {
    "gradcheck_samples": ("autograd", "gradcheck_samples"),
    "serialization_samples": ("serialization", "samples"),
    "compile_samples": ("compile", "samples"),
    "compile_backends": ("compile", "backends"),
}


def translate(
    spec: TypeSpec,
    densify: Any,
    options: Any,
    old: dict[str, Any],
) -> tuple[TypeSpec, Any]:
    """The spec and options that `old` (the old keywords given, and a ``(make, densify)``
    pair's densify, or None) stand for; one DeprecationWarning per keyword, naming the new
    form. A keyword check_type never had is a TypeError naming it."""
    unknown = sorted(set(old) - set(SPEC_KEYWORDS) - set(OPTION_KEYWORDS))
    if unknown:
        raise TypeError(f"check_type() got an unexpected keyword argument {unknown[0]!r}")
    name = spec.cls.__name__
    if densify is not None:
        _warn(
            "check_type(cls, (make, densify)) is deprecated: write "
            f"check_type(TypeSpec({name}, make=make, densify=densify))"
        )
        spec = dataclasses.replace(spec, densify=densify)
    fields = {k: v for k, v in old.items() if k in SPEC_KEYWORDS}
    for k in fields:
        _warn(
            f"check_type(..., {k}=...) is deprecated: {k} is a fact of the type; write "
            f"check_type(TypeSpec({name}, make=..., {k}=...))"
        )
    if fields:
        if "volatile_attrs" in fields:
            fields["volatile_attrs"] = tuple(fields["volatile_attrs"])
        spec = dataclasses.replace(spec, **fields)
    moved = {k: v for k, v in old.items() if k in OPTION_KEYWORDS}
    if not moved or not isinstance(options, (Mapping, type(None))):
        return spec, options  # (check_type names what is wrong with the options)
    merged = {c: dict(o) for c, o in (options or {}).items()}
    for k, value in moved.items():
        check, option = OPTION_KEYWORDS[k]
        _warn(
            f"check_type(..., {k}={value!r}) is deprecated: write "
            f"check_type(..., options={{{check!r}: {{{option!r}: {value!r}}}}})"
        )
        if option in merged.get(check, {}):
            raise TypeError(
                f"check_type: {k}= and options[{check!r}][{option!r}] give one option twice"
            )
        merged.setdefault(check, {})[option] = value
    return spec, merged


def _warn(message: str) -> None:
    # (stacklevel: the caller of check_type, past translate and check_type itself)
    warnings.warn(message, DeprecationWarning, stacklevel=4)
