"""Property-based fuzzing of every operator in tensortools.ops.

Each case draws shapes (0-size and 1 included), dtypes (integer, bool and complex
included), memory layouts (transposed, strided, expanded, offset), values (NaN, ±Inf,
huge, tiny, subnormal) and sometimes breaks one argument (a wrong size, rank or dtype).
A case must either match the reference maths or raise a TypeError, ValueError or
RuntimeError whose message names an argument; a supported case must not raise, and a
broken one must not return. Every case is then run again on the meta device (the meta
kernels), which must give the same shapes, dtypes and strides or raise as well.

``HYPOTHESIS_PROFILE=explore`` draws many more cases than CI does.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from _support.fuzz_tensors import ALL_DTYPES, Kind, kinds, numbers
from conftest import DEVICES
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tensortools import ops, reference

pytestmark = pytest.mark.slow  # fuzzing

ERRORS = (TypeError, ValueError, RuntimeError)
FLOATS = (torch.float32, torch.float64)
# Cases per operator: 400 in CI, more under a profile that asks for more.
CASES = max(400, settings().max_examples)


ALL_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _supported(device: str) -> tuple[torch.dtype, ...]:
    if device == "cuda":
        return ALL_FLOATS
    return (torch.float32, torch.float64)


def _tolerance(dtype: torch.dtype) -> dict:
    return {
        torch.float64: dict(rtol=1e-7, atol=1e-9),
        torch.float32: dict(rtol=1e-4, atol=1e-4),
    }.get(dtype, dict(rtol=2e-2, atol=2e-2))


def _attempt(call):
    try:
        return call(), None
    except ERRORS as err:
        return None, err


def _assert_names_an_argument(err: Exception, names) -> None:
    message = str(err)
    assert any(f"'{name}'" in message for name in names), (
        f"{type(err).__name__} names none of {list(names)}: {message}"
    )


def _assert_close(got, want, dtype, special=False, **tolerance):
    """got has dtype and want's shapes and values.

    With special values (Inf, huge and tiny in one computation) two things change: the
    absolute tolerance grows with the largest finite reference value (small results keep
    only the precision of the largest terms of their sums), and where the reference is
    NaN the maths is undefined (Inf - Inf, 0 * Inf, met or not depending on the order of
    operations), so the operator's value there is not compared."""
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape, (g.dtype, g.shape, w.shape)
        g, tol = g.to(w.dtype), dict(tolerance or _tolerance(dtype))
        if special:
            defined = ~torch.isnan(w)
            g, w = g[defined], w[defined]
            finite = w[torch.isfinite(w)]
            if finite.numel():
                tol["atol"] = max(tol["atol"], tol["rtol"] * finite.abs().max().item())
        torch.testing.assert_close(g, w, equal_nan=True, **tol)


def _layout(t: torch.Tensor) -> tuple:
    """Shape, dtype and the strides of the dimensions longer than 1 (the others' strides
    address nothing)."""
    return (tuple(t.shape), t.dtype, tuple(s for n, s in zip(t.shape, t.stride()) if n > 1))


def _same_on_meta(call_on, names, cpu_result, cpu_error, half):
    """The call on meta tensors (the meta kernels) agrees with the CPU call. (A meta
    kernel cannot tell CPU from CUDA, so it takes the half types CUDA computes in.)"""
    result, error = _attempt(lambda: call_on("meta"))
    if half and cpu_error is not None and error is None:
        return
    if cpu_error is not None:
        assert error is not None, "the fake kernel accepted what the CPU kernel refused"
        _assert_names_an_argument(error, names)
        return
    assert error is None, f"the fake kernel refused what the CPU kernel accepted: {error}"
    got = result if isinstance(result, (tuple, list)) else [result]
    want = cpu_result if isinstance(cpu_result, (tuple, list)) else [cpu_result]
    assert [_layout(t) for t in got] == [_layout(t) for t in want]


