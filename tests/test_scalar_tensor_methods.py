"""Every Tensor method and torch function on a ScalarTensor against the same call on its
dense matrix.

The rule: a call gives what the dense matrix gives (value, dtype, shape; for an in-place
call, the same effect on the ScalarTensor), or raises a TypeError and changes nothing;
where the dense call raises, so does the ScalarTensor. Queries and conversions never
build the dense matrix, even for N = 10**12.

The sweep takes every overridable Tensor method (about 630, called as d.method(...)) and
torch function (about 750, called as torch.function(d, ...)) with no further argument
and with one operand of each kind (a number, a 0-d tensor, a ScalarTensor, a
dense matrix), for every dtype, special values (0, -0, ±inf, nan, huge, tiny) and two
of N = 0, 1, 2, 3 per call and dtype (drawn with a fixed seed).
"""

from __future__ import annotations

import math
import random
import warnings

import pytest
import torch
from _support.scalar_cases import seeded_outcome as _attempt

from tensortools import ScalarTensor
from tensortools.dispatch import CannotHoldResult

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _values(dtype: torch.dtype) -> list:
    if dtype == torch.bool:
        return [True, False]
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        return [0, 3, info.max, info.min]
    info = torch.finfo(dtype)
    return [0.0, -0.0, 1.5, -math.inf, math.inf, math.nan, info.max, info.tiny]


# Protocol methods (not calls on values); calls that leave the process (shared memory,
# pinned memory); __repr__ (a ScalarTensor shows N and value: tested below); and torch's
# own hazards on the dense call: lu_unpack trusts its pivots (a dense integer matrix as
# pivots corrupts the heap), binomial and poisson run for as long as their count or rate
# is large (3.4e38 never ends).
_SKIP = {
    "__setstate__",
    "__reduce_ex__",
    "__torch_function__",
    "__deepcopy__",
    "__array_wrap__",
    "share_memory_",
    "pin_memory",
    "__dlpack__",
    "__repr__",
    "lu_unpack",
    "binomial",
    "poisson",
}


def _calls() -> list:
    """(name, call) for every overridable Tensor method, called as d.method(...), and every
    overridable torch function, called as torch.function(d, ...); sorted by name, so that
    each parametrised run samples the same calls."""
    found = {}
    for namespace, prefix in (
        (torch.Tensor, "Tensor."),
        (torch, "torch."),
        (torch.linalg, "torch.linalg."),
        (torch.special, "torch.special."),
        (torch.nn.functional, "torch.nn.functional."),
    ):
        for func in torch.overrides.get_overridable_functions().get(namespace, ()):
            name = getattr(func, "__name__", "")
            private = name.startswith("_") and not name.endswith("__")
            if name in _SKIP or private or func in torch.overrides.get_ignored_functions():
                continue
            if namespace is torch.Tensor:
                found[prefix + name] = lambda x, *a, _n=name: getattr(x, _n)(*a)
            else:
                found[prefix + name] = func
    return sorted(found.items())


CALLS = _calls()
# Calls whose values depend on summation order or LAPACK: compared to rounding.
_ROUNDED = {
    "sum",
    "mean",
    "nansum",
    "nanmean",
    "trace",
    "det",
    "logdet",
    "slogdet",
    "inverse",
    "matmul",
    "mm",
    "__matmul__",
    "__rmatmul__",
    "prod",
    "std",
    "var",
    "norm",
    "cumsum",
    "cumprod",
    "logsumexp",
    "softmax",
    "log_softmax",
    "dist",
    "renorm",
    "addmm",
    "addmm_",
    "matrix_power",
    "matrix_exp",
    "pinverse",
    "cholesky_inverse",
    "outer",
    "dot",
    "vdot",
    "inner",
    "kron",
    "tensordot",
    "chain_matmul",
}
# Results whose values are uninitialised memory or opaque packed buffers.
_UNDEFINED = {
    "new_empty",
    "new_empty_strided",
    "empty_like",
    "fbgemm_pack_gemm_matrix_fp16",
    "fbgemm_pack_quantized_matrix",
}


