"""ScalarTensor's calls that change it (tensortools/types/scalar/in_place.py): in-place
methods, operators and out= change it as they change the dense matrix when the result is
value * I again, and raise CannotHoldResult, changing nothing, when it is not."""

import pytest
import torch
from _support.scalar_cases import forbid_dense as _no_dense

from tensortools import ScalarTensor
from tensortools.dispatch import CannotHoldResult


def test_in_place_on_a_huge_scalar_tensor_stays_structured(monkeypatch):
    d = ScalarTensor(10**12, 1.5)
    _no_dense(monkeypatch)
    d.mul_(2)
    d += ScalarTensor(10**12, 1.0)
    d.neg_().clamp_(min=-3.5)
    assert d.value == -3.5 and d.N == 10**12
    with pytest.raises(CannotHoldResult, match="not value \\* I"):
        d.add_(1)  # 1 off the diagonal
    with pytest.raises(CannotHoldResult, match="not value \\* I"):
        d.exp_()  # exp(0) = 1 off the diagonal
    assert d.value == -3.5


def test_in_place_changes_views_as_the_dense_matrix_does():
    d = ScalarTensor(3, 2.0)
    t, data = d.t(), d.data
    d.mul_(3)
    assert t.value == 6.0 and data.value == 6.0  # transposes and .data share d's values
    e = ScalarTensor(3, 2.0)
    f = e * 1  # a new ScalarTensor, not a view
    e.zero_()
    assert f.value == 2.0 and e.value == 0.0


def test_out_writes_into_a_scalar_tensor():
    d, e = ScalarTensor(2, 1.5), ScalarTensor(2, 2.0)
    out = ScalarTensor(2, 0.0)
    assert torch.add(d, e, out=out) is out and out.value == 3.5
    assert torch.mul(d, e, out=d) is d and d.value == 3.0
    with pytest.raises(CannotHoldResult):
        torch.exp(e, out=out)
    assert out.value == 3.5
    int_out = ScalarTensor(2, 0, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="can't be cast"):  # as torch refuses for dense
        torch.add(d, e, out=int_out)
    dense_out = torch.empty(2, 2)
    assert torch.add(d, e, out=dense_out) is dense_out
    torch.testing.assert_close(dense_out, d.tensor() + e.tensor())


def test_subclass_handlers_receive_out():
    calls = []

    class Tracked(ScalarTensor):
        pass

    @Tracked.implements(torch.add)
    def add(input, other, *, alpha=1, out=None):
        calls.append(out)
        return NotImplemented

    a, b, out = Tracked(2, 1.0), Tracked(2, 2.0), torch.empty(2, 2)
    torch.add(a, b, out=out)
    assert calls == [out]
    torch.testing.assert_close(out, a.tensor() + b.tensor())


def test_a_refused_out_changes_none_of_the_outputs():
    a, b = ScalarTensor(2, 5.0), ScalarTensor(2, 0, dtype=torch.int64)
    with pytest.raises(CannotHoldResult):
        torch.sort(torch.zeros(2, 2), out=(a, b))  # b cannot hold the indices
    assert a.value == 5.0 and b.value == 0


@pytest.mark.parametrize(
    "change,value",
    [
        (lambda d: torch.nn.init.eye_(d), 1.0),
        (lambda d: torch.nn.init.zeros_(tensor=d), 0.0),
        (lambda d: torch.ops.aten.mul_.Scalar(d, 0.25), 0.5),
        (lambda d: torch._foreach_mul_([d], 0.25), 0.5),
        (lambda d: torch.nn.functional.hardtanh(d, -1.0, 0.5, True), 0.5),
    ],
    ids=["init positional", "init keyword", "aten overload", "foreach", "functional flag"],
)
def test_in_place_calls_of_every_form_change_the_scalar_tensor(change, value):
    d = ScalarTensor(3, 2.0)
    dense = d.tensor()
    change(d)
    change(dense)
    assert torch.equal(d.tensor(), dense) and d.value == value
    with pytest.raises(CannotHoldResult):
        torch.nn.init.constant_(d, 0.5)  # 0.5 everywhere: not value * I
    assert d.value == value


def test_the_sign_of_zero_off_the_diagonal_follows_the_dense_matrix():
    d = ScalarTensor(2, 1.0)
    for got, want in ((-0.0 * d, -0.0 * d.tensor()), (d * -1, d.tensor() * -1)):
        assert torch.equal(torch.signbit(got.tensor()), torch.signbit(want))
    e = ScalarTensor(2, 1.0)
    e.mul_(-0.0)
    assert torch.equal(torch.signbit(e.tensor()), torch.signbit(-0.0 * d.tensor()))
