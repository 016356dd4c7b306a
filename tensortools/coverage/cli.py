"""The command ``python -m tensortools.coverage TYPE... [options]``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

import torch

from tensortools.coverage.report import report
from tensortools.coverage.spec import register, spec_for, wrap_every_tensor
from tensortools.dispatch import TorchFunctionTable

__all__ = ["main", "register_make", "resolve_type"]


def _own_types() -> dict[str, type]:
    """tensortools' own types by name: its public classes built on the dispatch base."""
    import tensortools

    return {
        name: obj
        for name in tensortools.__all__
        if isinstance(obj := getattr(tensortools, name), type)
        and issubclass(obj, TorchFunctionTable)
    }


def resolve_type(text: str) -> type:
    """One of tensortools' types by name, or any type by dotted path."""
    own = _own_types()
    if text in own:
        return own[text]
    module_name, _, attr = text.rpartition(".")
    if not module_name:
        raise ValueError(
            f"unknown type {text!r}: give one of {sorted(own)} or a dotted "
            "path such as mypackage.module.MyType"
        )
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import {text!r}: {err}") from err


def _resolve_function(text: str) -> Any:
    module_name, _, attr = text.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"--make: cannot import {text!r}: {err}") from err
    if not callable(fn):
        raise ValueError(f"--make: {text!r} is not callable")
    return fn


def register_make(cls: type, make: Callable[[torch.Tensor], Any]) -> None:
    """Register `make` (one tensor -> an instance, or None) as cls's stand-in for every
    tensor of a sample, for the coverage report and check_type's coverage hooks."""

    register(cls, substitute=wrap_every_tensor, make=make)


_DESCRIPTION = (
    "Override coverage: how a type built on tensortools.dispatch answers the "
    "overridable PyTorch API."
)


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (its options and their help)."""
    parser = argparse.ArgumentParser(
        prog="python -m tensortools.coverage", description=_DESCRIPTION
    )
    parser.add_argument(
        "types",
        nargs="+",
        metavar="TYPE",
        help=f"{', '.join(sorted(_own_types()))} or pkg.module.Type",
    )
    parser.add_argument(
        "--format",
        choices=["text", "markdown", "json"],
        default="text",
        help="text (default: the summary, then what failed), markdown (as docs/coverage.md) "
        "or json (everything)",
    )
    listing = parser.add_mutually_exclusive_group()
    listing.add_argument(
        "--all",
        action="store_true",
        help="text: list every function and its samples, grouped by outcome, after the summary",
    )
    listing.add_argument(
        "--failures-only",
        action="store_true",
        help="text: the summary and what failed only (the default; kept for old scripts)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr while samples run"
    )
    parser.add_argument(
        "--no-samples", action="store_true", help="classify only; do not run op_db samples"
    )
    parser.add_argument(
        "--max-samples", type=int, default=2, help="op_db samples per operator (default 2)"
    )
    parser.add_argument(
        "--ops",
        metavar="NAMES",
        help="run the op_db samples (and --check) of these functions only (comma-separated "
        "op_db names, as exp,flip,linalg.det; default: every function)",
    )
    parser.add_argument(
        "--make",
        metavar="FUNCTION",
        help="pkg.module.function making an instance of the type from one tensor (None where "
        "it has none), for the report and --check alike (default: the type's registered "
        "spec; for a TensorWrapper, its constructor on the tensor)",
    )
    parser.add_argument(
        "--check",
        metavar="CHECKS",
        help="also run tensortools.testing.check_type with these checks (comma-separated; "
        "'default': the default ones, every check but compile and batches; 'all': every "
        "check but batches, compile included; the type's coverage hooks make its "
        "instances); exit status 1 on failures",
    )
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="also time common calls on instances against plain tensors "
        "(tensortools.testing.overhead_report, about a second per type; the type's coverage "
        "hooks make its instances)",
    )
    return parser


def _overhead(cls: type) -> str:
    """overhead_report's table for cls, its instances made by its coverage hooks; a line
    saying why where they make none of a plain float32 matrix."""
    from tensortools import testing

    try:
        table = testing.overhead_report(cls, testing.coverage_spec(cls).make)
    except TypeError as err:
        return f"{cls.__name__}: no per-call times: {err}"
    return f"{cls.__name__}: {table}"


def main(argv: list[str] | None = None) -> int:
    """The command ``python -m tensortools.coverage TYPE... [options]``; returns its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.all and args.format != "text":
        parser.error(f"--all lists rows in the text format; --format {args.format} has them all")
    if args.overhead and args.format == "json":
        parser.error("--overhead prints a table: use it with --format text or markdown")
    if args.check:
        from tensortools import testing

        checks = {
            "default": testing.DEFAULT_CHECKS,
            "all": tuple(c for c in testing.CHECKS if c != "batches"),
        }.get(args.check) or tuple(args.check.split(","))
        unknown = [c for c in checks if c not in testing.CHECKS]
        if unknown:
            parser.error(f"--check: unknown checks {unknown}; known: {', '.join(testing.CHECKS)}")
    ops = None
    if args.ops is not None:
        ops = [name.strip() for name in args.ops.split(",") if name.strip()]
        if not ops:
            parser.error("--ops: give at least one op_db name (comma-separated)")
    try:
        types = [resolve_type(t) for t in args.types]
        make = _resolve_function(args.make) if args.make else None
    except ValueError as err:
        parser.error(str(err))
    for cls in types if make is not None else []:
        register_make(cls, make)
    outputs = []
    for cls in types:
        try:
            rep = report(
                cls,
                samples=not args.no_samples,
                max_samples=args.max_samples,
                progress=not args.no_progress,
                ops=ops,
            )
        except TypeError as err:
            parser.error(str(err))
        if args.format == "json":
            outputs.append(rep.to_json())
        elif args.format == "markdown":
            outputs.append(rep.to_markdown())
        else:
            outputs.append(rep.to_text(full=args.all))
    if args.format == "markdown":
        outputs.insert(
            0,
            "# Override coverage\n\nGenerated by `python -m tensortools.coverage "
            f"{' '.join(args.types)} --format markdown` (torch {torch.__version__}, "
            f"{args.max_samples} op_db samples per operator, float32, CPU). "
            "Each type is classified over the overridable functions of "
            "`torch.overrides` less the ignored ones; op_db samples are run "
            "through the type and compared with the plain computation: exactly, "
            "or to rounding for types that compute some calls their own way "
            f"({', '.join(c.__name__ for c in types if not spec_for(c).exact) or 'none here'}: "
            "their reductions may add in another order).",
        )
    print("\n\n".join(outputs))
    for cls in types if args.overhead else []:
        print("\n" + _overhead(cls))
    status = 0
    for cls in types if args.check else []:
        result = testing.check_type(
            testing.coverage_spec(cls),
            checks=checks,
            ops=ops,
            max_samples=args.max_samples,
            raise_on_failure=False,
        )
        print("\n" + result.summary())
        status = status or int(not result.passed)
    return status
