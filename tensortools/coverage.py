"""Override coverage: how a type built on :mod:`tensortools.dispatch` answers the
overridable PyTorch API.

:func:`report` classifies every function of ``torch.overrides.get_overridable_functions()``
(less ``get_ignored_functions()``) for a type: answered by a table entry (``handled``),
by the fallback (``fallback``), or refused with a ``TypeError`` (``refused``). Where
PyTorch's operator database (``op_db``, the sample inputs PyTorch tests itself with; it
needs the ``expecttest`` package) has samples for a function, each sample is also run
through the type and compared with the plain computation: ``correct``, ``wrong`` (a
value, dtype or shape differs, or a result lost the type), ``refused`` (a clear
``TypeError``) or ``error`` (any other exception).

``python -m tensortools.coverage ScalarTensor`` prints the table and the counts (also
``MetadataTensor``, ``LoggingTensor``, or a type by dotted path, ``pkg.module.Type``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import warnings
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor

from tensortools.dispatch import TorchFunctionTable
from tensortools.types import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs

__all__ = ["FunctionCoverage", "CoverageReport", "SampleResult", "overridable_functions",
           "report", "sample_cases", "check_sample", "main"]

OUTCOMES = ("handled", "fallback", "refused")
SAMPLE_RESULTS = ("correct", "wrong", "refused", "error")


def _name(func: Callable) -> str:
    name = torch.overrides.resolve_name(func)
    if name:
        return name
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(func)


def overridable_functions() -> list[tuple[str, Callable]]:
    """(qualified name, function) for every overridable function torch does not ignore,
    and tensortools' own operators, sorted by name."""
    from tensortools import ops

    ignored = torch.overrides.get_ignored_functions()
    seen: dict[str, Callable] = {f"tensortools.ops.{n}": getattr(ops, n) for n in ops.__all__}
    for funcs in torch.overrides.get_overridable_functions().values():
        for func in funcs:
            if func in ignored:
                continue
            seen.setdefault(_name(func), func)
    return sorted(seen.items())


@dataclasses.dataclass
class FunctionCoverage:
    """How a type answers one function, and what its op_db samples gave."""

    name: str
    outcome: str
    samples: dict[str, int] = dataclasses.field(default_factory=dict)
    # False for op_db entries that are not themselves overridable functions (lambdas
    # around a method, say): their samples count, they do not count as functions.
    overridable: bool = True
    reason: str = ""  # why the first sample that was not correct was not

    @property
    def failed(self) -> bool:
        """Whether a sample was not answered correctly (wrong, refused or an error)."""
        return any(self.samples.get(r) for r in ("wrong", "refused", "error"))


@dataclasses.dataclass
class CoverageReport:
    type_name: str
    functions: list[FunctionCoverage]
    note: str = ""  # why samples were not run, if they were asked for and not run

    def counts(self) -> dict[str, int]:
        """Functions per outcome, and samples per result."""
        counts = {o: 0 for o in OUTCOMES}
        for f in self.functions:
            if f.overridable:
                counts[f.outcome] += 1
        for r in SAMPLE_RESULTS:
            counts[f"samples {r}"] = sum(f.samples.get(r, 0) for f in self.functions)
        return counts

    def failures(self) -> list[FunctionCoverage]:
        return [f for f in self.functions if f.failed]

    def to_json(self) -> str:
        return json.dumps({"type": self.type_name, "counts": self.counts(),
                           "functions": [dataclasses.asdict(f) for f in self.functions]},
                          indent=1)

    def to_text(self, only_failures: bool = False) -> str:
        rows = self.failures() if only_failures else self.functions
        lines = [f"{'function':<56} {'outcome':<9} samples (correct/wrong/refused/error)"]
        for f in rows:
            s = "/".join(str(f.samples.get(r, 0)) for r in SAMPLE_RESULTS) if f.samples else "-"
            lines.append(f"{f.name:<56} {f.outcome:<9} {s}"
                         + (f"  {f.reason}" if f.reason else ""))
        lines.append("")
        lines.append(f"{self.type_name}: " + ", ".join(
            f"{k} {v}" for k, v in self.counts().items()))
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def to_markdown(self, only_failures: bool = True) -> str:
        c = self.counts()
        run = sum(c[f"samples {r}"] for r in SAMPLE_RESULTS)
        lines = [f"## {self.type_name}", "",
                 f"Functions: {c['handled']} handled by a table entry, {c['fallback']} served "
                 f"by the fallback, {c['refused']} refused with a TypeError.", "",
                 f"op_db samples: {run} run, {c['samples correct']} correct, "
                 f"{c['samples wrong']} wrong, {c['samples refused']} refused with a "
                 f"TypeError, {c['samples error']} other errors.", ""]
        rows = self.failures() if only_failures else self.functions
        if rows:
            lines += ["Samples not answered correctly:", "",
                      "| function | outcome | wrong / refused / error | reason |",
                      "| --- | --- | --- | --- |"]
            for f in rows:
                reason = f.reason.replace("|", "\\|").replace("\n", " ")
                lines.append(f"| `{f.name}` | {f.outcome} | {f.samples.get('wrong', 0)} / "
                             f"{f.samples.get('refused', 0)} / {f.samples.get('error', 0)} "
                             f"| {reason} |")
        else:
            lines.append("Every sample was answered correctly.")
        return "\n".join(lines)


