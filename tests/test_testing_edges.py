"""tensortools.testing's ``edges`` check: for each edge condition a type that breaks it is
caught (inner tensors requiring grad, conjugate and negative bits, views that alias,
inference mode, random functions, a type that overrides nothing), and the three types
pass (ScalarTensor, whose views are copies, says so)."""

import dataclasses

import pytest
import torch
from test_testing_kit import TYPES, make_metadata
from torch.utils._pytree import tree_map, tree_map_only

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, testing
from tensortools.coverage.samples import op_db
from tensortools.dispatch import TensorLike
from tensortools.testing import edges
from tensortools.types.metadata import metadata_of


def _report(spec, make=None, **options):
    options.setdefault("checks", ["edges"])
    return testing.check_type(spec, make, raise_on_failure=False, progress=False, **options)


def _failures(report, label=""):
    """(function, reason) of the failures whose sample names `label`."""
    return {(f.function, f.reason) for f in report.failures if label in f.sample}


def test_edges_is_one_of_the_checks():
    assert "edges" in testing.CHECKS
    assert set(edges.EDGE_FUNCTIONS) <= {info.name for info in op_db()}


# --- (a) inner tensors requiring grad ----------------------------------------------------


class DetachesExp(MetadataTensor):
    """Its exp computes off the graph: right values, no gradient."""


@DetachesExp.implements(torch.exp)
def _detached_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input).detach()
    return DetachesExp(out, metadata_of(input))


def test_a_result_that_left_the_graph_is_caught():
    report = _report(DetachesExp, make_metadata(DetachesExp), ops=["exp", "sin"])
    assert _failures(report) == {("exp", "the result requires grad: False (plain's: True)")}
    assert "made of tensors requiring grad" in report.failures[0].sample


class Box(TensorLike):
    """A tensor-like holding a tensor, whose requires_grad says False whatever it holds
    (as a wrapper subclass made without its inner tensor's requires_grad)."""

    def __init__(self, t):
        self.t = t

    def tensor(self):
        return self.t

    @property
    def requires_grad(self):
        return False

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        args, kwargs = tree_map(lambda a: a.t if isinstance(a, Box) else a, (args, kwargs))
        return tree_map_only(torch.Tensor, Box, func(*args, **kwargs))


def test_an_instance_hiding_that_its_tensor_requires_grad_is_caught():
    report = _report(testing.TypeSpec(Box, make=Box, densify=Box.tensor), ops=["exp"])
    found = _failures(report, "requiring grad")
    assert found == {
        (
            "exp",
            "the instance does not require grad where the tensor it stands for (densify) "
            "does: gradients stop at it",
        )
    }


# --- (b) conjugate and negative bits -----------------------------------------------------


class ReadsStorage(MetadataTensor):
    """Its exp reads the input's storage as it lies in memory: a lazy conjugation or
    negation (a bit on the tensor, not in memory) is lost."""


@ReadsStorage.implements(torch.exp)
def _storage_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        input = input.detach()
        raw = torch.empty(0, dtype=input.dtype).set_(
            input.untyped_storage(), input.storage_offset(), input.shape, input.stride()
        )
        out = torch.exp(raw)
    return ReadsStorage(out, metadata_of(input))


def test_a_handler_losing_the_conjugate_and_negative_bits_is_caught():
    report = _report(ReadsStorage, make_metadata(ReadsStorage), ops=["exp", "sin"])
    complex_failures = [f for f in report.failures if "complex64" in f.sample]
    labels = {f.sample.split(", ")[-1] for f in complex_failures}
    assert labels == {
        "made of t.conj() (conjugate bit)",
        "made of torch._neg_view(t) (negative bit)",
        "on x.conj()",
    }
    assert {f.function for f in complex_failures} == {"exp"}
    assert all(f.reason.startswith("values differ") for f in complex_failures)
    # (real inputs have no bit to lose: the values check passes it)
    assert _report(ReadsStorage, make_metadata(ReadsStorage), ops=["exp"], checks=["values"]).passed


def test_a_type_without_complex_instances_declines_the_complex_samples():
    def real_only(t):
        if t.is_complex():
            raise testing.Unsupported("real tensors only")
        return MetadataTensor(t, {"unit": "m"})

    report = _report(MetadataTensor, real_only, ops=["exp"])
    assert report.passed
    assert any("conjugate bit" in d.sample for d in report.declined)


# --- (c) views that alias their base -----------------------------------------------------


class CopiesTranspose(MetadataTensor):
    """Its transpose returns a copy: right values, but writes no longer reach the base."""


@CopiesTranspose.implements(torch.transpose)
def _copied_transpose(input, dim0, dim1):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.transpose(input, dim0, dim1).clone()
    return CopiesTranspose(out, metadata_of(input))


