"""ScalarTensor's calls that change it (tensortools/types/scalar/in_place.py): in-place
methods, operators and out= change it as they change the dense matrix when the result is
value * I again, and raise CannotHoldResult, changing nothing, when it is not."""

import json
import warnings

import pytest
import torch
from _support.scalar_cases import forbid_dense as _no_dense
from _support.scalar_structured import VALUES, in_place_forms, outcome, structured_calls
from _support.script_runs import run_script

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
    # (then, declined, the out-of-place form is asked whether it has a structured answer)
    assert calls[0] is out and all(c is None for c in calls[1:])
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


# -- every in-place and out= form of every structured call -------------------------------

_FORMS = in_place_forms(structured_calls())


def _is_value_eye(t, n):
    if t.shape != (n, n):
        return False
    off = t.clone()
    off.diagonal().zero_()
    same = t.diagonal() == t.diagonal()[:1]
    same |= t.diagonal().isnan() & t.diagonal()[:1].isnan()
    return int(off.count_nonzero()) == 0 and bool(same.all())


@pytest.mark.parametrize("n", [1, 3])
def test_every_in_place_form_of_a_structured_call_changes_it_as_the_dense_matrix(n, monkeypatch):
    """Each form on a ScalarTensor against the same form on its dense matrix: the same
    error type, or the dense result value * I held by the written ScalarTensor (and the
    call returns it), or CannotHoldResult with nothing changed; and no form builds the
    ScalarTensor's dense matrix."""
    failures = []
    dense_of = ScalarTensor.tensor
    for form in _FORMS:
        d = ScalarTensor(n, VALUES[form.case.dtype], dtype=form.case.dtype)
        before = d.tensor()
        dense = d.tensor()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want, dense_written = form.run(dense, n)
                dense_error = None
            except Exception as e:
                dense_error = type(e)
            with monkeypatch.context() as patch:
                _no_dense(patch)
                try:
                    got, written = form.run(d, n)
                    error = None
                except Exception as e:
                    error = e
        if isinstance(error, AssertionError):
            failures.append(f"{form.label} N={n}: built the dense matrix")
            continue
        where = f"{form.label} N={n}"
        if dense_error is not None:
            if not isinstance(error, dense_error):
                failures.append(f"{where}: dense raised {dense_error.__name__}, got {error!r}")
        elif not _is_value_eye(dense_written, n) or want is not dense_written:
            if not isinstance(error, CannotHoldResult) or not torch.equal(dense_of(d), before):
                failures.append(f"{where}: the dense result is not value * I, got {error!r}")
        elif error is not None:
            failures.append(f"{where}: raised {error!r}")
        elif got is not written:
            failures.append(f"{where}: returned {type(got).__name__}, not the written tensor")
        else:
            have = dense_of(written)
            try:
                assert have.dtype == dense_written.dtype
                torch.testing.assert_close(have, dense_written, equal_nan=True)
            except AssertionError as e:
                failures.append(f"{where}: {e}")
    assert len(_FORMS) > 800 and not failures, "\n".join(failures[:40])


def test_every_in_place_form_is_structured_for_a_huge_n_under_both_policies():
    """The forms at N = 10**12 in a subprocess whose address space is capped 1 GiB above
    what it holds once loaded: each ends as at N = 3 (checked against the dense matrix
    above), under "fallback" and under "strict" alike."""
    lines = run_script("scalar_in_place_huge.py", timeout=600)
    small = {form.label: outcome(form, 3) for form in _FORMS}
    seen, failures = 0, []
    for line in lines:
        label, policy, got = json.loads(line)
        seen += 1
        if got != small[label]:
            failures.append(f"{label} [{policy}]: N=10**12 {got}, N=3 {small[label]}")
    assert seen == 2 * len(_FORMS) and not failures, "\n".join(failures[:40])
