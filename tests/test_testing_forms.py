"""tensortools.testing: the kit's own false passes and false alarms.

Each broken type below is wrong only where op_db's samples never reach (an ``out=`` form
that drops the metadata, a ``sum`` wrong for an empty input, a ``clamp`` that changes its
input when given Python numbers, a ``mul`` wrong for negative factors): the default run
catches each, and MetadataTensor itself passes. Correct types the kit used to fail pass:
attributes that are plain Python objects (compared by identity), a type that opts out of
``__torch_function__`` as torch allows, a type whose batches are plain tensors by its
rule, a type with no per-sample state, a sample the type cannot take. ``max_samples=None``
runs every sample and leaves later runs whole; the coverage command says when no rule
judged the results."""

from __future__ import annotations

import pytest
import torch

from tensortools import MetadataTensor, coverage, testing
from tensortools.types.metadata import metadata_of

#: The checks that judge a call's results (the forms run under them), without the costly
#: whole-run checks.
JUDGING = ["values", "types", "mutation"]


def make_metadata(cls=MetadataTensor):
    return lambda t: cls(t, {"unit": "m", "run": 7})


def failing(cls, ops, checks=JUDGING, make=None, **options):
    report = testing.check_type(
        cls,
        make or make_metadata(cls),
        ops=ops,
        checks=checks,
        raise_on_failure=False,
        progress=False,
        **options,
    )
    return {(f.check, f.function) for f in report.failures}, report


