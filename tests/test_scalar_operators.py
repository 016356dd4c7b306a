"""ScalarTensor through tensortools.ops (tensortools.types.scalar.operators): each
operator with ScalarTensor arguments in each position it takes, against the plain
reference maths on the dense matrices in float64, forward and backward, under torch.func
and torch.compile; the handlers never form the N×N matrix where the result does not need
it (ScalarTensor.tensor is made to raise), up to N = 10**5."""

import itertools
import math

import pytest
import torch

import tensortools.types.scalar.operators  # noqa: F401  (registers the handlers)
from tensortools import ScalarTensor, ops, reference

F64 = torch.float64


@pytest.fixture
def no_dense(monkeypatch):
    """Forming a ScalarTensor's dense matrix fails the test (the fallback forms it)."""

    def formed(self):
        raise AssertionError(f"the dense matrix of {self!r} was formed")

    monkeypatch.setattr(ScalarTensor, "tensor", formed)


@pytest.fixture
def formed(monkeypatch):
    """How many times a ScalarTensor's dense matrix was formed (``formed[0]``)."""
    count, tensor = [0], ScalarTensor.tensor

    def counted(self):
        count[0] += 1
        return tensor(self)

    monkeypatch.setattr(ScalarTensor, "tensor", counted)
    return count


def dense_of(x):
    """The dense matrix of a ScalarTensor, made here (not by its ``tensor()``)."""
    if not isinstance(x, ScalarTensor):
        return x
    return torch.diag_embed(torch.full((x.N,), x.value, dtype=x.dtype))


def leaves(*tensors):
    return [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]


def check_against_reference(op, ref, args, *, grads=True):
    """op(*args) and its gradients wrt every dense argument that requires grad, against
    ref on the dense matrices (values as given: the reference gets the same leaves)."""
    dense = [dense_of(a) for a in args]
    got, want = op(*args), ref(*dense)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(dense_of(g), w, equal_nan=True)
    inputs = leaves(*args)
    if grads and inputs:
        weights = [torch.randn(w.shape, dtype=w.dtype) for w in want]
        loss = lambda outs: sum((dense_of(o) * w).sum() for o, w in zip(outs, weights))  # noqa: E731
        g_got = torch.autograd.grad(loss(got), inputs)
        g_want = torch.autograd.grad(loss(want), inputs)
        for a, b in zip(g_got, g_want):
            torch.testing.assert_close(a, b)


def rand(*shape, grad=True):
    return torch.randn(shape, dtype=F64, requires_grad=grad)


# -- lltm ---------------------------------------------------------------------------------

LLTM_CASES = [(n, s) for n in (0, 1, 2, 7, 40) for s in (1, 2, 7)]  # (N, S)


@pytest.mark.parametrize("n, s", LLTM_CASES)
@pytest.mark.parametrize("value", [0.7, -2.5, 0.0])
def test_lltm_scalar_input(n, s, value, formed):
    d = ScalarTensor(n, value, dtype=F64)
    args = (d, rand(3 * s, s + n), rand(3 * s), rand(n, s), rand(n, s))
    check_against_reference(ops.lltm, reference.lltm, args)
    assert formed[0] == 0


