"""What the coverage report and the testing kit share to run PyTorch's operator samples
through a type: PyTorch's operator database (``op_db``), the plain values of any result,
the comparison of a type's answer with the plain one, and the seeded call.

A leaf over :mod:`tensortools.dispatch` alone, so that :mod:`tensortools.testing` and
:mod:`tensortools.coverage` both build on it without importing each other (the coverage
command's ``--check`` runs the testing kit: coverage sits above testing, never below;
docs/design.md, "Layers"). :mod:`tensortools.coverage.samples` re-exports these names.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from tensortools._optional import tool_import
from tensortools.dispatch import TensorLike

__all__ = [
    "OpSample",
    "UNDEFINED_VALUES",
    "compare_results",
    "op_db",
    "op_db_samples",
    "plain_values",
    "seeded",
    "tensors_of",
]


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
# (held while samples are generated: the seed they are generated from is the process's
# generator, which two threads generating at once would share)
_GENERATED_LOCK = threading.Lock()


def op_db_samples(info: Any, dtype: torch.dtype, n: int | None) -> list[OpSample]:
    """The first `n` CPU samples of an OpInfo in `dtype` (None: every one).

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
        fewer = isinstance(kept, tuple) and (n is None or len(kept[0]) < n) and not kept[1]
        if kept is None or fewer:
            kept = _GENERATED[key] = _generated(info, dtype, n)
    if isinstance(kept, Exception):
        raise kept
    return [_copied(s) for s in kept[0][:n]]


def _generated(
    info: Any, dtype: torch.dtype, n: int | None
) -> tuple[list[OpSample], bool] | Exception:
    """Up to n samples (None: all), and whether they are all the OpInfo has."""
    state = torch.default_generator.get_state()
    torch.default_generator.manual_seed(0)
    try:
        made = [
            OpSample(s.input, tuple(s.args), dict(s.kwargs))
            for s in itertools.islice(info.sample_inputs("cpu", dtype), n)
        ]
        return made, n is None or len(made) < n
    except Exception as err:  # noqa: BLE001 - kept, and raised to each caller
        return err
    finally:
        torch.default_generator.set_state(state)


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


def tensors_of(obj: Any) -> list:
    """The tensors and tensor-like instances in obj (any nesting), in order."""
    return [x for x in tree_leaves(obj, is_leaf=_is_size) if isinstance(x, (Tensor, TensorLike))]


def compare_results(got: Any, want: Any, exact: bool) -> str:
    """'' if got (plain form) equals want, else the reason."""
    got_t, want_t = tensors_of(got), tensors_of(want)
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
