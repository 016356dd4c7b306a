"""ScalarTensor's structured handlers against the same maths on the dense N×N matrix."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from tensortools.bench.timing import Row, interleaved, ratio_notes, time_call, time_ratio

__all__ = [
    "SCALAR_SIZES",
    "ELEMENTWISE_ROWS",
    "REDUCTION_ROWS",
    "LINALG_ROWS",
    "OPERATOR_SIZES",
    "OPERATOR_STATE",
    "scalar_rows",
    "operator_rows",
    "format_scalar_table",
]

SCALAR_SIZES = (256, 1024, 2048)
STRUCTURED = "ScalarTensor (structured)"
DENSE = "dense matrix"
DENSE_FORMED = "dense, eye * value formed per call"
#: Elementwise calls of the derived table (tensortools.types.scalar.elementwise):
#: transcendental, cheap, an activation and a comparison.
ELEMENTWISE_ROWS = {
    "sin(d)": torch.sin,
    "tanh(d)": torch.tanh,
    "abs(d)": torch.abs,
    "relu(d)": torch.relu,
    "d > 0": lambda t: t > 0,
}
#: Reductions (tensortools.types.scalar.reductions and closed_forms): a whole-matrix sum
#: and Frobenius norm (cheap passes on the dense matrix), a reduction along a dim, and a
#: variance.
REDUCTION_ROWS = {
    "sum(d)": torch.sum,
    "norm(d)": torch.linalg.norm,
    "amax(d, 0)": lambda t: torch.amax(t, 0),
    "var(d)": torch.var,
}
#: Linear algebra (tensortools.types.scalar.linalg); solve(d, x) is timed beside d @ x.
LINALG_ROWS = {
    "det(d)": torch.det,
    "slogdet(d)": torch.linalg.slogdet,
    "matrix_exp(d)": torch.matrix_exp,
    "eigvals(d)": torch.linalg.eigvals,
    "svdvals(d)": torch.linalg.svdvals,
}


def scalar_rows(
    sizes: Iterable[int] = SCALAR_SIZES,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Time ``d @ x``, ``x + d``, ``d @ d``, ``torch.inverse(d)``, ``linalg.solve(d, x)``
    and the calls of :data:`ELEMENTWISE_ROWS`, :data:`REDUCTION_ROWS` and
    :data:`LINALG_ROWS` for d a ScalarTensor (N, 0.999) and x a dense N×N matrix, against
    the dense ``D = 0.999 * eye(N)``: given ready, and (for ``d @ x``, where forming it is
    part of the dense recipe) formed in the call. (0.999 keeps det finite up to N = 80000
    in float32.) Rows have size ``(N,)`` and the operation as their phase."""
    from tensortools import ScalarTensor

    value = 0.999
    rows = []
    for n in sizes:
        g = {"dtype": dtype, "device": device}
        d = ScalarTensor(n, value, **g)
        dense = d.tensor()
        x = torch.randn(n, n, **g)
        cases = {
            ("d @ x", STRUCTURED): lambda: d @ x,
            ("d @ x", DENSE): lambda: dense @ x,
            ("d @ x", DENSE_FORMED): lambda: (torch.eye(n, **g) * value) @ x,
            ("x + d", STRUCTURED): lambda: x + d,
            ("x + d", DENSE): lambda: x + dense,
            ("d @ d", STRUCTURED): lambda: d @ d,
            ("d @ d", DENSE): lambda: dense @ dense,
            ("inverse(d)", STRUCTURED): lambda: torch.inverse(d),
            ("inverse(d)", DENSE): lambda: torch.inverse(dense),
            ("solve(d, x)", STRUCTURED): lambda: torch.linalg.solve(d, x),
            ("solve(d, x)", DENSE): lambda: torch.linalg.solve(dense, x),
        }
        for name, fn in {**ELEMENTWISE_ROWS, **REDUCTION_ROWS, **LINALG_ROWS}.items():
            cases[name, STRUCTURED] = lambda fn=fn: fn(d)
            cases[name, DENSE] = lambda fn=fn: fn(dense)
        measures = {key: lambda fn=fn: time_call(fn, min_run_time) for key, fn in cases.items()}
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"ScalarTensor N={n} {key[0]} {key[1]}"
        )
        for (op, variant), p in pooled.items():
            rows.append(Row.of((n,), str(dtype).removeprefix("torch."), device, variant, op, p))
    return rows