@pytest.mark.parametrize("n", [1, 3, 6])
@pytest.mark.parametrize("where", ["old_h", "old_cell", "both", "all"])
def test_lltm_scalar_state(n, where):
    # B = S = N (and F = N for a ScalarTensor input too)
    d = lambda v: ScalarTensor(n, v, dtype=F64)  # noqa: E731
    old_h = d(0.3) if where in ("old_h", "both", "all") else rand(n, n)
    old_cell = d(-1.5) if where in ("old_cell", "both", "all") else rand(n, n)
    input = d(2.0) if where == "all" else rand(n, 5)
    f = n if where == "all" else 5
    args = (input, rand(3 * n, n + f), rand(3 * n), old_h, old_cell)
    check_against_reference(ops.lltm, reference.lltm, args)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_lltm_scalar_input_layouts_and_dtypes(layout, dtype, no_dense):
    # weights and states of every layout, in each dtype, against the float64 reference
    from _support.op_samples import HALF_TOLERANCE, laid_out

    n, s = 9, 2
    w, b, h, c = rand(3 * s, s + n), rand(3 * s), rand(n, s), rand(n, s)
    args = [laid_out(t, layout).to(dtype).requires_grad_() for t in (w, b, h, c)]
    got = ops.lltm(ScalarTensor(n, -0.75, dtype=dtype), *args)
    exact = [a.detach().double().requires_grad_() for a in args]
    want = reference.lltm(-0.75 * torch.eye(n, dtype=F64), *exact)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    tol = tol or {"rtol": HALF_TOLERANCE[dtype] * 4, "atol": HALF_TOLERANCE[dtype] * 4}
    for g, e in zip(got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), e, **tol)
    grads = torch.autograd.grad(sum(o.double().sum() for o in got), args)
    grads_want = torch.autograd.grad(sum(o.sum() for o in want), exact)
    for g, e in zip(grads, grads_want):
        torch.testing.assert_close(g.double(), e, **tol)


def test_lltm_scalar_input_with_a_users_type():
    # MetadataTensor weights: the gates and results are MetadataTensors with its metadata
    from tensortools import MetadataTensor

    n, s = 6, 2
    w = MetadataTensor(rand(3 * s, s + n, grad=False), metadata={"layer": 3})
    b, h, c = rand(3 * s, grad=False), rand(n, s, grad=False), rand(n, s, grad=False)
    new_h, new_c = ops.lltm(ScalarTensor(n, 0.5, dtype=F64), w, b, h, c)
    want = reference.lltm(0.5 * torch.eye(n, dtype=F64), w.as_subclass(torch.Tensor), b, h, c)
    for g, e in zip((new_h, new_c), want):
        assert isinstance(g, MetadataTensor) and g.metadata["layer"] == 3
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e)


def test_lltm_module_and_no_dense(no_dense):
    torch.manual_seed(0)
    cell = __import__("tensortools").nn.LLTM(64, 4).double()
    h, c = rand(64, 4), rand(64, 4)
    got = cell(ScalarTensor(64, 0.5, dtype=F64), (h, c))
    want = reference.lltm(0.5 * torch.eye(64, dtype=F64), cell.weights, cell.bias, h, c)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("row, col", [(0, 0), (5, 3), (11, 29)])
def test_lltm_non_finite_weights(bad, row, col):
    # the dense product meets 0 * W elsewhere in the row: NaN as there
    n, s = 30, 4
    w = rand(3 * s, s + n, grad=False)
    w[row, s + col] = bad
    args = (ScalarTensor(n, 1.5, dtype=F64), w, rand(3 * s), rand(n, s), rand(n, s))
    check_against_reference(ops.lltm, reference.lltm, args, grads=False)


# -- graph_conv ---------------------------------------------------------------------------

GC_POSITIONS = [p for k in (1, 2, 3) for p in itertools.combinations(("adj", "x", "weight"), k)]


