"""tensortools.testing on types whose calls give plain tensors by design (torch's opt-out of
``__torch_function__``, as tensordict's ``MemoryMappedTensor``; a rule saying results are
plain, as torchvision's ``Mask``): the ``edges`` check judges what torch does with them,
not what their method answers when called directly, and the ``batches`` check honours
the run's ``rule=``; a type with no per-sample state is declined there, not failed.
Broken counterparts (a type that answers calls with types it does not know, rows that
hold another sample's values) are still caught."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_leaves

from tensortools import MetadataTensor, testing


class OptedOut(torch.Tensor):
    """torch's opt-out: torch never asks it about a call; results are plain tensors."""

    __torch_function__ = torch._C._disabled_torch_function_impl


class AnswersEverything(torch.Tensor):
    """Answers every call it is asked about, computing it, even with a type it does not
    know (torch's protocol: NotImplemented, so that the other type is asked)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunction():
            return func(*args, **(kwargs or {}))


def plain_results(x, result):
    """The rule of a type whose results are plain tensors (of the type only as itself)."""
    for t in tree_leaves(result):
        if isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, type(x)):
            return f"a {type(t).__name__} result"
    return ""


def plain_results_of_calls(x, result, func=None, args=(), kwargs=None):
    """plain_results, written as a rule that is given the call."""
    return plain_results(x, result)


def run(cls, checks, rule=None, **options):
    return testing.check_type(
        testing.TypeSpec(cls, make=lambda t: t.as_subclass(cls), rule=rule),
        checks=checks,
        ops=["exp"],
        raise_on_failure=False,
        progress=False,
        **options,
    )


DIRECT = "x.__torch_function__(torch.add, ...)"


def test_an_opted_out_type_is_not_asked_what_torch_never_asks_it():
    report = run(OptedOut, ["edges"], rule=plain_results)
    assert report.passed, report.summary()
    # what torch does with it: a call with a type that declines ends in TypeError
    declines = torch.rand(3).as_subclass(_Declines)
    for x in (torch.rand(3), torch.rand(3).as_subclass(OptedOut)):
        for call in (lambda: torch.add(x, declines), lambda: torch.add(declines, x)):
            with pytest.raises(TypeError):
                call()


class _Declines(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


def test_a_type_that_answers_for_others_is_still_caught():
    report = run(AnswersEverything, ["edges"], rule=plain_results)
    direct = [f for f in report.failures if f.function == DIRECT]
    # (a tensor-like and a Tensor subclass that override nothing: each answered)
    assert len(direct) == 2, report.summary()
    assert all(f.reason.startswith(("answered a", "raised")) for f in direct), direct
    assert {f.sample for f in direct} == {
        "with a tensor-like that overrides nothing",
        "with a Tensor subclass that overrides nothing",
    }


# --- batches under the run's rule ------------------------------------------------------------


@pytest.mark.parametrize("rule", [plain_results, plain_results_of_calls])
def test_batches_of_plain_results_pass_under_their_rule(rule):
    report = run(OptedOut, ["batches"], rule=rule)
    assert report.passed, report.summary()
    # no per-sample state: declined, with the reason
    assert [d.check for d in report.declined] == ["make"]
    assert "hold no attributes of their own" in report.declined[0].reason


def test_batches_without_a_rule_still_require_rows_of_the_type():
    report = run(OptedOut, ["batches"])
    assert not report.passed
    assert all("not a OptedOut" in f.reason for f in report.failures), report.summary()


class RowsReversed(torch.Tensor):
    """Plain results, as OptedOut, but b[i] gives row -1 - i (another sample's values)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__getitem__ and isinstance(args[1], int):
            args = (args[0], -1 - args[1])
        with torch._C.DisableTorchFunction():
            out = func(*args, **kwargs)
        return out.as_subclass(cls) if func in (torch.stack, torch.cat) else out


def test_rows_of_another_sample_fail_under_a_rule_too():
    report = run(RowsReversed, ["batches"], rule=plain_results)
    found = {f.function for f in report.failures}
    assert {"b[1]", "b[-1]"} <= found, report.summary()
    assert all("values" in f.reason for f in report.failures if f.function == "b[1]")


def test_a_type_with_per_sample_state_and_a_rule_still_judges_the_state():
    # MetadataTensor batches under a rule that accepts plain results: rows of the type
    # must still hold their sample's metadata
    def make(t):
        return MetadataTensor(t, {"id": int(t.flatten()[0])})

    report = testing.check_type(
        testing.TypeSpec(MetadataTensor, make=make, rule=plain_results),
        checks=["batches"],
        progress=False,
    )
    assert report.passed and not report.declined
