"""tensortools.testing's ``modules`` check: module_db's modules and tensortools' own run
with their inputs as instances; broken types are caught by it (and only by it), the three
types pass it, and it reaches the modules it should."""

import pytest
import torch
from test_testing_kit import TYPES, make_metadata, metadata_rule

import tensortools.testing.steps
from tensortools import MetadataTensor, testing
from tensortools.types.metadata import metadata_of

OTHER_CHECKS = [c for c in testing.DEFAULT_CHECKS if c not in ("modules", "compile")]
SMALL = ["add", "exp", "sum", "matmul", "transpose"]


@pytest.fixture
def reached(monkeypatch):
    """The module samples each check_type run of the test ran (name, label)."""
    ran = []
    check_modules = tensortools.testing.steps.check_modules

    def recording(*args):
        ran.extend(check_modules(*args))

    monkeypatch.setattr(tensortools.testing.steps, "check_modules", recording)
    return ran


def _failures(cls, safe_globals=(), **options):
    spec = testing.TypeSpec(
        cls, make=make_metadata(cls), rule=metadata_rule, safe_globals=safe_globals
    )
    report = testing.check_type(spec, raise_on_failure=False, **options)
    return {(f.check, f.function) for f in report.failures}, report


# --- broken types, each caught by the modules check alone ------------------------------------


class LinearLosesType(MetadataTensor):
    pass


@LinearLosesType.implements(torch.nn.functional.linear)
def _linear_plain(input, weight, bias=None):
    with torch._C.DisableTorchFunctionSubclass():
        return torch.nn.functional.linear(input.as_subclass(torch.Tensor), weight, bias)


@pytest.mark.slow
def test_a_linear_that_loses_the_type_is_caught_by_modules_alone():
    found, _ = _failures(
        LinearLosesType, ops=SMALL, checks=OTHER_CHECKS, safe_globals=[LinearLosesType]
    )
    assert not found  # the functions' samples never reach linear
    found, report = _failures(LinearLosesType, ops=["exp"], checks=["modules"])
    # (the modules built on linear, attention and transformers, reach it inside one call
    # of the type, multi_head_attention_forward, whose handler runs it on plain tensors)
    assert found == {("modules", "nn.Linear")}
    linear = [f for f in report.failures if f.function == "nn.Linear"]
    assert linear and all("forward: a Tensor result" in f.reason for f in linear)
    assert any(f.sample.startswith("nn.Linear sample 1 'no_bias'") for f in linear)


class WrongLayerNorm(MetadataTensor):
    pass


@WrongLayerNorm.implements(torch.nn.functional.layer_norm)
def _layer_norm_off(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.nn.functional.layer_norm(
            input.as_subclass(torch.Tensor), normalized_shape, weight, bias, eps
        )
    return WrongLayerNorm(out * 1.01, metadata_of(input))


@pytest.mark.slow
def test_wrong_values_in_a_module_are_caught_by_modules():
    found, report = _failures(WrongLayerNorm, ops=SMALL, checks=["values", "types", "modules"])
    assert {check for check, _ in found} == {"modules"}
    assert "nn.LayerNorm" in {function for _, function in found}
    (first, *_) = [f for f in report.failures if f.function == "nn.LayerNorm"]
    assert first.reason.startswith("forward: values differ")
    assert "LayerNorm(" in first.sample and "float32" in first.sample


class BatchNormKeepsStatistics(MetadataTensor):
    pass


@BatchNormKeepsStatistics.implements(torch.nn.functional.batch_norm)
def _batch_norm_on_copies(input, running_mean, running_var, *args, **kwargs):
    # updates copies of the running statistics: the module's own never change
    copies = [None if t is None else t.clone() for t in (running_mean, running_var)]
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.nn.functional.batch_norm(
            input.as_subclass(torch.Tensor), *copies, *args, **kwargs
        )
    return BatchNormKeepsStatistics(out, metadata_of(input))


@pytest.mark.slow
def test_running_statistics_left_unchanged_are_caught_by_modules():
    found, report = _failures(BatchNormKeepsStatistics, ops=["exp"], checks=["modules"])
    assert ("modules", "nn.BatchNorm2d") in found
    assert all(
        f.reason.startswith("buffer running_") for f in report.failures if "BatchNorm" in f.function
    )


class _WrongLinearGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight):
        ctx.save_for_backward(input, weight)
        return input @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        return grad @ weight, 1.01 * grad.t() @ input  # the weight's 1% off


class WrongWeightGradient(MetadataTensor):
    pass


@WrongWeightGradient.implements(torch.nn.functional.linear)
def _linear_wrong_grad(input, weight, bias=None):
    with torch._C.DisableTorchFunctionSubclass():
        out = _WrongLinearGradient.apply(input.as_subclass(torch.Tensor), weight)
        out = out if bias is None else out + bias
    return WrongWeightGradient(out, metadata_of(input))


@pytest.mark.slow
def test_a_wrong_parameter_gradient_is_caught_by_modules():
    found, report = _failures(WrongWeightGradient, ops=["exp"], checks=["modules"])
    linear = [f for f in report.failures if f.function == "nn.Linear"]
    assert linear and all(f.reason.startswith("gradient of parameter weight") for f in linear)


# --- the three types ----------------------------------------------------------------------------

# Modules each type must reach (a floor, so that the check cannot silently run nothing).
MUST_REACH = {
    "MetadataTensor": (
        110,
        {"nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.GroupNorm"}
        | {"nn.Embedding", "nn.LSTM", "nn.GRU", "nn.MultiheadAttention"}
        | {"nn.TransformerEncoderLayer", "tensortools.nn.LLTM", "tensortools.nn.FusedConvBN2d"}
        | {"tensortools.nn.SyncFusedConvBN2d"},
    ),
    # ScalarTensor stands in for square float matrices only
    "ScalarTensor": (6, {"nn.LSTM", "nn.MultiheadAttention", "tensortools.nn.GraphConv"}),
}
MUST_REACH["LoggingTensor"] = MUST_REACH["MetadataTensor"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_three_types_pass_the_modules_check(name, reached):
    spec, options = TYPES[name]
    report = testing.check_type(spec, ops=["exp"], **{**options, "checks": ["modules"]})
    assert report.passed
    floor, named = MUST_REACH[name]
    modules = {s.name for s in reached}
    assert len(modules) >= floor and named <= modules
    assert len(reached) <= 2 * len(modules)  # (max_samples per module)