@pytest.mark.parametrize("scalars", GC_POSITIONS)
@pytest.mark.parametrize("f_in, f_out", [(3, 5), (5, 3), (4, 4)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_graph_conv_positions(scalars, f_in, f_out, with_bias, formed):
    n = 6
    if "x" in scalars:
        f_in = n  # x is N×F_in
    if "weight" in scalars:
        f_out = f_in  # weight is F_in×F_out
    adj = ScalarTensor(n, 0.5, dtype=F64) if "adj" in scalars else rand(n, n)
    x = ScalarTensor(n, -1.25, dtype=F64) if "x" in scalars else rand(n, f_in)
    weight = ScalarTensor(f_in, 3.0, dtype=F64) if "weight" in scalars else rand(f_in, f_out)
    bias = rand(f_out) if with_bias else None
    check_against_reference(ops.graph_conv, reference.graph_conv, (adj, x, weight, bias))
    assert formed[0] == (len(scalars) == 3)  # (then the result is value * I, N×N)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
@pytest.mark.parametrize("f_in, f_out", [(2, 3), (3, 2)])
def test_graph_conv_non_finite(bad, f_in, f_out):
    n = 5
    x = rand(n, f_in, grad=False)
    x[2, 1] = bad
    args = (ScalarTensor(n, 2.0, dtype=F64), x, rand(f_in, f_out, grad=False), None)
    check_against_reference(ops.graph_conv, reference.graph_conv, args, grads=False)


# -- axpby, scale, add_diagonal -----------------------------------------------------------

AXPBY_SHAPES = [(5, 5), (3, 5, 5), (5,), (1, 5), (5, 1), ()]


@pytest.mark.parametrize("shape", AXPBY_SHAPES)
@pytest.mark.parametrize("alpha, beta", [(2.0, 3.0), (-0.5, 0.0), (0.0, 1.0), (math.inf, 1.0)])
@pytest.mark.parametrize("scalar_first", [True, False])
def test_axpby_scalar_and_dense(shape, alpha, beta, scalar_first, formed):
    d, t = ScalarTensor(5, 1.75, dtype=F64), rand(*shape)
    args = (d, t, alpha, beta) if scalar_first else (t, d, alpha, beta)
    # (an infinite alpha: the operator's backward sums inf * grad where the reference
    # sums grad first, on plain tensors too; its forward is checked)
    grads = math.isfinite(alpha)
    check_against_reference(ops.axpby, reference.axpby, args, grads=grads)
    assert formed[0] == (not math.isfinite(alpha))  # inf * 0 off the diagonal: dense


@pytest.mark.parametrize("alpha, beta", [(2.0, 3.0), (-1.0, 1.0), (0.0, 0.0), (math.nan, 1.0)])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_axpby_both_scalar(alpha, beta, n):
    x, y = ScalarTensor(n, 0.5, dtype=F64), ScalarTensor(n, -3.0, dtype=F64)
    got = ops.axpby(x, y, alpha, beta)
    torch.testing.assert_close(
        dense_of(got), reference.axpby(dense_of(x), dense_of(y), alpha, beta), equal_nan=True
    )
    assert isinstance(got, ScalarTensor) == math.isfinite(alpha)


@pytest.mark.parametrize("op", [ops.scale, ops.add_diagonal])
@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.int64])
@pytest.mark.parametrize("value", [2, -0.5, 0, math.inf, math.nan, torch.tensor(1.5)])
def test_scale_and_add_diagonal(op, dtype, value):
    if dtype == torch.int64 and not isinstance(value, int):
        value = 3
    d = ScalarTensor(4, 1.25 if dtype.is_floating_point else 2, dtype=dtype)
    got, want = op(d, value), op(dense_of(d), value)
    torch.testing.assert_close(dense_of(got), want, equal_nan=True)
    off_diagonal_nan = op is ops.scale and isinstance(value, float) and not math.isfinite(value)
    assert isinstance(got, ScalarTensor) != off_diagonal_nan


def test_bad_numbers_raise_as_dense():
    d = ScalarTensor(3, 1.0, dtype=F64)
    with pytest.raises(TypeError, match="'alpha'"):
        ops.axpby(d, d, "2", 1.0)
    with pytest.raises(TypeError, match="'value'"):
        ops.scale(d, "2")


# -- torch.func and torch.compile -----------------------------------------------------------


