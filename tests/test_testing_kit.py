"""tensortools.testing: check_type catches each kind of broken type with the matching
check, passes correct types, and runs on the three types (a quick selection here, the
whole op_db under the `slow` marker)."""

import contextlib
import threading

import pytest
import torch
from torch.utils._pytree import tree_leaves

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, coverage, testing
from tensortools.types.metadata_tensor import metadata_of

# A quick selection: unary and binary pointwise, reductions, shape functions, linear
# algebra, functions returning several tensors.
QUICK = [
    "add",
    "sub",
    "mul",
    "div",
    "exp",
    "sin",
    "clamp",
    "sum",
    "mean",
    "max",
    "sort",
    "flip",
    "transpose",
    "reshape",
    "cat",
    "where",
    "matmul",
    "split",
    "abs",
    "pow",
]


def metadata_rule(x, result):
    """MetadataTensor's rule: floating results are MetadataTensors with x's metadata."""
    for t in tree_leaves(result):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            if not isinstance(t, MetadataTensor):
                return f"a {type(t).__name__} result"
            if metadata_of(t) != metadata_of(x):
                return f"metadata {metadata_of(t)} instead of {metadata_of(x)}"
    return ""


def make_metadata(cls=MetadataTensor):
    return lambda t: cls(t, {"unit": "m", "run": 7})


def _failures(cls, make, **kw):
    report = testing.check_type(cls, make, raise_on_failure=False, **kw)
    return {(f.check, f.function) for f in report.failures}, report


# --- broken types, each caught by its check --------------------------------------------------


class WrongExp(MetadataTensor):
    pass


@WrongExp.implements(torch.exp)
def _wrong_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input) * 1.001
    return WrongExp(out, metadata_of(input))


def test_a_wrong_value_is_caught_by_values():
    found, _ = _failures(WrongExp, make_metadata(WrongExp), ops=["exp", "sin"], checks=["values"])
    assert found == {("values", "exp")}


class DropsKeyOnFlipMethod(MetadataTensor):
    pass


@DropsKeyOnFlipMethod.implements(torch.Tensor.flip, aliases=False)
def _flip_method(input, *dims):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.Tensor.flip(input, *dims)
    kept = {k: v for k, v in metadata_of(input).items() if k != "run"}
    return DropsKeyOnFlipMethod(out, kept)


def test_a_dropped_metadata_key_on_one_method_is_caught_by_aliases():
    found, report = _failures(
        DropsKeyOnFlipMethod,
        make_metadata(DropsKeyOnFlipMethod),
        rule=metadata_rule,
        ops=["flip", "exp"],
        checks=["values", "types", "aliases"],
    )
    assert found == {("aliases", "flip")}
    assert all("method form" in f.reason for f in report.failures)


class NoReflectedSub(MetadataTensor):
    def __rsub__(self, other):
        return NotImplemented


def test_a_missing_reflected_operator_is_caught_by_aliases():
    found, report = _failures(
        NoReflectedSub, make_metadata(NoReflectedSub), ops=["sub", "add"], checks=["aliases"]
    )
    assert found == {("aliases", "sub")}
    assert all("reflected operator form raised TypeError" in f.reason for f in report.failures)


_level = {"value": 0}


@contextlib.contextmanager
def leaky_level(value):
    _level["value"] = value  # shared by every thread, and never put back
    yield


_store = threading.local()


@contextlib.contextmanager
def thread_level(value):
    before = getattr(_store, "value", 0)
    _store.value = value  # this thread's alone, put back on exit
    try:
        yield
    finally:
        _store.value = before


def test_a_non_restoring_setting_is_caught_by_threads():
    settings = {
        "leaky": (lambda: leaky_level(5), lambda: _level["value"]),
        "per thread": (lambda: thread_level(5), lambda: getattr(_store, "value", 0)),
    }
    found, report = _failures(
        MetadataTensor, make_metadata(), ops=["exp"], checks=["threads"], settings=settings
    )
    assert found == {("threads", "setting leaky")}
    assert any("not restored" in f.reason for f in report.failures)


def test_the_error_lists_every_failure():
    with pytest.raises(testing.TypeCheckError) as info:
        testing.check_type(WrongExp, make_metadata(WrongExp), ops=["exp"], checks=["values"])
    message = str(info.value)
    assert "[values] exp (exp sample 0" in message and "values differ" in message
    assert info.value.report.failed_functions() == ["exp"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown checks \\['value'\\]"):
        testing.check_type(MetadataTensor, make_metadata(), checks=["value"])
    with pytest.raises(TypeError, match="'make' must be callable"):
        testing.check_type(MetadataTensor, "MetadataTensor")


# --- the three types --------------------------------------------------------------------------


def _scalar_make(t):
    if t.dim() == 2 and t.shape[0] == t.shape[1] and t.dtype.is_floating_point:
        return ScalarTensor(t.shape[0], 1.5, dtype=t.dtype)
    return None


TYPES = {
    "MetadataTensor": (MetadataTensor, make_metadata(), {"rule": metadata_rule}),
    "LoggingTensor": (LoggingTensor, LoggingTensor, {}),
    # structured: results may be ScalarTensors or dense, values are what count
    "ScalarTensor": (
        ScalarTensor,
        (_scalar_make, ScalarTensor.tensor),
        {"rule": lambda x, out: "", "checks": ("values", "aliases", "threads")},
    ),
}


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_pass_the_quick_selection(name):
    cls, make, options = TYPES[name]
    report = testing.check_type(cls, make, ops=QUICK, **options)
    assert report.passed and report.samples > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_over_all_of_op_db(name):
    # Every op_db function with float32 samples (about 580, 2 samples each).
    cls, make, options = TYPES[name]
    report = testing.check_type(cls, make, **options)
    assert report.passed and len(report.functions) > 500


# --- pytest integration -----------------------------------------------------------------------


@testing.parametrize(
    MetadataTensor, make_metadata(), ops=["exp", "flip", "sum"], rule=metadata_rule
)
def test_one_test_per_function(check, request):
    report = check()
    assert report.functions == [request.node.callspec.id] and report.passed


def test_parametrize_names_each_test_after_its_function():
    mark = testing.parametrize(MetadataTensor, make_metadata(), ops=["sin", "exp", "nonexistent"])
    assert mark.kwargs["ids"] == ["exp", "sin"]
    mark = testing.parametrize(WrongExp, make_metadata(WrongExp), ops=["exp"], checks=["values"])
    (check,) = mark.args[1]
    with pytest.raises(testing.TypeCheckError, match=r"\[values\] exp"):
        check()


# --- the coverage command -------------------------------------------------------------------


def test_coverage_command_refuses_unknown_checks(capsys):
    with pytest.raises(SystemExit) as info:
        coverage.main(["MetadataTensor", "--no-samples", "--check", "values,speed"])
    assert info.value.code == 2
    assert "unknown checks ['speed']" in capsys.readouterr().err


@pytest.mark.slow
def test_coverage_command_runs_check_type(capsys):
    assert (
        coverage.main(
            ["LoggingTensor", "--no-samples", "--max-samples", "1", "--check", "values,types"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "LoggingTensor: 579 functions" in out and "0 failures" in out