def _plain(x):
    if isinstance(x, ScalarTensor):
        return x.tensor()
    if isinstance(x, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return x.to_dense() if x.layout != torch.strided else x
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        return type(x)(_plain(o) for o in x) if type(x) in (list, tuple) else [_plain(o) for o in x]
    if type(x).__module__ == "numpy" and hasattr(x, "shape"):  # Tensor.numpy, __array__
        return torch.as_tensor(x)
    return x


def _undefined(name: str, finite: bool) -> bool:
    # torch's orthogonal polynomials read uninitialised memory for a NaN argument, and
    # LAPACK's least squares refuses non-finite input (MKL: "Parameter 4 was incorrect")
    # yet returns; two runs of the same dense call differ: only dtype and shape are
    # defined there
    return (
        name in _UNDEFINED
        or "_polynomial_" in name
        or (not finite and name in ("lstsq", "linalg_lstsq"))
    )


def _same(got, want, name: str, finite: bool = True) -> str:
    """'' if got equals want (values, dtypes, shapes), else what differs. torch rounds the
    last bit of complex and half-precision results differently in its vectorised and
    scalar loops, so the 2-element pair of a ScalarTensor and the N x N matrix may differ
    there by one unit in the last place."""
    got, want = _plain(got), _plain(want)
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"returned {type(got).__name__} instead of a tensor"
        if (got.dtype, got.shape) != (want.dtype, want.shape):
            return f"{got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
        if _undefined(name, finite):
            return ""
        tolerance = {}
        if name not in _ROUNDED:
            last_bit = want.dtype.is_complex or want.dtype in (torch.float16, torch.bfloat16)
            tolerance = {"rtol": torch.finfo(want.dtype).eps if last_bit else 0, "atol": 0}
        try:
            torch.testing.assert_close(got, want, equal_nan=True, **tolerance)
        except AssertionError as err:
            return str(err).splitlines()[0]
        return ""
    if isinstance(want, (list, tuple)) and not isinstance(want, torch.Size):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"returned {got!r} instead of {want!r}"
        return next((r for r in (_same(g, w, name, finite) for g, w in zip(got, want)) if r), "")
    if isinstance(want, (float, complex)) and type(got) is type(want) and want != want:
        return (
            ""
            if got != got and repr(got) == repr(want)
            else f"returned {got!r} instead of {want!r}"
        )
    if type(got) is not type(want) or got != want:
        return f"returned {got!r} instead of {want!r}"
    return ""


def _operands(d: ScalarTensor, rng: random.Random) -> list:
    # (integer operands stay small: a method may take them as sizes)
    value = rng.choice(
        _values(d.dtype) if d.dtype.is_floating_point or d.dtype.is_complex else [0, 1, 3]
    )
    return [
        (),
        (2,),
        (torch.tensor(value, dtype=d.dtype),),
        (ScalarTensor(d.N, value, dtype=d.dtype),),
        (torch.full((d.N, d.N), 1, dtype=d.dtype),),
    ]


def _check_call(qualified: str, func, d: ScalarTensor, operands: tuple) -> str:
    """'' when func(d, *operands) follows the rule, else the failure."""
    name = qualified.rsplit(".", 1)[-1]
    before = d.tensor()
    dense = d.tensor()
    dense_operands = tuple(_plain(o) for o in operands)
    want, want_error = _attempt(lambda: func(dense, *dense_operands))
    got, got_error = _attempt(lambda: func(d, *operands))
    if want_error is not None:
        if got_error is None:
            return f"returned where the dense call raised {want_error!r}"
        return ""
    if got_error is not None:
        if not isinstance(got_error, TypeError):
            return f"raised {got_error!r} where the dense call returned"
        if not torch.equal(d.tensor().nan_to_num(), before.nan_to_num()):
            return f"refused ({got_error!r}) but changed the ScalarTensor"
        return ""
    in_place = (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")
    if in_place and (got is d) != (want is dense):  # it returns what it changed
        return f"returned {type(got).__name__} where the dense call returned {type(want).__name__}"
    finite = bool(before.isfinite().all())
    reason = _same(got, want, name, finite)
    if not reason:
        reason = _same(d.tensor(), dense, name, finite)  # the same effect (or none) on d
        reason = reason and f"effect on the ScalarTensor: {reason}"
    return reason


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_method_matches_the_dense_matrix(dtype):
    rng = random.Random(str(dtype))
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, func in CALLS:
            for n in sorted(rng.sample((0, 1, 2, 3), 2)):  # two sizes per call and dtype
                value = rng.choice(_values(dtype))
                for operands in _operands(ScalarTensor(n, value, dtype=dtype), rng):
                    d = ScalarTensor(n, value, dtype=dtype)
                    reason = _check_call(name, func, d, operands)
                    if reason:
                        failures.append(
                            f"{name}(N={n}, value={value!r}, "
                            f"{[type(o).__name__ for o in operands]}): {reason}"
                        )
    assert not failures, f"{len(failures)} calls differ:\n" + "\n".join(failures[:40])


def test_reflected_operators_reach_the_other_operand():
    class Reflects:
        def __radd__(self, other):
            return "radd"

        def __rmatmul__(self, other):
            return "rmatmul"

        def __eq__(self, other):
            return "eq"

    d = ScalarTensor(2, 1.0)
    assert d + Reflects() == "radd" and d @ Reflects() == "rmatmul" and (d == Reflects()) == "eq"
    with pytest.raises(TypeError, match="unsupported operand"):
        d + object()
    d += ScalarTensor(2, 1.0)  # in place, the same object
    assert d.value == 2.0
    with pytest.raises(CannotHoldResult):
        d += 1  # refused, not rebound to a dense matrix
    assert isinstance(d, ScalarTensor) and d.value == 2.0


def test_low_precision_reductions_accumulate_like_the_dense_matrix():
    for dtype in (torch.float16, torch.bfloat16):
        d = ScalarTensor(1000, 100.0, dtype=dtype)
        for fn in (torch.mean, torch.sum, torch.trace):
            got, want = fn(d), fn(d.tensor())
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, equal_nan=True)
        assert torch.isfinite(torch.mean(d))


def test_repr_prints_the_value_as_its_dtype_would():
    assert repr(ScalarTensor(2, 3.14) + ScalarTensor(2, 3.14)) == "ScalarTensor(N=2, value=6.28)"
    assert repr(ScalarTensor(2, 1 / 3)) == "ScalarTensor(N=2, value=0.33333334)"
    assert (
        repr(ScalarTensor(2, 1 / 3, dtype=torch.float64)) == f"ScalarTensor(N=2, value={1 / 3!r})"
    )
    assert repr(ScalarTensor(2, 0.1, dtype=torch.bfloat16)) == "ScalarTensor(N=2, value=0.1)"
    assert repr(ScalarTensor(2, 5, dtype=torch.int8)) == "ScalarTensor(N=2, value=5)"
    assert repr(ScalarTensor(2, 1.1 + 2.2j)) == "ScalarTensor(N=2, value=(1.1+2.2j))"
    assert repr(ScalarTensor(2, math.nan)) == "ScalarTensor(N=2, value=nan)"
    # the printed value is the stored one: reading it back gives the same ScalarTensor
    for value in (math.pi, 1e-40, 3e38, -0.0):
        d = ScalarTensor(2, value)
        shown = float(repr(d).split("value=")[1][:-1])
        assert torch.tensor(shown, dtype=torch.float32).item() == d.tensor()[0, 0].item()