def test_a_view_that_copies_is_caught_unless_the_type_says_its_views_copy():
    make = make_metadata(CopiesTranspose)
    report = _report(CopiesTranspose, make, ops=["exp"])
    found = _failures(report, "views")
    assert {name for name, _ in found} == {"x.transpose(0, 1)"}
    reasons = sorted(reason.split(" (")[0] for _, reason in found)
    assert reasons == [
        "a write into the base left the view unchanged",
        "a write through the view left the base unchanged",
    ]
    report = _report(testing.TypeSpec(CopiesTranspose, make=make, views_copy=True), ops=["exp"])
    assert report.passed and len(report.copies) == 2
    assert "1 view that copies (views_copy)" in report.summary()


# --- (d) inference mode -------------------------------------------------------------------


class LeavesInferenceMode(MetadataTensor):
    """Its exp copies its result outside inference mode: a normal tensor, where plain
    torch gives an inference tensor."""


@LeavesInferenceMode.implements(torch.exp)
def _normal_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input)
        with torch.inference_mode(False):
            out = out.clone()
    return LeavesInferenceMode(out, metadata_of(input))


def test_a_result_that_is_no_inference_tensor_is_caught():
    report = _report(LeavesInferenceMode, make_metadata(LeavesInferenceMode), ops=["exp", "sin"])
    assert _failures(report) == {
        ("exp", "the result is not an inference tensor (plain's is)"),
    }
    assert {f.sample.split(", ")[-1] for f in report.failures} == {
        "instances made outside it",
        "instances made inside it",
    }


# --- (e) random functions -----------------------------------------------------------------


class DrawsTwice(MetadataTensor):
    """Its rand_like draws once more after its result (the values are right, the
    generator is left elsewhere), and its bernoulli drops the generator it is given."""


@DrawsTwice.implements(torch.rand_like)
def _rand_like(input, **kwargs):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.rand_like(input, **kwargs)
        torch.rand(1)
    return DrawsTwice(out, metadata_of(input))


