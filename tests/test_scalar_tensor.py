"""ScalarTensor itself (tensortools/types/scalar/tensor.py): the documented examples, the
constructor, policies, copying and pickling. The kernels its handlers call are
tests/test_ops_scalar_ops.py. The
handler families have their own tests: test_scalar_arithmetic, _elementwise,
_reductions, _linalg, _queries, _in_place, and the compiled path test_scalar_fast_path."""

import math

import pytest
import torch

import tensortools
from tensortools import ScalarTensor

# --- the documented examples -------------------------------------------------------------


def test_documented_examples():
    d = ScalarTensor(2, 3.14)
    assert repr(d) == "ScalarTensor(N=2, value=3.14)"
    assert d.N == 2 and d.value == 3.14 and d.shape == (2, 2)
    assert d.dtype == torch.get_default_dtype() and d.device == torch.device("cpu")
    assert torch.mean(ScalarTensor(5, 2)).item() == pytest.approx(0.4)
    s = torch.add(d, d)
    assert isinstance(s, ScalarTensor) and s.N == 2
    torch.testing.assert_close(s.tensor(), d.tensor() + d.tensor(), rtol=0, atol=0)
    t = torch.randn(2, 2)
    torch.testing.assert_close(torch.add(d, t), d.tensor() + t, rtol=0, atol=0)
    with pytest.raises(ValueError, match="ScalarTensor sizes differ: N=2 and N=3"):
        torch.add(d, ScalarTensor(3, 1.0))
    torch.testing.assert_close(torch.mul(d, d).tensor(), torch.tensor([[9.8596, 0], [0, 9.8596]]))


def test_add_alpha_and_out():
    d, e = ScalarTensor(3, 1.5), ScalarTensor(3, -0.25)
    got = torch.add(d, e, alpha=2)
    torch.testing.assert_close(got.tensor(), torch.add(d.tensor(), e.tensor(), alpha=2))
    t = torch.randn(3, 3)
    torch.testing.assert_close(torch.add(t, d, alpha=-3), torch.add(t, d.tensor(), alpha=-3))
    out = torch.empty(3, 3)
    result = torch.add(d, e, out=out)
    assert result is out
    torch.testing.assert_close(out, d.tensor() + e.tensor())


def test_python_operators():
    d, t = ScalarTensor(3, 2.0), torch.randn(3, 4)
    sq = torch.randn(3, 3)
    cases = [
        (d + d, d.tensor() * 2),
        (d * 2, d.tensor() * 2),
        (d @ t, d.tensor() @ t),
        (-d, -d.tensor()),
        (sq + d, sq + d.tensor()),
        (d + sq, d.tensor() + sq),
        (2 * d, 2 * d.tensor()),
        (d - sq, d.tensor() - sq),
        (sq - d, sq - d.tensor()),
        (d / 4, d.tensor() / 4),
        (2 + d, 2 + d.tensor()),
        (d**2, d.tensor() ** 2),
        (t.T @ d, t.T @ d.tensor()),
        (d[1], d.tensor()[1]),
    ]
    for got, want in cases:
        got = got.tensor() if isinstance(got, ScalarTensor) else got
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert len(d) == 3


def test_missing_tensor_methods_reach_the_table_or_fallback():
    d = ScalarTensor(4, 1.25)
    assert d.sum().item() == 5.0  # handler
    torch.testing.assert_close(d.contiguous(), d.tensor())  # fallback
    torch.testing.assert_close(d.exp(), d.tensor().exp())
    torch.testing.assert_close(d.T.tensor(), d.tensor().T)  # handler: a ScalarTensor
    with pytest.raises(AttributeError, match="no attribute 'not_a_method'"):
        _ = d.not_a_method


def test_strict_policy():
    d = ScalarTensor(2, 3.14)
    with ScalarTensor.using_policy("strict"):
        with pytest.raises(TypeError, match=r"(?s)torch\.exp.*ScalarTensor"):
            torch.exp(d)
        with pytest.raises(TypeError, match="contiguous"):
            d.contiguous()
        assert isinstance(torch.add(d, d), ScalarTensor)  # handlers still answer
    torch.testing.assert_close(torch.exp(d), torch.exp(d.tensor()))


def test_constructor_validation():
    with pytest.raises(TypeError, match="'N' must be an int"):
        ScalarTensor(2.0, 1)
    with pytest.raises(ValueError, match="'N' must be non-negative"):
        ScalarTensor(-1, 1)
    with pytest.raises(TypeError, match="'value' must be a number"):
        ScalarTensor(2, "1")
    with pytest.raises(ValueError, match="one-element tensor"):
        ScalarTensor(2, torch.ones(2))
    with pytest.raises(ValueError, match="'value' must not require grad"):
        ScalarTensor(2, torch.tensor(2.0, requires_grad=True))
    assert ScalarTensor(2, torch.tensor(2.0, requires_grad=True).detach()).value == 2.0
    d = ScalarTensor(2, torch.tensor(3, dtype=torch.int32))
    assert d.dtype == torch.int32 and d.value == 3
    assert ScalarTensor(2, 1j).dtype.is_complex
    assert ScalarTensor(2, 2.7, dtype=torch.int64).value == 2


# --- the structured calls that use the kernels ---------------------------------------------


def test_matmul_with_large_non_finite_operand_is_dense_exact():
    # One pass over the operand finds the inf wherever it is; the dense product answers.
    d = ScalarTensor(300, 1.5)
    for where in [(0, 0), (150, 7), (299, 299)]:
        t = torch.randn(300, 300)
        t[where] = float("inf")
        torch.testing.assert_close(d @ t, d.tensor() @ t, equal_nan=True)
        torch.testing.assert_close(t @ d, t @ d.tensor(), equal_nan=True)


def test_structured_matmul_is_cheaper_than_dense_flops():
    # Not a timing: the structured path must not form the dense N×N matrix at all.
    d = ScalarTensor(512, 2.0)
    t = torch.randn(512, 8)
    with torch.profiler.profile() as prof:
        d @ t
    names = {e.name for e in prof.events()}
    assert "tensortools::scale_finite" in names
    # one pass over t: no separate finiteness test either
    assert not names & {
        "aten::mm",
        "aten::matmul",
        "aten::zeros",
        "aten::eye",
        "aten::isfinite",
        "aten::all",
    }
    assert math.isclose(float((d @ t)[3, 2]), 2.0 * float(t[3, 2]), rel_tol=0)


def test_library_exports():
    assert tensortools.ScalarTensor is ScalarTensor


def test_copy_and_pickle():
    import copy
    import pickle

    d = ScalarTensor(3, -2.5, dtype=torch.float64)
    for r in (copy.deepcopy(d), pickle.loads(pickle.dumps(d)), copy.copy(d)):
        assert isinstance(r, ScalarTensor) and repr(r) == repr(d) and r.dtype == d.dtype
        assert torch.equal(r.tensor(), d.tensor())