def _check(device, names, call_on, expect_ok, compare, dtype):
    """The fuzz contract for one case. call_on(device) runs the op on fresh arguments;
    compare(result) checks a result against the reference; dtype is the case's."""
    event("supported case" if expect_ok else "refused case")
    result, error = _attempt(lambda: call_on(device))
    if expect_ok:
        assert error is None, f"a supported case raised {type(error).__name__}: {error}"
        compare(result)
    else:
        assert error is not None, "an unsupported or broken case returned a result"
        _assert_names_an_argument(error, names)
    if device == "cpu":
        _same_on_meta(call_on, names, result, error, half=dtype in (torch.float16, torch.bfloat16))


def _breakage():
    return st.sampled_from([None, None, None, "size", "rank", "dtype"])


def _break(draw, how, shapes: dict, kinds_: dict) -> None:
    """Change one argument of a case in place: its size, rank or dtype. (A changed size
    can still fit, e.g. when it is tied only to an absent argument: tests check shapes
    themselves.)"""
    victim = draw(st.sampled_from(sorted(n for n in shapes if shapes[n] is not None)))
    shape = shapes[victim]
    if how == "size" and shape:
        shape[draw(st.integers(0, len(shape) - 1))] += draw(st.integers(1, 2))
    elif how == "rank" or how == "size":
        if shape and draw(st.booleans()):
            shape.pop()
        else:
            shape.append(1)
    else:
        other = draw(st.sampled_from([d for d in ALL_DTYPES if d != kinds_[victim].dtype]))
        kinds_[victim] = dataclasses.replace(kinds_[victim], dtype=other)


def _kinds_for(names, kind: Kind) -> dict:
    """One kind per argument: same dtype, layout and values, different seeds."""
    return {n: dataclasses.replace(kind, seed=kind.seed + i) for i, n in enumerate(names)}


def _reference_dtypes(dtype: torch.dtype, special: bool) -> list[torch.dtype]:
    """Where to compute the reference maths: in float64; with special values also in the
    case's own dtype, which overflows and makes NaN at the same places as the operator
    (and float64 sometimes does not). The operator may match either."""
    return [torch.float64, dtype] if special and dtype != torch.float64 else [torch.float64]


def _assert_matches_one(result, wants, dtype, special=False, **tolerance):
    """result is close to one of the reference answers in wants (scaled to their
    largest value when the case holds special values)."""
    failures = []
    for want in wants:
        try:
            return _assert_close(result, want, dtype, special, **tolerance)
        except AssertionError as err:
            failures.append(err)
    raise failures[-1]


# --- lltm ---------------------------------------------------------------------------------

LLTM_NAMES = ("input", "weights", "bias", "old_h", "old_cell")


@st.composite
def lltm_cases(draw):
    b, f, s = draw(st.integers(0, 4)), draw(st.integers(0, 5)), draw(st.integers(1, 5))
    shapes = {
        "input": [b, f],
        "weights": [3 * s, s + f],
        "bias": [3 * s],
        "old_h": [b, s],
        "old_cell": [b, s],
    }
    kinds_ = _kinds_for(LLTM_NAMES, draw(kinds(prefer=FLOATS)))
    broken = draw(_breakage())
    if broken:
        _break(draw, broken, shapes, kinds_)
    return shapes, kinds_, broken


def _lltm_loss(outputs, seed):
    g = torch.Generator().manual_seed(seed)
    return sum(
        (o * torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device)).sum() for o in outputs
    )


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(case=lltm_cases())
def test_lltm(device, case):
    shapes, kinds_, broken = case
    kind = kinds_["input"]
    b, f = shapes["input"] if len(shapes["input"]) == 2 else (-1, -1)
    s = shapes["old_h"][-1]
    consistent = shapes == {
        "input": [b, f],
        "weights": [3 * s, s + f],
        "bias": [3 * s],
        "old_h": [b, s],
        "old_cell": [b, s],
    }
    # The LLTM's kernels take every floating dtype on every device.
    expect_ok = broken != "dtype" and consistent and kind.dtype in ALL_FLOATS

    def call_on(dev):
        return ops.lltm(*(kinds_[n].make(*shapes[n], device=dev) for n in LLTM_NAMES))

    def compare(result):
        args = [kinds_[n].make(*shapes[n], device=device) for n in LLTM_NAMES]
        _assert_matches_one(
            result,
            [
                reference.lltm(*(a.to(r) for a in args))
                for r in _reference_dtypes(kind.dtype, kind.special)
            ],
            kind.dtype,
            kind.special,
        )
        if kind.special or kind.dtype != torch.float64:
            return
        # gradients of every input, through the registered backward
        leaves = [a.detach().requires_grad_() for a in args]
        grads = torch.autograd.grad(_lltm_loss(ops.lltm(*leaves), 1), leaves)
        want = torch.autograd.grad(_lltm_loss(reference.lltm(*leaves), 1), leaves)
        _assert_close(list(grads), list(want), kind.dtype)

    _check(device, LLTM_NAMES, call_on, expect_ok, compare, kind.dtype)


