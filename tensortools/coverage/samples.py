"""Running PyTorch's operator samples (op_db) through a type and judging the answers
against the plain computation."""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from tensortools._optional import tool_import
from tensortools.coverage.spec import spec_for
from tensortools.dispatch import TensorLike

__all__ = [
    "SAMPLE_RESULTS",
    "SampleResult",
    "check_sample",
    "explain_refusal",
    "OpSample",
    "op_db",
    "op_db_samples",
    "op_db_size",
    "sample_cases",
    "UNDEFINED_VALUES",
    "compare_results",
    "plain_values",
    "seeded",
]

#: What a sample run through a type gives: the plain answer, a different one, a clear
#: TypeError, or another exception.
SAMPLE_RESULTS = ("correct", "wrong", "refused", "error")


@dataclasses.dataclass
class SampleResult:
    result: str  # one of SAMPLE_RESULTS
    reason: str = ""


def sample_cases(
    max_samples: int = 2,
    dtype: torch.dtype = torch.float32,
    on_entry: Callable[[], None] | None = None,
    ops: Iterable[str] | None = None,
) -> Iterator[tuple[str, Callable, Any, tuple, dict]]:
    """(op_db name, function, input, args, kwargs) for up to `max_samples` CPU samples of
    each op_db entry supporting `dtype` (of those named in `ops`, where given);
    `on_entry()` is called after each op_db entry taken (for progress:
    :func:`op_db_size` entries in all). Needs the expecttest package."""
    wanted = None if ops is None else set(ops)
    for info in op_db():
        if wanted is not None and info.name not in wanted:
            continue
        if dtype in info.supported_dtypes("cpu"):
            try:
                samples = op_db_samples(info, dtype, max_samples)
            except Exception:  # an entry whose sample generator fails on this build
                samples = []
            for s in samples:
                yield info.name, info.op, s.input, s.args, s.kwargs
        if on_entry:
            on_entry()


def op_db_size(ops: Iterable[str] | None = None) -> int:
    """The number of entries in PyTorch's op_db (of those named in `ops`, where given;
    needs the expecttest package)."""
    if ops is None:
        return len(op_db())
    wanted = set(ops)
    return sum(info.name in wanted for info in op_db())


def op_db() -> list:
    """PyTorch's operator database, the samples it tests itself with: an ImportError that
    says what to install where the expecttest package (which it imports) is missing."""
    module = tool_import(
        "torch.testing._internal.common_methods_invocations", "PyTorch's op_db (operator samples)"
    )
    return module.op_db


class OpSample(NamedTuple):
    """One op_db sample: the input, further arguments and keyword arguments."""

    input: Any
    args: tuple
    kwargs: dict


# (OpInfo name, variant, dtype) -> (the samples generated, whether the generator ran out;
# or the exception generating them raised)
_GENERATED: dict[tuple[str, str, torch.dtype], tuple[list[OpSample], bool] | Exception] = {}
_GENERATED_LOCK = threading.Lock()


def op_db_samples(info: Any, dtype: torch.dtype, n: int) -> list[OpSample]:
    """The first `n` CPU samples of an OpInfo in `dtype`.

    Generating op_db's samples costs more than running most of them, and several walks
    over op_db (the checks of :func:`~tensortools.testing.check_type`, the coverage
    report, a suite running both for several types) want the same ones: they are
    generated once per process, from the CPU generator seeded with 0 (the same samples
    whatever ran before; the generator's state is put back after), and each call gets
    its own copies of their tensors (same values, sizes and strides), so a call that
    changes one in place changes no other walk's. (A tensor whose elements overlap, as an
    expanded one, is shared: torch refuses to write to it.) A generator that raises does
    so again on every call, without running again."""
    key = (info.name, info.variant_test_name, dtype)
    with _GENERATED_LOCK:
        kept = _GENERATED.get(key)
    if kept is None or (isinstance(kept, tuple) and len(kept[0]) < n and not kept[1]):
        state = torch.default_generator.get_state()
        torch.default_generator.manual_seed(0)
        try:
            made = [
                OpSample(s.input, tuple(s.args), dict(s.kwargs))
                for s in itertools.islice(info.sample_inputs("cpu", dtype), n)
            ]
            kept = (made, len(made) < n)
        except Exception as err:  # noqa: BLE001 - kept, and raised to each caller
            kept = err
        finally:
            torch.default_generator.set_state(state)
        with _GENERATED_LOCK:
            _GENERATED[key] = kept
    if isinstance(kept, Exception):
        raise kept
    return [_copied(s) for s in kept[0][:n]]