#: The sizes of :func:`operator_rows`: the N of tensortools.ops' performance goals.
OPERATOR_SIZES = (256, 4096)
#: The LLTM's state size S (and graph_conv's features) in :func:`operator_rows`.
OPERATOR_STATE = 16


def operator_rows(
    sizes: Iterable[int] = OPERATOR_SIZES,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Time tensortools.ops with a ScalarTensor d = (N, 0.5) (its structured handlers,
    tensortools.types.scalar.operators) against the same operator on the dense
    ``D = 0.5 * eye(N)``: ``lltm`` with d as the input (a batch of N one-hot rows, state
    size :data:`OPERATOR_STATE`), ``graph_conv`` with d as the adjacency (x N×16, weight
    16×16, a bias), ``axpby`` of d and d and of d and a dense N×N y, ``scale`` and
    ``add_diagonal`` of d. Forward calls, no gradient. Rows as :func:`scalar_rows`'."""
    from tensortools import ScalarTensor, ops
    from tensortools.types.scalar import operators  # noqa: F401  (the handlers)

    rows, s = [], OPERATOR_STATE
    for n in sizes:
        g = {"dtype": dtype, "device": device}
        d = ScalarTensor(n, 0.5, **g)
        dense = d.tensor()
        w, b = torch.randn(3 * s, s + n, **g), torch.randn(3 * s, **g)
        h, c = torch.randn(n, s, **g), torch.randn(n, s, **g)
        x, weight, y = torch.randn(n, s, **g), torch.randn(s, s, **g), torch.randn(n, n, **g)
        calls = {
            "lltm(d, ...)": lambda m: ops.lltm(m, w, b, h, c),
            "graph_conv(d, ...)": lambda m: ops.graph_conv(m, x, weight, b[:s]),
            "axpby(d, d)": lambda m: ops.axpby(m, m, 2.0, -1.0),
            "axpby(d, y)": lambda m: ops.axpby(m, y, 2.0, -1.0),
            "scale(d)": lambda m: ops.scale(m, 2.0),
            "add_diagonal(d)": lambda m: ops.add_diagonal(m, 1.0),
        }
        cases = {}
        for name, fn in calls.items():
            cases[name, STRUCTURED] = lambda fn=fn: fn(d)
            cases[name, DENSE] = lambda fn=fn: fn(dense)
        measures = {key: lambda fn=fn: time_call(fn, min_run_time) for key, fn in cases.items()}
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"ScalarTensor N={n} {key[0]} {key[1]}"
        )
        for (op, variant), p in pooled.items():
            rows.append(Row.of((n,), str(dtype).removeprefix("torch."), device, variant, op, p))
    return rows


def format_scalar_table(rows: list[Row]) -> str:
    """A text table of scalar_rows: each variant's time ratio to the dense matrix given
    ready (the structured handler's is far below 1)."""
    dense = {(r.size, r.phase): r for r in rows if r.variant == DENSE}
    lines = [
        f"{'N':>6} {'operation':<18} {'variant':<36} {'median':>12} {'IQR':>11} {'time ratio':>10}"
    ]
    any_noisy = False
    for r in rows:
        b = dense.get((r.size, r.phase))
        noisy = r.noisy or (b is not None and b.noisy)
        any_noisy |= noisy
        lines.append(
            f"{r.size[0]:>6} {r.phase:<18} {r.variant:<36} {r.median_us:>10.1f}us "
            f"{r.iqr_us:>9.1f}us {time_ratio(r.median_us, b.median_us if b else None, noisy):>10}"
        )
    lines.append(ratio_notes(f"the {DENSE} in the same operation and N", any_noisy))
    return "\n".join(lines)