def _data(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


def _into(func, out, *args, **kwargs):
    """func's out= form done right: out (an instance) written, returned."""
    with torch._C.DisableTorchFunctionSubclass():
        func(*[_data(a) for a in args], **kwargs, out=_data(out))
    return out


# --- false passes: forms op_db's samples never take -------------------------------------------


class OutDropsMetadata(MetadataTensor):
    """Each function's out= form writes the right values and drops out's metadata."""


OUT_FUNCTIONS = {"exp": torch.exp, "add": torch.add, "mul": torch.mul, "sin": torch.sin}


def _out_dropping(func):
    def handler(input, *args, out=None, **kwargs):
        with torch._C.DisableTorchFunctionSubclass():
            plain = [_data(a) for a in args]
            if out is None:
                return OutDropsMetadata(func(_data(input), *plain, **kwargs), metadata_of(input))
            func(_data(input), *plain, **kwargs, out=_data(out))
        out.metadata = {}
        return out

    return handler


for _func in OUT_FUNCTIONS.values():
    OutDropsMetadata.implements(_func)(_out_dropping(_func))


@pytest.mark.parametrize("name", sorted(OUT_FUNCTIONS))
def test_an_out_form_that_drops_the_metadata_fails_types(name):
    found, report = failing(OutDropsMetadata, [name])
    assert found == {("types", name)}, report.summary()
    assert all(f.reason.startswith("out= form: ") for f in report.failures)
    # MetadataTensor's out= forms keep out's metadata: it passes
    found, report = failing(MetadataTensor, [name])
    assert not found, report.summary()


class EmptySumWrong(MetadataTensor):
    """sum is right but for an input with no element, where it gives 1."""


@EmptySumWrong.implements(torch.sum)
def _sum_wrong_when_empty(input, *args, **kwargs):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.sum(_data(input), *args, **kwargs)
        if input.numel() == 0:
            out = out + 1
    return EmptySumWrong(out, metadata_of(input))


class EmptyWrongEverywhere(MetadataTensor):
    """Every function it handles answers an empty input with the input itself."""


EMPTY_FUNCTIONS = {"sum": torch.sum, "mean": torch.mean, "exp": torch.exp, "add": torch.add}


def _wrong_when_empty(func):
    def handler(input, *args, out=None, **kwargs):
        if out is not None:
            return _into(func, out, input, *args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            data = _data(input)
            out = func(data, *[_data(a) for a in args], **kwargs)
            if data.numel() == 0:
                out = torch.full_like(out, 3.0) if out.numel() else out.new_full((), 3.0)
        return EmptyWrongEverywhere(out, metadata_of(input))

    return handler


for _func in EMPTY_FUNCTIONS.values():
    EmptyWrongEverywhere.implements(_func)(_wrong_when_empty(_func))


def test_a_sum_wrong_only_when_empty_fails_values():
    found, report = failing(EmptySumWrong, ["sum", "exp"])
    assert found == {("values", "sum")}, report.summary()
    assert all("empty: dim 0 of size 0" in f.sample for f in report.failures)


@pytest.mark.parametrize("name", sorted(EMPTY_FUNCTIONS))
def test_each_function_runs_on_an_empty_instance(name):
    found, report = failing(EmptyWrongEverywhere, [name])
    assert ("values", name) in found, report.summary()
    found, report = failing(MetadataTensor, [name])
    assert not found, report.summary()


def test_a_make_that_cannot_label_an_empty_tensor_declines_it():
    # (labelled by its first value: an empty tensor has none)
    found, report = failing(
        MetadataTensor, ["sum"], make=lambda t: MetadataTensor(t, {"id": t.flatten()[0].item()})
    )
    assert not found, report.summary()
    assert any("empty" in d.sample and "IndexError" in d.reason for d in report.declined)


class NumbersMutateInput(MetadataTensor):
    """clamp, mul and add change their input in place when given Python numbers (the
    answer is right)."""


NUMBER_FUNCTIONS = {"clamp": torch.clamp, "mul": torch.mul, "add": torch.add}


def _mutating_on_numbers(func):
    def handler(input, *args, out=None, **kwargs):
        if out is not None:
            return _into(func, out, input, *args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            data = _data(input)
            numbers = [a for a in (*args, *kwargs.values()) if isinstance(a, (int, float))]
            out = func(data, *[_data(a) for a in args], **kwargs)
            if numbers:
                with torch.no_grad():
                    data.copy_(out)
        return NumbersMutateInput(out, metadata_of(input))

    return handler


for _func in NUMBER_FUNCTIONS.values():
    NumbersMutateInput.implements(_func)(_mutating_on_numbers(_func))


@pytest.mark.parametrize("name", sorted(NUMBER_FUNCTIONS))
def test_a_handler_that_changes_its_input_given_numbers_fails_mutation(name):
    found, report = failing(NumbersMutateInput, [name])
    assert found == {("mutation", name)}, report.summary()
    assert all("Python numbers" in f.sample for f in report.failures)
    x = NumbersMutateInput(torch.tensor([-1.0, 0.5, 2.0]))
    torch.clamp(x, 0, 1)
    assert x.tolist() == [0.0, 0.5, 1.0]  # (what the broken handler does, by hand)


class MulWrongForNegatives(MetadataTensor):
    """mul multiplies by the factor's magnitude: wrong for negative factors, whether a
    tensor or a Python number."""


@MulWrongForNegatives.implements(torch.mul)
def _mul_by_magnitude(input, other, **kwargs):
    with torch._C.DisableTorchFunctionSubclass():
        factor = abs(other) if isinstance(other, (int, float)) else _data(other).abs()
        return MulWrongForNegatives(torch.mul(_data(input), factor), metadata_of(input))


class MulWrongForNegativeNumbers(MetadataTensor):
    """mul by a negative Python number multiplies by its magnitude (tensors are right)."""


@MulWrongForNegativeNumbers.implements(torch.mul)
def _mul_by_number_magnitude(input, other, **kwargs):
    with torch._C.DisableTorchFunctionSubclass():
        factor = abs(other) if isinstance(other, (int, float)) else _data(other)
        return MulWrongForNegativeNumbers(torch.mul(_data(input), factor), metadata_of(input))


@pytest.mark.parametrize("cls", [MulWrongForNegatives, MulWrongForNegativeNumbers])
def test_the_default_run_catches_a_mul_wrong_for_negative_factors(cls):
    # the default samples (max_samples=2, as docs/testing-a-type.md states), under the
    # default checks that judge each call (the whole-run ones add minutes, not calls of mul)
    checks = [*JUDGING, "layouts", "promotion", "aliases", "binding"]
    found, report = failing(cls, ["mul"], checks=checks)
    assert ("values", "mul") in found, report.summary()
    found, report = failing(MetadataTensor, ["mul"], checks=checks)
    assert not found, report.summary()


# --- false alarms ----------------------------------------------------------------------------


class Handle:
    """A plain Python object: no ``==`` of its own, so equal only to itself."""


def _with(attributes):
    def make(t):
        x = MetadataTensor(t, {"unit": "m"})
        for name, value in attributes().items():
            setattr(x, name, value)
        return x

    return make


#: Attributes without an ``==`` of their own, alone and inside containers.
PLAIN_OBJECTS = {
    "an object": lambda: {"handle": Handle()},
    "in a dict": lambda: {"handles": {"a": Handle(), "n": 1}},
    "in a list": lambda: {"handles": [Handle(), 2.0]},
    "in a tuple": lambda: {"handles": (Handle(), "x")},
    "a function": lambda: {"hook": lambda v: v},
    "in an object": lambda: {"holder": _holding(Handle())},
}


def _holding(value):
    holder = Handle()
    holder.inner = value
    return holder


@pytest.mark.parametrize("kind", sorted(PLAIN_OBJECTS))
def test_plain_object_attributes_compare_by_identity(kind):
    found, report = failing(
        MetadataTensor, ["exp", "add", "sum"], checks=["mutation"], make=_with(PLAIN_OBJECTS[kind])
    )
    assert not found, report.summary()


class ReplacesHandle(MetadataTensor):
    """exp gives its input a new handle (a change of the input's state)."""


@ReplacesHandle.implements(torch.exp)
def _exp_replacing_handle(input):
    input.handle = Handle()
    with torch._C.DisableTorchFunctionSubclass():
        return ReplacesHandle(torch.exp(_data(input)), metadata_of(input))


def test_a_replaced_plain_object_is_still_caught():
    def make(t):
        x = ReplacesHandle(t, {"unit": "m"})
        x.handle = Handle()
        return x

    found, report = failing(ReplacesHandle, ["exp", "add"], checks=["mutation"], make=make)
    assert found == {("mutation", "exp")}, report.summary()
    assert "attributes ['handle']" in report.failures[0].reason


@pytest.mark.parametrize("ops", [["exp"], ["add", "sum"], ["cat", "flip"]])
def test_max_samples_none_runs_every_sample_and_leaves_later_runs_whole(ops):
    every = testing.check_type(
        MetadataTensor, make_metadata(), ops=ops, checks=["values"], max_samples=None
    )
    two = testing.check_type(MetadataTensor, make_metadata(), ops=ops, checks=["values"])
    assert every.functions == two.functions == sorted(ops)
    assert every.samples > two.samples > 0
    again = testing.check_type(
        MetadataTensor, make_metadata(), ops=ops, checks=["values"], max_samples=None
    )
    assert again.samples == every.samples


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (2.0, TypeError)])
def test_max_samples_must_be_a_count_or_none(bad, error):
    with pytest.raises(error, match="'max_samples'"):
        testing.check_type(MetadataTensor, make_metadata(), ops=["exp"], max_samples=bad)


def test_coverage_report_of_a_type_without_a_rule_says_only_values_were_compared():
    from tensortools.dispatch import TensorWrapper

    class NoRule(TensorWrapper):
        pass

    with_rule = coverage.report(NoRule, ops=["exp"])
    assert with_rule.rule and "No rule registered" not in with_rule.to_text()
    coverage.register(NoRule, rule=None)
    without = coverage.report(NoRule, ops=["exp"])
    assert not without.rule
    assert "no rule judges the results" in without.to_text()
    assert "breaks the type's rules" in with_rule.to_text()
    for text in (without.to_text(), without.to_markdown()):
        assert "No rule registered for NoRule's results" in text
        assert "only values, dtypes and shapes were compared" in text
    assert '"rule": false' in without.to_json()
