"""ScalarTensor's structured handlers at the edges of what stands in for the dense matrix,
against the same call on the dense matrix, exactly (values, NaN and infinity positions,
dtype, shape):

- every handler of two operands, in each of its forms and operand orders, with numbers
  at and past each dtype's range (torch rounds a number that comes first to the tensor's
  dtype, and one that comes second it may not);
- every handler computed on the pair, at sizes that put the dense matrix's diagonal in
  torch's vector loop, its scalar loop or both (the two can differ).

The closed forms at both ends of the range are swept beside the rest of their families
(tests/test_scalar_reductions.py, tests/test_scalar_linalg.py). The handlers and their
forms come from the class's table; the numbers from torch.finfo and torch.iinfo."""

import inspect
import math
import operator

import pytest
import torch
from _support.scalar_cases import outcome

from tensortools import ScalarTensor
from tensortools.types.scalar.elementwise import flags_of

#: The dtypes the sweeps run over.
DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]
FLOATING = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

#: The handler families that compute on the pair [value, 0].
PAIR_FAMILIES = ("tensortools.types.scalar.arithmetic", "tensortools.types.scalar.elementwise")


def dense_of(x):
    return x.tensor() if isinstance(x, ScalarTensor) else x


def same_exactly(got, want, where):
    got = dense_of(got)
    assert type(got) is torch.Tensor, (where, type(got))
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
    torch.testing.assert_close(
        got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{where}: {m}"
    )


def range_numbers(dtype):
    """Numbers at and past the range of dtype: its largest (and beyond), its smallest
    normal, its smallest subnormal and one that rounds to 0 in it; for an integer dtype its
    limits and one past each."""
    if dtype == torch.bool:
        return [2, -1]
    if dtype.is_floating_point or dtype.is_complex:
        info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
        beyond = 2 * info.max if info.max < 1e300 else 2 * int(info.max)
        smallest = info.tiny * info.eps
        return [info.max, -info.max, beyond, info.tiny, smallest, smallest / 4]
    info = torch.iinfo(dtype)
    return [info.max, info.min, info.max + 1, info.min - 1]


#: Numbers every dtype meets: zeros, ones, special values, and ints at the edges of the
#: 64-bit types a Python int becomes.
GENERAL_NUMBERS = [0, -0.0, 1, 0.5, True, 1j, math.inf, -math.inf, math.nan, 2**40]
GENERAL_NUMBERS += [2**63, 2**64, -(2**63) - 1]


def numbers_for(dtype):
    """The general numbers, those at the edges of dtype and, for bool and integer dtypes,
    of float32 (with a float number they compute in the default dtype)."""
    found = []
    promoted = [] if dtype.is_floating_point or dtype.is_complex else range_numbers(torch.float32)
    for x in GENERAL_NUMBERS + range_numbers(dtype) + promoted:
        if not any(type(x) is type(y) and (x == y or x != x and y != y) for y in found):
            if not (type(x) is float and x == 0 and math.copysign(1, x) < 0 and -0.0 in found):
                found.append(x)
    return found


def values_for(dtype):
    """Values of d: zeros, one, and the dtype's extremes and special values."""
    if dtype == torch.bool:
        return [True, False]
    if dtype.is_floating_point or dtype.is_complex:
        info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
        values = [0.0, 1.0, -info.max, info.tiny * info.eps, math.inf, math.nan]
        return values + ([1 - 2j] if dtype.is_complex else [])
    info = torch.iinfo(dtype)
    return [0, 1, info.max, info.min]


def family(func):
    return inspect.unwrap(ScalarTensor._handlers[func]).__module__


def name_of(func):
    return torch.overrides.resolve_name(func) or repr(func)


def method_name(func):
    """func's name as an attribute of torch.Tensor (__pow__ is a function named pow), or
    None for a function that is not one."""
    name = (torch.overrides.resolve_name(func) or "").removeprefix("torch.Tensor.")
    return name if getattr(torch.Tensor, name, None) is func else None


def is_method(func):
    return method_name(func) is not None


def python_operator(func):
    """(operator, reflected) for a Tensor operator form (__mul__, __rsub__), else None."""
    name = method_name(func) or ""
    if not (name.startswith("__") and name != "__neg__"):
        return None
    reflected = name.startswith("__r") and hasattr(operator, f"__{name[3:]}")
    op = getattr(operator, f"__{name[3:]}" if reflected else name, None)
    return None if op is None else (op, reflected)


def call(func, operands):
    """func on operands (tensor first): an operator form as the Python operator (x * s,
    and s - x for __rsub__), a method of torch.Tensor called as one (x.mul(s)); a
    ScalarTensor, not being a torch.Tensor, answers both through its table."""
    as_operator = python_operator(func)
    if as_operator is not None:
        op, reflected = as_operator
        return op(*operands[::-1]) if reflected else op(*operands)
    if is_method(func):
        x, *rest = operands
        return getattr(x, method_name(func))(*rest)
    return func(*operands)


