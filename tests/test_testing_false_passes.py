"""tensortools.testing: types broken in ways the float32, contiguous, one-call-each op_db
samples do not show (a handler wrong only on non-contiguous inputs, one that changes its
input, keeps it alive, skips type promotion, or drops metadata where the user gave no
rule) are each caught by exactly the check named for it; correct types pass them."""

import pytest
import torch
from test_testing_kit import QUICK, TYPES, make_metadata, metadata_rule

from tensortools import testing
from tensortools.types.metadata import MetadataTensor, metadata_of

#: Every check but the slow one (compile), modules and edges (these handlers take every
#: tensor for their own, which its calls with a type that overrides nothing catch:
#: tests/test_testing_edges.py).
CHECKS = [c for c in testing.DEFAULT_CHECKS if c not in ("compile", "modules", "edges")]
NEW = ["layouts", "mutation", "promotion", "leaks"]

#: A small selection: the broken handlers are on exp, sign and add.
OPS = ["exp", "sign", "add", "sin"]


def _plain(v):
    return v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v


def failing(cls, make=None, rule=None, **options):
    """The (check, function) pairs that fail for cls over OPS, every check but compile."""
    options = {"ops": OPS, "checks": CHECKS, **options}
    spec = testing.TypeSpec(cls, make=make or make_metadata(cls), rule=rule, safe_globals=[cls])
    report = testing.check_type(spec, raise_on_failure=False, **options)
    return {(f.check, f.function) for f in report.failures}, report


# --- broken types ------------------------------------------------------------------------------


class AssumesContiguous(MetadataTensor):
    """exp reads its input's storage as if it were contiguous (as a kernel that ignores
    strides does): right on every op_db sample, wrong on a transposed or strided input."""


@AssumesContiguous.implements(torch.exp)
def _exp_ignoring_strides(input):
    with torch._C.DisableTorchFunctionSubclass():
        data = input.as_subclass(torch.Tensor)
        strides = torch.empty(data.shape).stride()  # (a contiguous tensor's)
        out = torch.exp(torch.as_strided(data, data.shape, strides, data.storage_offset()))
    return AssumesContiguous(out, metadata_of(input))


class ChangesInputValues(MetadataTensor):
    """sign doubles its input's first element in place (the signs, its answer, stay the
    same)."""


@ChangesInputValues.implements(torch.sign)
def _sign_scaling_input(input):
    with torch._C.DisableTorchFunctionSubclass():
        data = input.as_subclass(torch.Tensor)
        out = torch.sign(data)
        if data.numel():  # (its first element: a write that any layout allows)
            first = data.as_strided((1,), (1,), data.storage_offset())
            with torch.no_grad():
                first.add_(first)
    return ChangesInputValues(out, metadata_of(input))


class ChangesInputMetadata(MetadataTensor):
    """exp counts its calls in its input's metadata dict, which the result shares."""


@ChangesInputMetadata.implements(torch.exp)
def _exp_counting(input):
    metadata = metadata_of(input)
    metadata["calls"] = metadata.get("calls", 0) + 1
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor))
    result = ChangesInputMetadata(out)
    result.metadata = metadata
    return result


KEPT = []  # what KeepsInputs holds on to


class KeepsInputs(MetadataTensor):
    """exp keeps every input it is given in a module-level list."""


@KeepsInputs.implements(torch.exp)
def _exp_keeping(input):
    KEPT.append(input)
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor))
    return KeepsInputs(out, metadata_of(input))


class NoPromotion(MetadataTensor):
    """add gives its input's dtype, or float32 for an integer input, instead of torch's
    type promotion: right wherever every tensor is float32."""


@NoPromotion.implements(torch.add)
def _add_without_promotion(input, other, *, alpha=1, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.add(_plain(input), _plain(other), alpha=alpha)
    x = input if isinstance(input, NoPromotion) else other
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    if out is not None:  # (the out= form, done right: out's dtype)
        return into(out, result)
    return NoPromotion(result.to(dtype), metadata_of(x))


class DropsMetadata(MetadataTensor):
    """exp returns a MetadataTensor without its input's metadata: of the type, as the
    kit's default rule asks, but not as MetadataTensor's own rule does."""


@DropsMetadata.implements(torch.exp)
def _exp_dropping(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor))
    return DropsMetadata(out, {})


class DropsMetadataInPlace(MetadataTensor):
    """exp_ computes in place and empties its input's metadata: the values are right and
    the instance comes back, but it no longer holds what it held (the mutation check
    leaves in-place forms out: changing the input is what they do)."""


