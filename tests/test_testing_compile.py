"""The kit's compile check: each function compiled alone and chained with others in one
compiled function, compared with eager (values, the run's rule, results' attributes)."""

from __future__ import annotations

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, testing

pytestmark = pytest.mark.slow  # torch.compile

# Functions whose chains show the hazard on a type that breaks the graph (add then mul
# in their method forms), and one more.
OPS = ["add", "mul", "exp"]


class GraphBreaking(torch.Tensor):
    """As MONAI's MetaTensor: correct in eager, its __torch_function__ breaks the graph
    after the call (MONAI's metadata code is what dynamo cannot trace)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        torch._dynamo.graph_break()
        return result


def graph_breaking(t: torch.Tensor) -> GraphBreaking:
    return t.as_subclass(GraphBreaking)


class Tagged(torch.Tensor):
    """Results take the first argument's tag, but not under torch.compile: a type whose
    compiled results keep their class and lose their attributes."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        if isinstance(result, Tagged) and not torch.compiler.is_compiling():
            result.tag = getattr(args[0], "tag", None)
        return result


def tagged(t: torch.Tensor) -> Tagged:
    x = t.as_subclass(Tagged)
    x.tag = "a"
    return x


def compile_failures(spec, make=None, ops=None, compile_options=None, **options):
    # (the chains' hazard is dynamo's, whatever the backend: the eager one, the quickest,
    # unless a test names others in `compile_options`, the check's options)
    compile_options = {"backends": ["eager"], **(compile_options or {})}
    report = testing.check_type(
        spec,
        make,
        ops=ops,
        checks=["compile"],
        options={"compile": compile_options},
        raise_on_failure=False,
        **options,
    )
    return [f.reason for f in report.failures]


def test_the_graph_breaking_type_is_correct_in_eager_and_alone():
    x = graph_breaking(torch.arange(4.0))
    plain = torch.arange(4.0)
    for call in (lambda t: t + 0.5, lambda t: t.mul(2), lambda t: torch.exp(t)):
        torch._dynamo.reset()
        got = torch.compile(call, backend="eager")(x)
        torch.testing.assert_close(got.as_subclass(torch.Tensor), call(plain))


def test_compile_runs_when_named_and_not_by_default():
    # (the graph-breaking type fails the chains: a default run, which leaves compile out,
    # passes it; named, it fails)
    default = testing.check_type(
        GraphBreaking, graph_breaking, ops=OPS, max_samples=1, raise_on_failure=False
    )
    assert "compile" not in default.checks and default.samples > 0
    assert not [f for f in default.failures if f.check == "compile"]
    assert compile_failures(GraphBreaking, graph_breaking, ops=OPS)


def test_chains_catch_what_each_function_alone_does_not():
    reasons = compile_failures(GraphBreaking, graph_breaking, OPS)
    assert reasons, "the compile check missed the graph-breaking type's wrong values"
    assert all(r.startswith("chained") for r in reasons), reasons  # (alone: all right)
    assert any("(x + 0.5) * 2 - x / 3" in r for r in reasons)
    assert any("chained with add" in r for r in reasons)  # add then mul, in one function


def test_monai_metatensor_arithmetic_chain_is_caught():
    monai = pytest.importorskip("monai.data")
    reasons = compile_failures(monai.MetaTensor, monai.MetaTensor, ["add"])
    assert any("(x + 0.5) * 2 - x / 3" in r and "differ" in r for r in reasons), reasons


def test_compiled_results_keep_eagers_attributes():
    reasons = compile_failures(Tagged, tagged, ["exp"])
    assert any("'tag'" in r for r in reasons), reasons


class _Spy:
    """torch.compile, recording the names of the functions it compiles."""

    def __init__(self):
        self.names, self.compile = [], torch.compile

    def __call__(self, fn, **kwargs):
        self.names.append(fn.__name__)
        return self.compile(fn, **kwargs)


def _scalar(t: torch.Tensor) -> ScalarTensor | None:
    if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] == t.shape[1]:
        return ScalarTensor(t.shape[0], 1.5, dtype=t.dtype)
    return None


# (ScalarTensor's results may be ScalarTensors or dense: values are what count)
CORRECT = {
    # (the chain found compiled `1.5 - x` after another call raising TypeError here)
    "MetadataTensor": (
        testing.TypeSpec(MetadataTensor, make=lambda t: MetadataTensor(t, {"k": 1})),
        {},
    ),
    "LoggingTensor": (testing.TypeSpec(LoggingTensor, make=LoggingTensor), {}),
    # (functions whose samples are square matrices, which ScalarTensor stands for)
    "ScalarTensor": (
        testing.TypeSpec(
            ScalarTensor, make=_scalar, densify=ScalarTensor.tensor, rule=lambda x, r: ""
        ),
        {"ops": ["linalg.det", "trace", "mm"]},
    ),
}


@pytest.mark.parametrize("spec, options", CORRECT.values(), ids=CORRECT)
def test_correct_types_pass_the_chains(spec, options, monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(torch, "compile", spy)
    assert compile_failures(spec, **{"ops": OPS, **options}) == []
    assert {"arithmetic_chain", "chain"} <= set(spy.names)  # (the chains ran)


def test_uninitialised_results_are_compared_by_dtype_and_shape():
    ops = ["empty_like", "new_empty"]
    reasons = compile_failures(
        LoggingTensor, LoggingTensor, ops, compile_options={"samples": 4}, max_samples=4
    )
    assert reasons == []


def test_logging_tensor_passes_under_aot_eager():
    assert (
        compile_failures(
            LoggingTensor, LoggingTensor, ["exp"], compile_options={"backends": ["aot_eager"]}
        )
        == []
    )


def test_what_fails_for_any_subclass_under_aot_eager_is_reported_apart_as_upstream():
    # torch 2.13's aot_eager fails torch.exp of a Tensor subclass, a bare one as well
    # (TypeError: Multiple dispatch failed for aten.exp.default; all __torch_dispatch__
    # handlers returned NotImplemented): torch's limit, not the type's. (tensortools' own
    # types compile it: tensortools/_compile_fixes.py, below.)
    class Bare(torch.Tensor):
        pass

    torch._dynamo.reset()
    with pytest.raises(Exception, match="Multiple dispatch failed"):
        torch.compile(torch.exp, backend="aot_eager")(torch.ones(3).as_subclass(Bare))
    report = testing.check_type(
        Bare,
        lambda t: t.as_subclass(Bare),
        ops=["exp"],
        checks=["compile"],
        options={"compile": {"backends": ["aot_eager"]}},
        raise_on_failure=False,
    )
    assert report.upstream and all("bare Tensor subclass too" in f.reason for f in report.upstream)
    assert "failing for any Tensor subclass (upstream)" in report.summary()


def test_metadata_tensor_passes_under_aot_eager():
    spec = CORRECT["MetadataTensor"][0]
    assert compile_failures(spec, ops=["exp"], compile_options={"backends": ["aot_eager"]}) == []