@DrawsTwice.implements(torch.bernoulli)
def _bernoulli(input, p=None, *, generator=None, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.bernoulli(input) if p is None else torch.bernoulli(input, p)
    return DrawsTwice(result, metadata_of(input))


def test_random_functions_that_draw_otherwise_are_caught():
    report = _report(DrawsTwice, make_metadata(DrawsTwice), ops=["exp"])
    found = _failures(report, "random")
    assert found == {
        ("torch.rand_like(x)", "the call drew from the generator otherwise than plain's"),
        ("torch.bernoulli(x, generator=g)", next(r for n, r in found if "generator=g" in n)),
    }
    assert next(r for n, r in found if "generator=g" in n).startswith("values differ")


# --- (f) a type that overrides nothing ----------------------------------------------------


class IgnoresOthers(torch.Tensor):
    """The common mistake: its __torch_function__ runs every call as a plain one, whatever
    other types take part."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: t.as_subclass(cls), out)


class RefusesOthers(torch.Tensor):
    """It raises TypeError for a call with a type it does not know, where torch's protocol
    asks it to return NotImplemented (so that the other type has its say)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if not all(issubclass(cls, t) or issubclass(t, cls) for t in types):
            raise TypeError(f"{cls.__name__} does not know {types}")
        return super().__torch_function__(func, types, args, kwargs)


def test_a_type_answering_a_call_with_an_unknown_type_is_caught():
    report = _report(IgnoresOthers, lambda t: t.as_subclass(IgnoresOthers), ops=["exp"])
    found = _failures(report, "overrides nothing")
    names = {name for name, _ in found}
    assert names >= {"torch.add(x, u)", "x + u", "torch.stack([u, x])"}
    returned = "returned a IgnoresOthers where plain torch raises TypeError"
    assert ("torch.add(x, u)", f"{returned} (the other type declines every call)") in found
    direct = [f for f in report.failures if f.function.startswith("x.__torch_function__")]
    assert {f.sample: f.reason.split(":")[0] for f in direct} == {
        # (run as a plain call, which torch.add refuses for a tensor-like ...)
        "with a tensor-like that overrides nothing": "raised TypeError without asking the "
        "other type (torch's protocol",
        # (... and computes for a Tensor subclass, whose override it never asks)
        "with a Tensor subclass that overrides nothing": "answered a IgnoresOthers (torch's "
        "protocol",
    }


def test_a_type_refusing_a_call_with_an_unknown_type_is_caught():
    report = _report(RefusesOthers, lambda t: t.as_subclass(RefusesOthers), ops=["exp"])
    found = _failures(report, "overrides nothing")
    # (every call ends in TypeError as torch's would: only its direct answer is wrong)
    assert {name for name, _ in found} == {"x.__torch_function__(torch.add, ...)"}
    assert all("without asking the other type" in reason for _, reason in found)


def test_metadata_tensor_stacks_with_an_unknown_type_raise_type_error():
    # Found by the check: MetadataTensor's stack read a sample of an unknown type as a
    # plain tensor (ValueError: no metadata keys; a batch ignoring the other type where
    # the instance had no keys) or as a tensor (AttributeError: no 'shape').
    class Unknown(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    class UnknownLike:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    for metadata in ({"k": 1}, {}):
        x = MetadataTensor(torch.ones(2), metadata)
        for other in (torch.ones(2).as_subclass(Unknown), UnknownLike()):
            for items in ([x, other], [other, x]):
                with pytest.raises(TypeError, match="torch.stack"):
                    torch.stack(items)
    with pytest.raises(ValueError, match="a plain tensor has none"):  # (as before)
        torch.stack([MetadataTensor(torch.ones(2), {"k": 1}), torch.ones(2)])


# --- the three types ---------------------------------------------------------------------

#: A few functions of each family (the slow test runs the check's own default set).
FEW = ["add", "exp", "sum", "matmul", "transpose", "cat", "max", "resolve_conj"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_pass(name):
    spec, options = TYPES[name]
    options = {k: v for k, v in options.items() if k != "checks"}
    if spec.cls is ScalarTensor:  # (its views are dense copies, as its docs say)
        spec = dataclasses.replace(spec, views_copy=True)
    report = _report(spec, ops=FEW, **options)
    assert report.passed, report.summary()
    if spec.cls is ScalarTensor:
        # (x.view(-1) and the other views of the dense matrix; resolve_conj in inference
        # mode, an inference tensor where plain's returns its input)
        assert {"x.view(-1)", "resolve_conj"} <= {f.function for f in report.copies}
        assert any("requiring grad" in d.sample for d in report.declined)  # (holds numbers)
    else:
        assert not report.copies and not report.declined


def test_an_integer_type_runs_the_calls_its_dtype_takes():
    # (the random functions refuse int64 in plain torch too: left out, nothing fails;
    # the views and the unknown types still run)
    report = _report(MetadataTensor, make_metadata(), ops=["abs"], dtypes=[torch.int64])
    assert report.passed and report.functions == ["abs"]
    broken = _report(
        CopiesTranspose, make_metadata(CopiesTranspose), ops=["abs"], dtypes=[torch.int64]
    )
    assert {f.function for f in broken.failures} == {"x.transpose(0, 1)"}


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_pass_the_default_run(name):
    # No `ops`: the sample-based conditions on edges.EDGE_FUNCTIONS, over op_db's samples
    # (generating them all takes about a minute under pytest, which makes torch's sample
    # generators walk a deep stack: the full tier only).
    spec, options = TYPES[name]
    options = {k: v for k, v in options.items() if k != "checks"}
    spec = dataclasses.replace(spec, views_copy=spec.cls is ScalarTensor)
    report = _report(spec, **options)
    assert report.passed, report.summary()


# --- the two reports ------------------------------------------------------------------------


def test_export_report_gives_torch_exports_refusal_of_a_tensor_like():
    report = testing.export_report(ScalarTensor, lambda t: ScalarTensor(t.shape[0], 1.5))
    assert not report.exported
    assert report.message.startswith("ValueError: Unsupported input type")
    assert str(report).startswith("ScalarTensor: torch.export refused: ValueError")


def test_export_report_of_a_subclass_names_the_traced_operators():
    report = testing.export_report(LoggingTensor, LoggingTensor)
    assert report.exported and report.equal and report.result_type == "LoggingTensor"
    assert report.operators == ["mul.Tensor", "add.Tensor", "sin.default", "sum.dim_IntList"]
    assert "torch.export passed (4 aten operators" in str(report)


def test_overhead_report_times_each_call_against_plain():
    report = testing.overhead_report(MetadataTensor, make_metadata(), min_run_time=0.002, rounds=1)
    assert [row[0] for row in report.rows] == list(testing.surveys.OVERHEAD_CALLS)
    for _, plain, typed, ratio in report.rows:  # (times are measured, never judged)
        assert plain > 0 and typed > 0 and ratio == pytest.approx(typed / plain)
    assert str(report).splitlines()[1].split() == ["call", "plain", "MetadataTensor", "ratio"]


def test_overhead_report_leaves_out_the_calls_a_type_refuses():
    def make(t):
        return ScalarTensor(t.shape[0], 1.5)

    with ScalarTensor.using_policy("strict"):  # (x[0] would form the dense matrix)
        report = testing.overhead_report(ScalarTensor, make, min_run_time=0.002, rounds=1)
    assert [row[0] for row in report.rows] == ["x + y", "x * 2", "x.sum()", "x @ y"]