def test_vmap_and_grad(formed):
    n, s = 12, 2
    d = ScalarTensor(n, 0.5, dtype=F64)
    dense = dense_of(d)
    w, b = rand(3 * s, s + n, grad=False), rand(3 * s, grad=False)
    hs, c = rand(4, n, s, grad=False), rand(n, s, grad=False)
    got = torch.func.vmap(lambda h: ops.lltm(d, w, b, h, c)[0])(hs)
    want = torch.stack([reference.lltm(dense, w, b, h, c)[0] for h in hs])
    torch.testing.assert_close(got, want)
    loss = lambda w, inp: ops.lltm(inp, w, b, hs[0], c)[1].sum()  # noqa: E731
    torch.testing.assert_close(torch.func.grad(loss)(w, d), torch.func.grad(loss)(w, dense))
    xs, weight = rand(3, n, 4, grad=False), rand(4, 2, grad=False)
    got = torch.func.vmap(lambda x: ops.graph_conv(d, x, weight, b[:2]))(xs)
    torch.testing.assert_close(got, torch.stack([dense @ x @ weight + b[:2] for x in xs]))
    ys = rand(3, n, n, grad=False)
    got = torch.func.vmap(lambda y: ops.axpby(d, y, 2.0, -1.0))(ys)
    torch.testing.assert_close(got, 2.0 * dense - ys)
    square = lambda y, m: ops.axpby(m, y, 2.0, -1.0).pow(2).sum()  # noqa: E731
    got = torch.func.grad(square)(ys[0], d)
    torch.testing.assert_close(got, torch.func.grad(square)(ys[0], dense))
    assert formed[0] == 0


def _tangent_forms():
    """(name, f(m, *dense), shapes of the dense arguments) for m a ScalarTensor (N = 4)
    or its dense matrix: the calls whose handlers run tensortools' kernels."""
    lltm = lambda m, w, b, h, c: ops.lltm(m, w, b, h, c)  # noqa: E731
    return [
        ("d @ x", lambda m, x: m @ x, [(4, 3)]),
        ("x @ d", lambda m, x: x @ m, [(3, 4)]),
        ("x + d", lambda m, x: x + m, [(4, 4)]),
        ("d - x", lambda m, x: m - x, [(2, 4, 4)]),
        ("axpby(d, x)", lambda m, x: ops.axpby(m, x, 2.0, -1.0), [(4, 4)]),
        ("axpby(x, d)", lambda m, x: ops.axpby(x, m, 0.5, 3.0), [(4, 4)]),
        ("graph_conv", lambda m, x, w, b: ops.graph_conv(m, x, w, b), [(4, 2), (2, 3), (3,)]),
        ("graph_conv F_in > F_out", lambda m, x, w: ops.graph_conv(m, x, w), [(4, 3), (3, 2)]),
        ("lltm", lltm, [(6, 6), (6,), (4, 2), (4, 2)]),
    ]


@pytest.mark.parametrize("name, f, shapes", _tangent_forms(), ids=lambda x: x)
def test_forward_mode_tangents_as_on_the_dense_matrix(name, f, shapes):
    # every dense argument dual in turn, then all: the tangents of the dense call (the
    # one-pass kernels' calls skipped autograd and dropped them)
    import torch.autograd.forward_ad as fwAD

    d = ScalarTensor(4, 1.5, dtype=F64)
    args = [rand(*s, grad=False) for s in shapes]
    for duals in [*({i} for i in range(len(args))), set(range(len(args)))]:
        tangents = [
            torch.randn_like(a) if i in duals else torch.zeros_like(a) for i, a in enumerate(args)
        ]
        with fwAD.dual_level():
            dual = [
                fwAD.make_dual(a, t) if i in duals else a
                for i, (a, t) in enumerate(zip(args, tangents))
            ]
            out = f(d, *dual)
            got = [fwAD.unpack_dual(o).tangent for o in (out if isinstance(out, tuple) else (out,))]
        _, want = torch.func.jvp(lambda *a: f(dense_of(d), *a), tuple(args), tuple(tangents))
        for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
            assert g is not None, (name, duals)
            torch.testing.assert_close(g, w)


def test_compile_eager(formed):
    n, s = 12, 2
    d = ScalarTensor(n, 0.5, dtype=F64)
    w, b, h, c = rand(3 * s, s + n), rand(3 * s), rand(n, s), rand(n, s)
    x, weight = rand(n, 3), rand(3, 2)

    def f(w, b, h, c, x, weight):
        new_h, new_c = ops.lltm(d, w, b, h, c)
        return new_h.sum() + new_c.sum() + ops.graph_conv(d, x, weight, None).sum()

    compiled = torch.compile(f, backend="eager", fullgraph=False)
    args = (w, b, h, c, x, weight)
    got, want = compiled(*args), f(*args)
    torch.testing.assert_close(got, want)
    for a, e in zip(torch.autograd.grad(got, args), torch.autograd.grad(want, args)):
        torch.testing.assert_close(a, e)
    dense = dense_of(d)
    new_h, new_c = reference.lltm(dense, w, b, h, c)
    torch.testing.assert_close(got, new_h.sum() + new_c.sum() + (dense @ x @ weight).sum())
    assert formed[0] == 0