# --- add_diagonal and scale -------------------------------------------------------------

# The dtypes the two ScalarTensor kernels compute in, on every device.
STRUCTURED_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
)

values = st.one_of(
    numbers,
    st.builds(lambda kind: kind.make(), kinds()),  # a 0-d tensor of any dtype
    st.builds(lambda kind, n: kind.make(n), kinds(), st.integers(0, 2)),
)  # not 0-d


def _value_in(value, dtype):
    """value as the operators document it: converted to the input's dtype as
    torch.tensor(value, dtype=dtype) converts it; None where that conversion is refused
    (complex into real, NaN or Inf or out of range into an integer dtype; not 0-d) or the
    dtype is not one the kernels compute in."""
    if dtype not in STRUCTURED_DTYPES:
        return None
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype.is_complex:
            return None
        if dtype.is_floating_point or not value.dtype.is_floating_point:
            return value.to(dtype)
        value = value.item()
    if isinstance(value, complex):
        return None
    try:
        return torch.tensor(value, dtype=dtype)
    except (RuntimeError, ValueError, OverflowError):
        return None


@st.composite
def square_cases(draw):
    n = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 3), max_size=2)) + [n, n]
    if draw(st.integers(0, 5)) == 0:  # not square, or not a matrix
        shape = draw(st.sampled_from([shape[:-1], shape[:-1] + [n + 1], []]))
    return shape, draw(kinds()), draw(values)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(case=square_cases())
def test_add_diagonal(device, case):
    shape, kind, value = case
    v = _value_in(value, kind.dtype)
    square = len(shape) >= 2 and shape[-1] == shape[-2]
    expect_ok = square and kind.dtype in STRUCTURED_DTYPES and v is not None

    def compare(result):
        want = kind.make(*shape, device=device).clone()
        want.diagonal(dim1=-2, dim2=-1).add_(v.to(device))
        _assert_close(result, want, kind.dtype, rtol=0, atol=0)
        assert result.is_contiguous()

    _check(
        device,
        ("input", "value"),
        lambda dev: ops.add_diagonal(kind.make(*shape, device=dev), value),
        expect_ok,
        compare,
        kind.dtype,
    )


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(shape=st.lists(st.integers(0, 4), max_size=3), kind=kinds(), value=values)
def test_scale(device, shape, kind, value):
    v = _value_in(value, kind.dtype)
    expect_ok = kind.dtype in STRUCTURED_DTYPES and v is not None

    def compare(result):
        want = torch.mul(kind.make(*shape, device=device), v.to(device))
        _assert_close(result, want, kind.dtype, rtol=0, atol=0)

    _check(
        device,
        ("input", "value"),
        lambda dev: ops.scale(kind.make(*shape, device=dev), value),
        expect_ok,
        compare,
        kind.dtype,
    )


# --- axpby ---------------------------------------------------------------------------------

scalars = st.one_of(numbers, st.builds(lambda kind: kind.make(), kinds()))


@st.composite
def axpby_cases(draw):
    x_shape = draw(st.lists(st.integers(0, 3), max_size=3))
    # y: a broadcastable relative of x (fewer leading dims, some sizes 1), or anything
    y_shape = [
        1 if draw(st.booleans()) else n for n in x_shape[draw(st.integers(0, len(x_shape))) :]
    ]
    if draw(st.integers(0, 4)) == 0:
        y_shape = draw(st.lists(st.integers(0, 3), max_size=3))
    kinds_ = _kinds_for(("x", "y"), draw(kinds(prefer=FLOATS)))
    if draw(st.integers(0, 5)) == 0:
        kinds_["y"] = draw(kinds())
    return x_shape, y_shape, kinds_, draw(scalars), draw(scalars)