def _copied(sample: OpSample) -> OpSample:
    def one(t: Tensor) -> Tensor:
        with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
            if t.layout != torch.strided:
                out = t.clone()
            elif t.is_conj() or t.is_neg() or torch._debug_has_internal_overlap(t) != 0:
                return t
            else:
                out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
                out.copy_(t)
        return out.requires_grad_(t.requires_grad) if t.is_leaf else out

    return OpSample(*tree_map_only(Tensor, one, tuple(sample), is_leaf=_is_size))


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def plain_values(obj: Any) -> Any:
    """obj with every tensor (any nesting) as a plain dense tensor of its values: a
    tensor-like type's tensor(), a subclass as torch.Tensor, sparse layouts made dense."""

    def plain(x: Any) -> Any:
        if isinstance(x, TensorLike):
            return x.tensor()
        if isinstance(x, Tensor):
            with torch._C.DisableTorchFunctionSubclass():
                if x.layout != torch.strided:
                    x = x.to_dense()
                return x if type(x) is Tensor else x.as_subclass(Tensor)
        return x

    return tree_map(plain, obj, is_leaf=_is_size)


def _tensors(obj: Any) -> list:
    return [x for x in tree_leaves(obj, is_leaf=_is_size) if isinstance(x, (Tensor, TensorLike))]


def compare_results(got: Any, want: Any, exact: bool) -> str:
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
    for g, w in zip(plain_values(got_t), plain_values(want_t)):
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


#: Functions whose results hold uninitialised memory: only dtype and shape can agree.
UNDEFINED_VALUES = {
    "empty",
    "empty_like",
    "empty_strided",
    "empty_permuted",
    "new_empty",
    "new_empty_strided",
}


def seeded(call: Callable[[], Any]) -> Any:
    """call(), with the CPU generator seeded first (random samples give one answer)."""
    # (the CPU generator alone: the samples are CPU samples, and torch.manual_seed also
    # records a stack trace per call for accelerators it seeds lazily)
    torch.default_generator.manual_seed(0)
    return call()


# CPython's words when a method of torch.Tensor is called unbound on what is not a tensor.
_UNBOUND = re.compile(r"descriptor '(\w+)' for '[\w.]+' objects doesn't apply to a '(\w+)'")


def explain_refusal(cls: type, err: TypeError) -> str:
    """Why a sample was refused, in the type's words where the raw message is Python's."""
    message = str(err).splitlines()[0] if str(err) else ""
    if _UNBOUND.search(message):
        return (
            "torch.Tensor's methods called unbound, as torch.Tensor.f(x), take only a "
            f"torch.Tensor, and a {cls.__name__} is not one: Python refuses the call before "
            "torch's dispatch sees it"
        )
    return f"TypeError: {message[:160]}"


def check_sample(
    cls: type, op: Callable, inp: Any, args: tuple, kwargs: dict, name: str = ""
) -> SampleResult | None:
    """Run one sample of `op` (op_db entry `name`) through `cls` and compare with the
    plain computation; None when the type has no stand-in for the sample (see
    its CoverageSpec), or the plain call itself fails."""
    spec = spec_for(cls)
    substituted = spec.substitute(cls, inp, args, kwargs)
    if substituted is None:
        return None
    t_inp, t_args, t_kwargs = substituted
    p_inp, p_args, p_kwargs = plain_values(substituted)
    try:
        want = seeded(lambda: op(p_inp, *p_args, **p_kwargs))
    except Exception:
        return None
    try:
        got, problem = seeded(lambda: spec.call(cls, lambda: op(t_inp, *t_args, **t_kwargs)))
    except TypeError as err:
        return SampleResult("refused", explain_refusal(cls, err))
    except Exception as err:
        return SampleResult("error", f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
    problem = problem or spec.result_problem(cls, got)
    if problem:
        return SampleResult("wrong", problem)
    if (name or getattr(op, "__name__", "")) in UNDEFINED_VALUES:
        got = [
            plain_values(g).copy_(w)
            if (plain_values(g).shape, plain_values(g).dtype) == (w.shape, w.dtype)
            else g
            for g, w in zip(_tensors(got), _tensors(want))
        ]
        want = _tensors(want)
    try:
        reason = compare_results(got, want, exact=spec.exact)
    except Exception as err:
        return SampleResult("error", f"result not comparable: {type(err).__name__}: {err}"[:160])
    return SampleResult("wrong", reason) if reason else SampleResult("correct")