# -- N = 10**5: the dense matrix (40 GB in float32) is never formed -----------------------------


def test_huge_n(no_dense):
    n = 10**5
    d = ScalarTensor(n, 0.5)
    s = 2
    w, b = torch.randn(3 * s, s + n, requires_grad=True), torch.randn(3 * s)
    h, c = torch.randn(n, s), torch.randn(n, s)
    new_h, new_c = ops.lltm(d, w, b, h, c)
    new_h.sum().backward()
    rows = torch.tensor([0, 7, n - 1])
    eye_rows = torch.zeros(3, n).scatter_(1, rows[:, None], 0.5)
    want_h, _ = reference.lltm(eye_rows, w.detach(), b, h[rows], c[rows])
    torch.testing.assert_close(new_h[rows], want_h)
    assert w.grad.shape == w.shape
    x, weight = torch.randn(n, 3), torch.randn(3, 4)
    torch.testing.assert_close(ops.graph_conv(d, x, weight, None), 0.5 * (x @ weight))
    assert ops.axpby(d, d, 2.0, 1.0).value == 1.5
    assert ops.scale(d, 4.0).value == 2.0
    assert ops.add_diagonal(d, 1.0).value == 1.5


@pytest.mark.slow  # (about 6 s: the timer's own minimum per case)
def test_bench_operator_rows(formed):
    # each operator in both variants; the structured ones form no dense matrix (the one
    # formed is the dense variant's D)
    from tensortools.bench.scalar import DENSE, STRUCTURED, format_scalar_table, operator_rows

    rows = operator_rows((64,), min_run_time=0.01, rounds=1)
    phases = {r.phase for r in rows}
    assert {(r.phase, r.variant) for r in rows} == {
        (p, v) for p in phases for v in (STRUCTURED, DENSE)
    }
    assert len(phases) == 6 and formed[0] == 1
    text = format_scalar_table(rows)
    assert all(p in text for p in phases)


# -- the strict refusal ---------------------------------------------------------------------

STRICT_CASES = [(ops.lltm_sequence, i) for i in range(5)] + [(ops.lltm, 1), (ops.lltm, 2)]


@pytest.mark.parametrize("func, position", STRICT_CASES)
def test_strict_refusal_names_operator_and_argument(func, position):
    # an operator no handler answers, a ScalarTensor in one position, plain tensors in
    # the others: the refusal names the operator and that argument, not torch.Tensor
    import inspect

    args = [torch.randn(4, 4) for _ in range(5)]
    args[position] = ScalarTensor(4, 1.0)
    name = list(inspect.signature(func).parameters)[position]
    with ScalarTensor.using_policy("strict"), pytest.raises(TypeError) as info:
        func(*args)
    message = str(info.value)
    assert func.__name__ in message and f"'{name}'" in message
    assert "torch.Tensor" not in message and "strict" in message


# -- every argument vmapped; autocast; dtypes the dense call refuses --------------------------