@DropsMetadataInPlace.implements(torch.Tensor.exp_)
def _exp_in_place_dropping(input):
    with torch._C.DisableTorchFunctionSubclass():
        input.as_subclass(torch.Tensor).exp_()
    input.metadata = {}
    return input


class Correct(MetadataTensor):
    """Handlers of its own for exp, sign and add, each right."""


def into(out, result):
    """An out= form done right: the result's values written into out, out returned."""
    with torch._C.DisableTorchFunctionSubclass():
        torch.Tensor.copy_(out, result)
    return out


@Correct.implements(torch.exp)
def _exp(input, *, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.exp(input.as_subclass(torch.Tensor))
    return Correct(result, metadata_of(input)) if out is None else into(out, result)


@Correct.implements(torch.sign)
def _sign(input, *, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.sign(input.as_subclass(torch.Tensor))
    return Correct(result, metadata_of(input)) if out is None else into(out, result)


@Correct.implements(torch.add)
def _add(input, other, *, alpha=1, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.add(_plain(input), _plain(other), alpha=alpha)
    x = input if isinstance(input, Correct) else other
    return Correct(result, metadata_of(x)) if out is None else into(out, result)


# --- each caught by its check ---------------------------------------------------------------


def test_a_handler_wrong_only_on_non_contiguous_inputs_is_caught_by_layouts():
    found, report = failing(AssumesContiguous, rule=metadata_rule)
    assert found == {("layouts", "exp")}
    reasons = " ".join(f.reason for f in report.failures)
    assert "strided input: values differ" in reasons


def test_a_handler_changing_its_inputs_values_is_caught_by_mutation():
    found, report = failing(ChangesInputValues, rule=metadata_rule)
    assert found == {("mutation", "sign")}
    assert "changed the instance's values" in report.failures[0].reason


def test_a_handler_changing_its_inputs_metadata_is_caught_by_mutation():
    found, report = failing(ChangesInputMetadata, rule=metadata_rule)
    assert found == {("mutation", "exp")}
    assert "attributes ['metadata']" in report.failures[0].reason


def test_a_handler_keeping_its_inputs_is_caught_by_leaks():
    try:
        found, report = failing(KeepsInputs, rule=metadata_rule)
    finally:
        KEPT.clear()
    assert found == {("leaks", "exp")}
    assert "still alive" in report.failures[0].reason


def test_a_handler_without_type_promotion_is_caught_by_promotion():
    found, report = failing(NoPromotion, rule=metadata_rule)
    assert found == {("promotion", "add")}
    samples = " ".join(f.sample for f in report.failures)
    assert "torch.int64" in samples and "beside a float64 tensor" in samples
    assert all("dtype/shape torch.float32" in f.reason for f in report.failures)


def test_a_handler_dropping_metadata_is_caught_by_types_with_no_rule_given():
    found, report = failing(DropsMetadata)  # no rule: MetadataTensor's own
    assert found == {("types", "exp")}
    assert "coverage hooks" in report.failures[0].reason
    # (the kit's rule alone, floating-point results of the type, let it pass)
    found, _ = failing(DropsMetadata, rule=lambda x, result: "")
    assert not found


def test_a_handler_dropping_metadata_in_place_is_caught_by_types():
    for rule in (None, metadata_rule):  # the type's own rule, and the user's
        found, report = failing(DropsMetadataInPlace, rule=rule)
        assert found == {("types", "exp")}, rule
        assert all(f.reason.startswith("in-place form: ") for f in report.failures)
    # (without the types check, the in-place form's values are still compared, and pass)
    found, _ = failing(DropsMetadataInPlace, checks=["values"])
    assert not found


def test_a_correct_type_passes_every_check():
    for rule in (None, metadata_rule):
        found, report = failing(Correct, rule=rule)
        assert not found and report.samples > 0


def test_the_own_rule_judges_the_users_instances_where_it_holds_for_them():
    # Made as MetadataTensor's coverage hooks make them, the instances satisfy its rule:
    # the results of the checked calls are judged, no call runs twice.
    hooked = testing.options_from_coverage_hooks(DropsMetadata)["make"]
    found, _ = failing(DropsMetadata, make=hooked)
    assert found == {("types", "exp")}


# --- the three types -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_pass_the_new_checks(name):
    spec, options = TYPES[name]
    report = testing.check_type(spec, ops=QUICK, **{**options, "checks": NEW})
    assert report.passed and report.samples > 0