def forms_with_a_number():
    """(name, func, order) for every form of a pair handler that takes a number beside the
    tensor: order "xs" (tensor first; methods and operators, reflected ones included) or
    "sx" (number first, for functions), where the dense call takes such a number."""
    samples = [torch.ones(2, 2), torch.ones(2, 2, dtype=torch.int64)]
    forms = []
    for func in ScalarTensor._handlers:
        if family(func) not in PAIR_FAMILIES or any(i == 0 for _, i in flags_of(func)):
            continue  # (F.relu(x, 2): the number would be the inplace flag)
        for order in ("xs",) if is_method(func) else ("xs", "sx"):
            for sample in samples:
                for number in (2.5, 2):
                    operands = (sample, number) if order == "xs" else (number, sample)
                    _, error = outcome(call, func, operands)
                    if error is not TypeError:
                        break
                else:
                    continue
                forms.append((f"{name_of(func)}[{order}]", func, order))
                break
    return forms


FORMS = forms_with_a_number()


def test_the_forms_cover_every_kind_of_binary_call():
    names = {name for name, _, _ in FORMS}
    for name in ("torch.mul[sx]", "torch.Tensor.__rmul__[xs]", "torch.Tensor.__rsub__[xs]"):
        assert name in names
    assert "torch.remainder[sx]" in names and "torch.Tensor.__mod__[xs]" in names
    assert len(FORMS) > 100


def same_outcome(got, got_error, want, want_error, where):
    """The dense call's error (a subclass of it), or its exact values."""
    if want_error is not None:
        assert got_error is not None and issubclass(got_error, want_error), (
            where,
            want_error,
            got_error,
        )
    else:
        assert got_error is None, (where, got_error)
        same_exactly(got, want, where)


def check_against_dense(func, order, d, dense, number, where):
    want, want_error = outcome(call, func, (dense, number) if order == "xs" else (number, dense))
    got, got_error = outcome(call, func, (d, number) if order == "xs" else (number, d))
    same_outcome(got, got_error, want, want_error, where)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # (complex to real casts, dense too)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_numbers_at_the_edges_of_each_dtype_on_either_side(dtype):
    """Function forms over every value and number; method and operator forms, which reach
    the same handlers, over the numbers at the edges of the dtype and the zeros and ones."""
    cases = 0
    for value in values_for(dtype):
        d = ScalarTensor(3, value, dtype=dtype)
        dense = d.tensor()
        for name, func, order in FORMS:
            if is_method(func):
                if value not in (0, 1) or math.copysign(1, value.real) < 0:
                    continue
                numbers = range_numbers(dtype) + [-0.0, math.inf, math.nan]
            else:
                numbers = numbers_for(dtype)
            for number in numbers:
                where = f"{name}: ScalarTensor(3, {value!r}, {dtype}) and {number!r}"
                check_against_dense(func, order, d, dense, number, where)
                cases += 1
    assert cases > 1000


#: Sizes whose dense diagonal lies in torch's scalar loop (N² under two vector widths),
#: its vector loop, or both.
LOOP_SIZES = [1, 2, 3, 4, 5, 8, 17, 64]
LOOP_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
LOOP_DTYPES += [torch.int32]


def loop_values(dtype):
    """Values whose results the two loops may compute differently: ordinary ones, large
    ones (a large value over a small number overflows), the edges of the range."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return [-5, torch.iinfo(dtype).max]
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    return [-2.5, 2 * math.sqrt(info.max), info.tiny]


def loop_numbers(dtype):
    if not (dtype.is_floating_point or dtype.is_complex):
        return [3, -2]
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    return [-2.5, 1 / math.sqrt(info.max)]


def pair_functions():
    """(func, kind) for every function whose handler computes on the pair (method and
    operator forms reach the same handlers), with each way it is called: "alone", with a
    "number", with a second ScalarTensor ("tensor") where the dense call takes it."""
    samples = [torch.ones(2, 2), torch.ones(2, 2, dtype=torch.int64)]
    found = []
    for func in ScalarTensor._handlers:
        if family(func) not in PAIR_FAMILIES or is_method(func):
            continue
        for kind, further in (("alone", ()), ("number", (2.5,)), ("tensor", (samples[0],))):
            if kind != "alone" and any(i == 0 for _, i in flags_of(func)):
                continue  # (F.relu(x, 2): the number would be the inplace flag)
            if any(outcome(func, s, *further)[1] is not TypeError for s in samples):
                found.append((func, kind))
    return found


PAIR_FUNCTIONS = pair_functions()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # (complex to real casts, dense too)
@pytest.mark.parametrize("dtype", LOOP_DTYPES, ids=str)
def test_pair_handlers_at_sizes_that_split_the_dense_loops(dtype):
    cases = 0
    for func, kind in PAIR_FUNCTIONS:
        for value in loop_values(dtype):
            for n in LOOP_SIZES:
                d = ScalarTensor(n, value, dtype=dtype)
                dense = d.tensor()
                if kind == "alone":
                    further = [()]
                elif kind == "number":
                    further = [(x,) for x in loop_numbers(dtype)]
                else:
                    further = [(ScalarTensor(n, x, dtype=dtype),) for x in loop_numbers(dtype)]
                for rest in further:
                    where = f"{name_of(func)}(ScalarTensor({n}, {value!r}, {dtype}), {rest})"
                    want, want_error = outcome(func, dense, *map(dense_of, rest))
                    got, got_error = outcome(func, d, *rest)
                    cases += 1
                    same_outcome(got, got_error, want, want_error, where)
    assert cases > 1000