def _real_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(case=axpby_cases())
def test_axpby(device, case):
    x_shape, y_shape, kinds_, alpha, beta = case
    kx, ky = kinds_["x"], kinds_["y"]
    try:
        torch.broadcast_shapes(x_shape, y_shape)
        broadcastable = True
    except RuntimeError:
        broadcastable = False
    expect_ok = (
        broadcastable
        and kx.dtype == ky.dtype
        and kx.dtype in _supported(device)
        and _real_number(alpha)
        and _real_number(beta)
    )

    def compare(result):
        x, y = kx.make(*x_shape, device=device), ky.make(*y_shape, device=device)
        special = any(
            isinstance(s, float) and not (math.isfinite(s) and abs(s) < 1e30) for s in (alpha, beta)
        )
        special = kx.special or ky.special or special
        wants = [
            reference.axpby(x.to(r), y.to(r), float(alpha), float(beta))
            for r in _reference_dtypes(kx.dtype, special)
        ]
        _assert_matches_one(result, wants, kx.dtype, special)

    _check(
        device,
        ("x", "y", "alpha", "beta"),
        lambda dev: ops.axpby(
            kx.make(*x_shape, device=dev), ky.make(*y_shape, device=dev), alpha, beta
        ),
        expect_ok,
        compare,
        kx.dtype,
    )


# --- graph_conv ----------------------------------------------------------------------------

GRAPH_NAMES = ("adj", "x", "weight", "bias")


@st.composite
def graph_cases(draw):
    n, f_in, f_out = draw(st.integers(0, 4)), draw(st.integers(0, 3)), draw(st.integers(0, 3))
    shapes = {
        "adj": [n, n],
        "x": [n, f_in],
        "weight": [f_in, f_out],
        "bias": [f_out] if draw(st.booleans()) else None,
    }
    kinds_ = _kinds_for(GRAPH_NAMES, draw(kinds(prefer=FLOATS)))
    broken = draw(_breakage())
    if broken:
        _break(draw, broken, shapes, kinds_)
    return shapes, kinds_, draw(st.sampled_from(["dense", "coo", "csr"])), broken


def _adjacency(kind: Kind, shape, layout, device):
    adj = kind.make(*shape, device=device)
    if layout == "dense" or device == "meta" or adj.dim() != 2:
        return adj
    adj = adj * (torch.arange(adj.numel(), device=device).view(adj.shape) % 3 != 0)
    return adj.to_sparse() if layout == "coo" else adj.to_sparse_csr()


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(case=graph_cases())
def test_graph_conv(device, case):
    shapes, kinds_, layout, broken = case
    kind = kinds_["x"]
    n, f_in = shapes["x"] if len(shapes["x"]) == 2 else (-1, -1)
    f_out = shapes["weight"][-1]
    consistent = (
        shapes["adj"] == [n, n]
        and shapes["weight"] == [f_in, f_out]
        and shapes["bias"] in (None, [f_out])
    )
    expect_ok = (
        broken != "dtype"
        and consistent
        and kind.dtype in _supported(device)
        and not (layout != "dense" and kind.dtype in (torch.float16, torch.bfloat16))
    )

    def args_on(dev):
        return (
            _adjacency(kinds_["adj"], shapes["adj"], layout, dev),
            *(
                None if shapes[n] is None else kinds_[n].make(*shapes[n], device=dev)
                for n in GRAPH_NAMES[1:]
            ),
        )

    def compare(result):
        adj, x, weight, bias = args_on(device)
        # Either order of the two products is the maths; with NaN and Inf they differ
        # (0 * Inf), and the operator may take either.
        wants = []
        for r in _reference_dtypes(kind.dtype, kind.special):
            adj_r, x_r, w_r = adj.to(r), x.to(r), weight.to(r)
            for out in ((adj_r @ x_r) @ w_r, adj_r @ (x_r @ w_r)):
                wants.append(out if bias is None else out + bias.to(r))
        _assert_matches_one(result, wants, kind.dtype, kind.special)
        if kind.special or kind.dtype != torch.float64:
            return
        x_l, w_l = x.detach().requires_grad_(), weight.detach().requires_grad_()
        b_l = None if bias is None else bias.detach().requires_grad_()
        leaves = [t for t in (x_l, w_l, b_l) if t is not None]
        grad = torch.randn_like(result)
        got = torch.autograd.grad(ops.graph_conv(adj, x_l, w_l, b_l), leaves, grad)
        want = torch.autograd.grad(reference.graph_conv(adj, x_l, w_l, b_l), leaves, grad)
        _assert_close(list(got), list(want), kind.dtype)

    _check(
        device,
        GRAPH_NAMES,
        lambda dev: ops.graph_conv(*args_on(dev)),
        expect_ok,
        compare,
        kind.dtype,
    )