@pytest.mark.parametrize("position", [1, 2, 3, 4])
@pytest.mark.parametrize("in_dim", [0, -1])
def test_lltm_vmap_over_each_argument(position, in_dim):
    n, s = 5, 2
    d = ScalarTensor(n, 0.7, dtype=F64)
    args = [d, rand(3 * s, s + n, grad=False), rand(3 * s, grad=False)]
    args += [rand(n, s, grad=False), rand(n, s, grad=False)]
    stacked = torch.stack([args[position], 2 * args[position], -args[position]], in_dim)

    def call(m, x):
        full = list(args)
        full[0], full[position] = m, x
        return ops.lltm(*full)

    got = torch.func.vmap(lambda x: call(d, x), in_dims=in_dim)(stacked)
    want = torch.func.vmap(lambda x: reference.lltm(*_with(args, position, x)), in_dims=in_dim)(
        stacked
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def _with(args, position, x):
    full = [dense_of(a) for a in args]
    full[position] = x
    return full


AUTOCAST_CALLS = {
    "lltm": lambda m, t: ops.lltm(m, t["w"], t["b"], t["h"], t["c"]),
    "graph_conv bias": lambda m, t: ops.graph_conv(m, t["x"], t["wide"], t["bias"]),
    "graph_conv F_in > F_out": lambda m, t: ops.graph_conv(m, t["x"], t["narrow"], t["b2"]),
    "graph_conv no bias": lambda m, t: ops.graph_conv(m, t["x"], t["wide"], None),
}


@pytest.mark.parametrize("call", list(AUTOCAST_CALLS))
def test_under_autocast_as_the_dense_call(call):
    # the dtype the dense call gives under torch.autocast (the LLTM's autocast kernel casts
    # every argument; graph_conv adds its bias as it is), and its values
    n, s = 6, 2
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(shape, generator=g)  # noqa: E731
    t = dict(w=r(3 * s, s + n), b=r(3 * s), h=r(n, s), c=r(n, s), x=r(n, 3))
    t.update(wide=r(3, 5), bias=r(5), narrow=r(3, 2), b2=r(2))
    d = ScalarTensor(n, 0.7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = AUTOCAST_CALLS[call](d, t), AUTOCAST_CALLS[call](d.tensor(), t)
    for a, b in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
    ):
        assert a.dtype == b.dtype, (call, a.dtype, b.dtype)
        torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_dtypes_the_dense_kernels_refuse_are_refused(dtype):
    # graph_conv and axpby take float32 and float64 on the CPU: a ScalarTensor call raises
    # the dense call's error (the handlers' other kernels would have answered)
    d, x = ScalarTensor(3, 2.0, dtype=dtype), torch.randn(3, 3, dtype=dtype)
    for call in [
        lambda m: ops.graph_conv(m, x, x, None),
        lambda m: ops.graph_conv(m, x, x, x[0]),
        lambda m: ops.axpby(m, x, 2.0, 1.0),
        lambda m: ops.axpby(x, m, 2.0, 1.0),
        lambda m: ops.axpby(m, m, 2.0, 1.0),
    ]:
        with pytest.raises(TypeError) as dense_error:
            call(d.tensor())
        with pytest.raises(TypeError) as error:
            call(d)
        assert str(error.value) == str(dense_error.value)


def test_scale_compiles_whole():
    # scale by a number the dtype holds finite needs no look at the values
    d = ScalarTensor(4, 1.5, dtype=F64)
    for value in (3, -0.5, True):
        f = torch.compile(lambda m: ops.scale(m, value), backend="eager", fullgraph=True)
        got = f(d)
        assert isinstance(got, ScalarTensor) and got.value == 1.5 * value
    torch._dynamo.reset()


@pytest.mark.parametrize("op", ["mul", "rmul", "torch.mul", "div"])
def test_arithmetic_with_a_dual_number_keeps_its_tangent(op):
    import torch.autograd.forward_ad as fwAD

    d = ScalarTensor(3, 1.5, dtype=F64)
    calls = {
        "mul": lambda m, v: m * v,
        "rmul": lambda m, v: v * m,
        "torch.mul": torch.mul,
        "div": lambda m, v: m / v,
    }
    v, t = torch.tensor(2.0, dtype=F64), torch.tensor(1.0, dtype=F64)
    with fwAD.dual_level():
        out = calls[op](d, fwAD.make_dual(v, t))
        got = fwAD.unpack_dual(dense_of(out) if isinstance(out, ScalarTensor) else out).tangent
    _, want = torch.func.jvp(lambda v: calls[op](dense_of(d), v), (v,), (t,))
    assert got is not None
    torch.testing.assert_close(got, want)