# --- samples ---------------------------------------------------------------------------

def _wrap_all(make: Callable[[Tensor], Any], count: list) -> Callable[[Any], Any]:
    def wrap(obj: Any) -> Any:
        if isinstance(obj, Tensor):
            count.append(1)
            return make(obj)
        if isinstance(obj, (list, tuple)):
            return type(obj)(wrap(o) for o in obj)
        return obj
    return wrap


def _scalar_substitute(t: Any) -> Any:
    """A ScalarTensor in place of a square 2-D floating matrix; None where none fits."""
    if (isinstance(t, Tensor) and t.dim() == 2 and t.shape[0] == t.shape[1]
            and t.dtype.is_floating_point and not t.requires_grad):
        return ScalarTensor(t.shape[0], 1.5, dtype=t.dtype, device=t.device)
    return None


# How each of tensortools' types stands in for a sample: a function from the sample's
# (input, args, kwargs) to the typed (input, args, kwargs), or None if it does not apply.
def _substitute_wrapper(make: Callable[[Tensor], Any]):
    def substitute(inp, args, kwargs):
        wrapped: list = []
        wrap = _wrap_all(make, wrapped)
        try:
            out = wrap(inp), wrap(args), {k: wrap(v) for k, v in kwargs.items()}
        except TypeError:  # a layout the type cannot wrap (sparse CSR): not applicable
            return None
        # Factory functions (torch.zeros(shape), ...) take no tensor: nothing to check.
        return out if wrapped else None
    return substitute


def _substitute_scalar(inp, args, kwargs):
    d = _scalar_substitute(inp)
    return None if d is None else (d, args, kwargs)


SUBSTITUTES: dict[type, Callable] = {
    MetadataTensor: _substitute_wrapper(lambda t: MetadataTensor(t, {"coverage": 1})),
    LoggingTensor: _substitute_wrapper(LoggingTensor),
    ScalarTensor: _substitute_scalar,
}


@dataclasses.dataclass
class SampleResult:
    result: str  # one of SAMPLE_RESULTS
    reason: str = ""