# --- fused_conv_bn2d -----------------------------------------------------------------------

CONV_BN_NAMES = (
    "input",
    "weight",
    "running_mean",
    "running_var",
    "gamma",
    "beta",
    "stride",
    "padding",
    "momentum",
    "eps",
)


@st.composite
def conv_bn_cases(draw):
    n, c_in, c_out = draw(st.integers(0, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w, k = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    per_channel = {
        name: [c_out] if draw(st.booleans()) else None
        for name in ("running_mean", "running_var", "gamma", "beta")
    }
    if draw(st.integers(0, 3)):  # both running statistics or neither, mostly
        per_channel["running_var"] = per_channel["running_mean"]
    shapes = {"input": [n, c_in, h, w], "weight": [c_out, c_in, k, k], **per_channel}
    kinds_ = _kinds_for(shapes, draw(kinds(prefer=FLOATS)))
    broken = draw(_breakage())
    if broken:
        _break(draw, broken, shapes, kinds_)
    good = draw(st.integers(0, 3)) > 0  # mostly valid options, sometimes hostile ones
    options = dict(
        stride=draw(st.sampled_from([1, 2, (1, 2)] if good else [0, -1, (1,), 1.5, 2**40])),
        padding=draw(st.sampled_from([0, 1, (0, 1)] if good else [-1, (1, 2, 3), 2**62])),
        training=draw(st.booleans()),
        momentum=draw(st.sampled_from([0.1, 0.0, 1.0] if good else [True, "0.1", None])),
        eps=draw(st.sampled_from([1e-5, 1e-3, 0.1] if good else ["1e-5", -1.0, math.nan])),
    )
    options["good"] = good
    return shapes, kinds_, broken, options


def _conv_bn_reference(input, weight, stats, gamma, beta, options):
    """What fused_conv_bn2d must return and leave in the running statistics, or None
    where the unfused maths refuses the case."""
    try:
        out = reference.fused_conv_bn2d(input, weight, *stats, gamma, beta, **options)
    except Exception:  # torch refuses some cases with an IndexError
        return None
    return out, stats


def _folded_conv_bn(args, options, rounded_to=None):
    """Evaluation's maths as the operator folds it; with rounded_to, the folded weight and
    bias are rounded to that dtype (and the rest computed in the arguments' own)."""
    scale = torch.rsqrt(args["running_var"] + options["eps"])
    if args["gamma"] is not None:
        scale = scale * args["gamma"]
    bias = -args["running_mean"] * scale
    if args["beta"] is not None:
        bias = bias + args["beta"]
    weight = args["weight"] * scale.reshape(-1, 1, 1, 1)
    if rounded_to is not None:
        weight, bias = (t.to(rounded_to).to(t.dtype) for t in (weight, bias))
    return torch.nn.functional.conv2d(
        args["input"],
        weight,
        bias,
        options["stride"],
        options["padding"],
    )


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=CASES)
@given(case=conv_bn_cases())
def test_fused_conv_bn2d(device, case):
    shapes, kinds_, broken, options = case
    good_options = options.pop("good")
    kind = kinds_["input"]

    def args_on(dev, dtype=None):
        made = {
            n: None if shapes[n] is None else kinds_[n].make(*shapes[n], device=dev) for n in shapes
        }
        if dtype is not None:
            made = {
                n: t.to(dtype) if t is not None and t.is_floating_point() else t
                for n, t in made.items()
            }
        if made["running_var"] is not None and made["running_var"].is_floating_point():
            # a variance is not negative
            made["running_var"] = made["running_var"].abs()
        return made

    # Evaluation needs running statistics (also for an empty batch, which
    # torch.nn.functional.batch_norm lets through), and they come in pairs.
    stats_given = {shapes["running_mean"] is None, shapes["running_var"] is None}
    valid_options = (
        good_options
        and stats_given != {True, False}
        and (options["training"] or shapes["running_mean"] is not None)
    )
    wants = []  # (output, running statistics) per reference dtype that computes the case
    if valid_options and kind.dtype in _supported(device):
        for r in _reference_dtypes(kind.dtype, kind.special):
            ref_args = args_on(device, r)
            stats = [
                None if ref_args[n] is None else ref_args[n].clone()
                for n in ("running_mean", "running_var")
            ]
            want = _conv_bn_reference(
                ref_args["input"],
                ref_args["weight"],
                stats,
                ref_args["gamma"],
                ref_args["beta"],
                options,
            )
            if want is not None:
                wants.append(want)
    # sizes the reference need not refuse (it broadcasts some)
    c_out = shapes["weight"][0]
    consistent = (
        len(shapes["input"]) == len(shapes["weight"]) == 4
        and shapes["weight"][1] == shapes["input"][1]
        and all(shapes[n] in (None, [c_out]) for n in CONV_BN_NAMES[2:6])
    )
    # running statistics are updated in place: an expanded one is refused
    expanded_stats = (
        options["training"]
        and shapes["running_mean"] is not None
        and kinds_["running_mean"].layout == "expanded"
        and c_out > 1
    )
    expect_ok = (
        broken != "dtype" and consistent and valid_options and bool(wants) and not expanded_stats
    )
    if expect_ok and kind.special and not options["training"]:
        # Evaluation folds the statistics into the weight (documented): a subnormal
        # weight times a small scale underflows to 0 there, and 0 * Inf is NaN.
        args = args_on(device)
        wants.append((_folded_conv_bn(args, options), [args["running_mean"], args["running_var"]]))
    if expect_ok and not options["training"] and kind.dtype in (torch.float16, torch.bfloat16):
        # In float16/bfloat16 the folded weight and bias are rounded to the dtype (once:
        # the fold is computed in float), so an output whose terms cancel is accurate to
        # the terms' size, not its own (seen on CUDA: 0.055 off at -0.38 among outputs ~12).
        args = args_on(device, torch.float64)
        stats = [args["running_mean"], args["running_var"]]
        wants.append((_folded_conv_bn(args, options, rounded_to=kind.dtype), stats))
    state = {}

    def call_on(dev):
        made = args_on(dev)
        state[dev] = made
        return ops.fused_conv_bn2d(
            made["input"],
            made["weight"],
            made["running_mean"],
            made["running_var"],
            made["gamma"],
            made["beta"],
            **options,
        )

    def compare(result):
        made = state[device]
        got = [result] + [made[n] for n in ("running_mean", "running_var") if made[n] is not None]
        if kind.special:
            # A statistic of huge and tiny values is accurate to the huge ones only, which
            # an element-wise comparison of the statistic cannot see: outputs only.
            got = got[:1]
        tolerance = dict(rtol=1e-3, atol=1e-3) if kind.dtype == torch.float32 else {}
        # each tensor (output, new running statistics) matches one of the references
        for i, tensor in enumerate(got):
            _assert_matches_one(
                tensor,
                [([out] + [s for s in stats if s is not None])[i] for out, stats in wants],
                kind.dtype,
                kind.special,
                **tolerance,
            )

    _check(device, CONV_BN_NAMES, call_on, expect_ok, compare, kind.dtype)
