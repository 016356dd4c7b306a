"""tensortools.testing's ``func`` check: grad and vmap of a function of one instance
against the plain tensor's. The types that are right pass it; a type that is right
eagerly (values, autograd) but branches on a tensor's value fails it, naming the
transform; ScalarTensor passes with its instance captured."""

import pytest
import torch
from test_testing_kit import QUICK, TYPES, make_metadata, metadata_rule

from tensortools import MetadataTensor, ScalarTensor, testing
from tensortools.types.metadata import metadata_of


def _report(spec, make=None, **options):
    options.setdefault("checks", ["func"])
    return testing.check_type(spec, make, raise_on_failure=False, progress=False, **options)


def test_func_is_one_of_the_checks():
    assert "func" in testing.CHECKS


@pytest.mark.parametrize("name", ["MetadataTensor", "LoggingTensor"])
def test_the_wrapper_types_pass(name):
    # torch.func unwraps a subclass: over an instance the results are plain tensors (as
    # metadata-tensor.md says), which the check accepts beside the type's own rule.
    spec, _ = TYPES[name]
    # (the type's refusals, not its rule)
    report = _report(testing.TypeSpec(spec.cls, make=spec.make, refusals=spec.refusals), ops=QUICK)
    assert report.passed, report.summary()
    assert len(report.functions) == len(QUICK)


class BranchyExp(MetadataTensor):
    """Right eagerly and under autograd, but its exp branches on the input's values,
    which vmap's batched tensors do not have."""


@BranchyExp.implements(torch.exp)
def _branchy_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        if bool(input.isfinite().all()):
            out = torch.exp(input)
        else:
            out = torch.exp(torch.nan_to_num(input, nan=float("nan")))
    return BranchyExp(out, metadata_of(input))


def test_a_type_that_branches_on_values_fails_under_vmap_only():
    make = make_metadata(BranchyExp)
    eager = _report(
        testing.TypeSpec(BranchyExp, make=make, rule=metadata_rule),
        ops=["exp"],
        checks=["values", "types", "autograd"],
    )
    assert eager.passed, eager.summary()
    report = _report(BranchyExp, make, ops=["exp", "sin"])
    assert {(f.check, f.function) for f in report.failures} == {("func", "exp")}
    (failure,) = report.failures
    assert failure.reason.startswith("vmap with the instance captured: raised RuntimeError")
    assert "data-dependent control flow" in failure.reason


class DetachedSin(MetadataTensor):
    """A sin whose result leaves the graph: grad through it is zero."""


@DetachedSin.implements(torch.sin)
def _detached_sin(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.sin(input.detach())
    return DetachedSin(out, metadata_of(input))


def test_a_gradient_lost_in_a_handler_fails_grad_with_the_instance_captured():
    report = _report(DetachedSin, make_metadata(DetachedSin), ops=["sin", "exp"])
    reasons = [f.reason for f in report.failures if (f.check, f.function) == ("func", "sin")]
    assert reasons and all(r.startswith("grad with the instance captured: values") for r in reasons)
    assert {f.function for f in report.failures} == {"sin"}


def _scalar_make(t):
    if t.dim() == 2 and t.shape[0] == t.shape[1]:
        return ScalarTensor(t.shape[0], 1.5, dtype=t.dtype)
    return None


SCALAR = testing.TypeSpec(ScalarTensor, make=_scalar_make, densify=ScalarTensor.tensor)


def test_scalar_tensor_runs_the_captured_forms_only():
    # A tensor-like, not a torch.Tensor: torch.func refuses it as a transform's input,
    # so only the forms that capture it run; grad through them is right.
    report = _report(SCALAR, ops=["abs", "sin"])
    assert report.functions == ["abs", "sin"]
    assert report.passed, report.summary()


CAPTURED = ["mul", "div", "add", "sub", "matmul", "mm", "abs", "sin", "sum", "trace"]


def test_scalar_tensor_under_vmap_with_a_batched_factor():
    # Its handlers hand torch.func's wrapped tensors to the dense call (its mul read a
    # batched factor's storage, its matmul branched on a batched tensor's values);
    # tests/test_scalar_func.py sweeps the transforms.
    d = ScalarTensor(3, 1.5)
    ys = torch.tensor([1.0, 0.5])
    torch.testing.assert_close(torch.func.vmap(lambda y: d * y)(ys), d.tensor() * ys[:, None, None])
    y = torch.randn(2, 3, 3)
    torch.testing.assert_close(torch.func.vmap(lambda m: torch.matmul(d, m))(y), 1.5 * y)
    report = _report(SCALAR, ops=CAPTURED)
    assert report.passed, report.summary()
    assert sorted(report.functions) == sorted(CAPTURED)


class Mapped(torch.Tensor):
    """A type whose rule is about identity (as tensordict's memory-mapped tensors): a
    result of the type must hold the memory of an instance of the call. `contiguous` of a
    contiguous instance returns it, which holds it."""


def _holds_an_instance(x, result, func=None, args=(), kwargs=None):
    held = {t.untyped_storage().data_ptr() for t in [x, *args] if isinstance(t, Mapped)}
    for t in [result] if isinstance(result, torch.Tensor) else list(result):
        if isinstance(t, Mapped) and t.untyped_storage().data_ptr() not in held:
            return "a Mapped result that holds no instance's memory"
    return ""


def test_the_rule_judges_a_transforms_results_against_the_instance_it_took():
    # vmap over the instance takes a stacked instance, not the sample's: its results are
    # judged against that one (judged against the sample's, a correct type failed)
    report = _report(
        testing.TypeSpec(Mapped, make=lambda t: t.as_subclass(Mapped), rule=_holds_an_instance),
        ops=["contiguous", "positive"],
    )
    assert report.passed, report.summary()