def _plain(obj: Any) -> Any:
    """A plain dense tensor with obj's values (sparse layouts made dense)."""
    if isinstance(obj, ScalarTensor):
        return obj.tensor()
    if isinstance(obj, Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            if obj.layout != torch.strided:
                obj = obj.to_dense()
            return obj if type(obj) is Tensor else obj.as_subclass(Tensor)
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [_plain(o) for o in obj]
    return obj


def _tensors(obj: Any) -> list:
    if isinstance(obj, (Tensor, ScalarTensor)):
        return [obj]
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [t for o in obj for t in _tensors(o)]
    return []


def _compare(got: Any, want: Any, exact: bool) -> str:
    """'' if got (plain form) equals want, else the reason."""
    got_t, want_t = _tensors(got), _tensors(want)
    if len(got_t) != len(want_t):
        return f"{len(got_t)} tensors returned instead of {len(want_t)}"
    if not want_t:
        try:
            same = bool(got == want)
        except Exception:  # e.g. comparing tensors inside containers
            same = False
        return "" if same or repr(got) == repr(want) else f"returned {got!r} instead of {want!r}"
    for g, w in zip(got_t, want_t):
        g, w = _plain(g), _plain(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"dtype/shape {g.dtype} {tuple(g.shape)} instead of {w.dtype} {tuple(w.shape)}"
        try:
            if exact:
                torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(g, w, equal_nan=True)
        except AssertionError as err:
            return "values differ: " + str(err).splitlines()[0]
    return ""


# Functions whose results hold uninitialised memory: only dtype and shape can agree.
_UNDEFINED_VALUES = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                     "new_empty_strided"}


def check_sample(cls: type, op: Callable, inp: Any, args: tuple, kwargs: dict,
                 name: str = "") -> SampleResult | None:
    """Run one sample of `op` (op_db entry `name`) through `cls` and compare with the
    plain computation; None when the sample does not apply to the type (or the plain
    call itself fails)."""
    substituted = SUBSTITUTES[cls](inp, args, kwargs)
    if substituted is None:
        return None
    t_inp, t_args, t_kwargs = substituted
    plain_inp = t_inp.tensor() if isinstance(t_inp, ScalarTensor) else inp
    try:
        torch.manual_seed(0)
        want = op(plain_inp, *args, **kwargs)
    except Exception:
        return None
    try:
        torch.manual_seed(0)
        if cls is LoggingTensor:
            with capture_logs() as logs:
                got = op(t_inp, *t_args, **t_kwargs)
            if not logs:
                return SampleResult("wrong", "the call was not logged")
        else:
            got = op(t_inp, *t_args, **t_kwargs)
    except TypeError as err:
        return SampleResult("refused", f"TypeError: {str(err).splitlines()[0][:120]}")
    except Exception as err:
        return SampleResult("error", f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
    if cls is not ScalarTensor:
        for t in _tensors(got):
            if not isinstance(t, cls):
                return SampleResult("wrong", f"a result is {type(t).__name__}, not {cls.__name__}")
            if cls is MetadataTensor and t.metadata != {"coverage": 1}:
                return SampleResult("wrong", f"a result's metadata is {t.metadata!r}")
    if (name or getattr(op, "__name__", "")) in _UNDEFINED_VALUES:
        want = _tensors(want)
        got = [_plain(g).copy_(w) if (_plain(g).shape, _plain(g).dtype) == (w.shape, w.dtype)
               else g for g, w in zip(_tensors(got), want)]
    try:
        reason = _compare(got, want, exact=cls is not ScalarTensor)
    except Exception as err:
        return SampleResult("error", f"result not comparable: {type(err).__name__}: {err}"[:160])
    if reason:
        return SampleResult("wrong", reason)
    return SampleResult("correct")


def sample_cases(max_samples: int = 2, dtype: torch.dtype = torch.float32
                 ) -> Iterator[tuple[str, Callable, Any, tuple, dict]]:
    """(op_db name, function, input, args, kwargs) for up to `max_samples` CPU samples of
    each op_db entry supporting `dtype`. Needs the expecttest package."""
    from torch.testing._internal.common_methods_invocations import op_db

    for info in op_db:
        if dtype not in info.supported_dtypes("cpu"):
            continue
        try:
            samples = info.sample_inputs("cpu", dtype)
            for i, s in enumerate(samples):
                if i >= max_samples:
                    break
                yield info.name, info.op, s.input, tuple(s.args), dict(s.kwargs)
        except Exception:  # an entry whose sample generator fails on this build
            continue


def _progress(items: Iterable, total: int | None, desc: str, enabled: bool) -> Iterable:
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # progress bars are a nicety; the report does not need them
        return items
    return tqdm(items, total=total, desc=desc, file=sys.stderr, leave=False)


def report(cls: type, *, samples: bool = True, max_samples: int = 2,
           progress: bool = False) -> CoverageReport:
    """Classify every overridable function for `cls` (a type built on
    tensortools.dispatch) and, where op_db has samples and a way to substitute the type
    is known (SUBSTITUTES), check each sample's answer."""
    if not (isinstance(cls, type) and issubclass(cls, TorchFunctionTable)):
        raise TypeError("coverage.report: 'cls' must be a type built on "
                        f"tensortools.dispatch.TorchFunctionTable, got {cls!r}")
    entries: dict[Callable, FunctionCoverage] = {}
    for name, func in overridable_functions():
        entries[func] = FunctionCoverage(name, _outcome(cls, func))
    note = ""
    if samples and cls in SUBSTITUTES:
        try:
            import expecttest  # noqa: F401  (op_db imports it)
        except ImportError:
            note = "op_db samples not run: they need the expecttest package"
            samples = False
    if samples and cls in SUBSTITUTES:
        with warnings.catch_warnings():
            # The ops' own deprecation and beta warnings, once per sample otherwise.
            warnings.simplefilter("ignore")
            cases = list(sample_cases(max_samples))
            for opname, op, inp, args, kwargs in _progress(cases, len(cases), cls.__name__,
                                                           progress):
                _record(entries, cls, op, opname,
                        check_sample(cls, op, inp, args, kwargs, opname))
    return CoverageReport(cls.__name__, sorted(entries.values(), key=lambda e: e.name), note)


def _outcome(cls: type, func: Callable) -> str:
    if cls.handler_for(func) is not None:
        return "handled"
    return "refused" if cls.refuses_unhandled() else "fallback"


def _record(entries: dict, cls: type, op: Callable, opname: str,
            result: SampleResult | None) -> None:
    if result is None:
        return
    entry = entries.get(op)
    if entry is None:  # an op_db entry outside the overridable list (often a lambda)
        entry = entries[op] = FunctionCoverage(f"op_db {opname}", _outcome(cls, op),
                                               overridable=False)
    entry.samples[result.result] = entry.samples.get(result.result, 0) + 1
    if result.result != "correct" and not entry.reason:
        entry.reason = result.reason


# --- command line ----------------------------------------------------------------------

TYPES = {"ScalarTensor": ScalarTensor, "MetadataTensor": MetadataTensor,
         "LoggingTensor": LoggingTensor}


def resolve_type(text: str) -> type:
    """One of tensortools' types by name, or any type by dotted path."""
    if text in TYPES:
        return TYPES[text]
    module_name, _, attr = text.rpartition(".")
    if not module_name:
        raise ValueError(f"unknown type {text!r}: give one of {sorted(TYPES)} or a dotted "
                         "path such as mypackage.module.MyType")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import {text!r}: {err}") from err


def main(argv: list[str] | None = None) -> int:
    """The command ``python -m tensortools.coverage TYPE... [options]``; returns its exit status."""
    parser = argparse.ArgumentParser(prog="python -m tensortools.coverage",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("types", nargs="+", metavar="TYPE",
                        help="ScalarTensor, MetadataTensor, LoggingTensor or pkg.module.Type")
    parser.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    parser.add_argument("--failures-only", action="store_true",
                        help="list only the functions with wrong or erroring samples")
    parser.add_argument("--no-samples", action="store_true",
                        help="classify only; do not run op_db samples")
    parser.add_argument("--max-samples", type=int, default=2,
                        help="op_db samples per operator (default 2)")
    args = parser.parse_args(argv)
    try:
        types = [resolve_type(t) for t in args.types]
    except ValueError as err:
        parser.error(str(err))
    outputs = []
    for cls in types:
        try:
            rep = report(cls, samples=not args.no_samples, max_samples=args.max_samples,
                         progress=sys.stderr.isatty())
        except TypeError as err:
            parser.error(str(err))
        if args.format == "json":
            outputs.append(rep.to_json())
        elif args.format == "markdown":
            outputs.append(rep.to_markdown(only_failures=True))
        else:
            outputs.append(rep.to_text(only_failures=args.failures_only))
    if args.format == "markdown":
        outputs.insert(0, "# Override coverage\n\nGenerated by `python -m tensortools.coverage "
                       f"{' '.join(args.types)} --format markdown` (torch {torch.__version__}, "
                       f"{args.max_samples} op_db samples per operator, float32, CPU). "
                       "Each type is classified over the overridable functions of "
                       "`torch.overrides` less the ignored ones; op_db samples are run "
                       "through the type and compared with the plain computation (exactly "
                       "for MetadataTensor and LoggingTensor; to rounding for ScalarTensor, "
                       "whose reductions may add in another order).")
    print("\n\n".join(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
