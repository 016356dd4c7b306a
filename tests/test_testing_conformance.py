"""tensortools.testing as a conformance suite for a type it did not make: no false word
(a correct type that does something the kit did not expect passes: it overrides a method
in Python, keeps state per instance, declines samples, holds NumPy arrays, caches on the
instance) and real reach (a type broken where the kit did not look is caught: a retained
view of its input, an integer result for ``int * 2.5``, a changed ``requires_grad``, a
varargs method spelling, a fault under ``aot_eager`` only)."""

from __future__ import annotations

import itertools
import textwrap

import numpy as np
import pytest
import torch
from test_testing_kit import make_metadata, metadata_rule

from tensortools import MetadataTensor, coverage, testing
from tensortools.types.metadata import metadata_of


def run(spec, make=None, **options):
    """check_type, not raising; a class and its `make` are judged by MetadataTensor's rule."""
    if not isinstance(spec, testing.TypeSpec):
        spec, make = testing.TypeSpec(spec, make=make, rule=metadata_rule), None
    options.setdefault("progress", False)
    return testing.check_type(spec, make, raise_on_failure=False, **options)


def found(report) -> set:
    return {(f.check, f.function) for f in report.failures}


def _plain(v):
    return v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v


# --- no false failures -------------------------------------------------------------------------


def test_gradcheck_skips_tensors_make_gives_no_instance_for():
    # make declines float64: gradcheck's float64 sample holds no instance, and passes
    # no None into the call
    def make(t):
        return None if t.dtype == torch.float64 else MetadataTensor(t, {"unit": "m"})

    report = run(MetadataTensor, make, ops=["exp", "sin"], checks=["autograd"])
    assert report.passed, report.summary()


class ChunkInPython(MetadataTensor):
    """Overrides chunk as a Python method that marks each piece: ``x.chunk(2)`` and
    ``x.chunk(chunks=2)`` both take it; ``torch.Tensor.chunk(x, 2)`` does not."""

    def chunk(self, *args, **kwargs):
        pieces = super().chunk(*args, **kwargs)
        return tuple(ChunkInPython(_plain(p), {**metadata_of(self), "piece": True}) for p in pieces)


def test_binding_compares_the_bound_method_with_itself():
    report = run(
        testing.TypeSpec(
            ChunkInPython, make=make_metadata(ChunkInPython), rule=lambda x, result: ""
        ),
        ops=["chunk"],
        checks=["binding"],
    )
    assert report.passed, report.summary()


COUNTER = itertools.count()


def make_numbered(t):
    """Each instance a number of its own (and a random one): results carry their input's."""
    return MetadataTensor(t, {"instance": next(COUNTER), "draw": float(torch.rand(()))})


@pytest.mark.slow
def test_compile_compares_one_instance_with_itself():
    # (the eager backend: MetadataTensor fails under aot_eager, test_testing_compile.py)
    report = run(
        testing.TypeSpec(MetadataTensor, make=make_numbered),
        ops=["exp", "sum"],
        checks=["compile"],
        options={"compile": {"backends": ["eager"]}},
    )
    assert report.passed, report.summary()


def test_make_declining_samples_declines_them_and_checks_the_rest():
    def make(t):
        if t.dim() == 0:
            raise testing.Unsupported("no 0-d instances")
        return MetadataTensor(t, {"unit": "m"})

    checks = ["values", "mutation", "leaks", "threads", "autograd"]
    report = run(MetadataTensor, make, ops=["add", "exp", "sum"], checks=checks)
    assert report.passed, report.summary()
    assert report.declined and all("0-d" in d.reason for d in report.declined)
    assert "samples declined" in report.summary()


def test_make_raising_on_some_samples_fails_those_not_the_whole_check():
    def make(t):
        if t.dim() == 0:
            raise ValueError("a bug in make")
        return Leaky(t, {"unit": "m"})

    try:
        report = run(Leaky, make, ops=["add", "exp"], checks=["leaks", "threads"])
    finally:
        KEPT.clear()
    assert ("leaks", "exp") in found(report)  # the check ran past the raising samples
    assert {f.check for f in report.failures} == {"make", "leaks"}
    assert all(
        "make raised ValueError: a bug in make" in f.reason
        for f in report.failures
        if f.check == "make"
    )


def test_a_run_where_make_gives_no_instance_fails():
    report = run(MetadataTensor, lambda t: None, ops=["exp", "add"], checks=["values"])
    assert found(report) == {("make", "(type)")}
    assert "nothing was checked" in report.failures[0].reason


def test_numpy_arrays_in_metadata_are_compared_by_value():
    def make(t):
        return MetadataTensor(t, {"affine": np.eye(3), "names": np.array(["a", "b"])})

    spec = testing.TypeSpec(MetadataTensor, make=make)
    report = run(spec, ops=["exp", "add", "flip"], checks=["mutation"])
    assert report.passed, report.summary()


class Caches(MetadataTensor):
    """exp caches its result on its input (a volatile attribute)."""


@Caches.implements(torch.exp)
def _exp_caching(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor))
    input.__dict__["_cache"] = out
    return Caches(out, metadata_of(input))


def test_a_declared_volatile_attribute_is_not_a_mutation():
    make = make_metadata(Caches)
    assert ("mutation", "exp") in found(run(Caches, make, ops=["exp"], checks=["mutation"]))
    spec = testing.TypeSpec(Caches, make=make, rule=metadata_rule, volatile_attrs=["_cache"])
    report = run(spec, ops=["exp"], checks=["mutation"])
    assert report.passed, report.summary()


def test_a_run_leaves_the_process_as_it_found_it():
    # (the threads check reseeded the generator every later check and the user's code
    # went on from: the modules check's samples hung on what ran before it)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    report = run(MetadataTensor, make_metadata(), ops=["exp", "add"], checks=["values", "threads"])
    assert report.passed and torch.equal(torch.get_rng_state(), before)


class SetsDefaultDtype(MetadataTensor):
    """exp sets torch's default dtype to float64 (and leaves it so)."""


@SetsDefaultDtype.implements(torch.exp)
def _exp_setting_default_dtype(input):
    torch.set_default_dtype(torch.float64)
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor))
    return SetsDefaultDtype(out, metadata_of(input))


def test_a_call_changing_a_process_setting_is_caught_and_put_back():
    make = make_metadata(SetsDefaultDtype)
    report = run(SetsDefaultDtype, make, ops=["exp", "sin"], checks=["values", "threads"])
    assert torch.get_default_dtype() == torch.float32
    assert found(report) == {("values", "exp"), ("threads", "(type)")}
    assert "default dtype torch.float64 (was torch.float32)" in report.failures[0].reason


# --- real reach --------------------------------------------------------------------------------

KEPT: list = []


class Leaky(MetadataTensor):
    """exp keeps a plain view of every input's data (the instance itself dies)."""


@Leaky.implements(torch.exp)
def _exp_keeping_a_view(input):
    with torch._C.DisableTorchFunctionSubclass():
        data = input.as_subclass(torch.Tensor)
        KEPT.append(data.view(data.shape))
        out = torch.exp(data)
    return Leaky(out, metadata_of(input))


def test_a_retained_view_of_the_input_is_caught_by_leaks():
    try:
        report = run(Leaky, make_metadata(Leaky), ops=["exp", "sin"], checks=["leaks"])
    finally:
        KEPT.clear()
    assert found(report) == {("leaks", "exp")}
    assert "memory" in report.failures[0].reason


class IntegerMul(MetadataTensor):
    """mul keeps an integer input's dtype: int64 * 2.5 gives int64."""


@IntegerMul.implements(torch.mul)
def _mul_keeping_dtype(input, other):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.mul(_plain(input), _plain(other))
    x = input if isinstance(input, IntegerMul) else other
    if not x.is_floating_point():
        result = result.to(x.dtype)
    return IntegerMul(result, metadata_of(x))


def test_an_integer_instance_times_a_float_number_is_checked_by_promotion():
    report = run(IntegerMul, make_metadata(IntegerMul), ops=["mul"], checks=["promotion"])
    assert found(report) == {("promotion", "mul")}
    samples = " ".join(f.sample for f in report.failures)
    assert "beside a float Python number" in samples


class SetsRequiresGrad(MetadataTensor):
    """exp sets its input's requires_grad."""


@SetsRequiresGrad.implements(torch.exp)
def _exp_setting_requires_grad(input):
    input.requires_grad_(True)
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input.as_subclass(torch.Tensor).detach())
    return SetsRequiresGrad(out, metadata_of(input))


def test_a_handler_setting_requires_grad_is_caught_by_mutation():
    report = run(
        SetsRequiresGrad, make_metadata(SetsRequiresGrad), ops=["exp"], checks=["mutation"]
    )
    assert found(report) == {("mutation", "exp")}
    assert "requires_grad" in report.failures[0].reason


class ChangesLargeInputs(MetadataTensor):
    """add doubles its input in place where it has a dim (0-d inputs are left alone)."""


@ChangesLargeInputs.implements(torch.add)
def _add_changing(input, other, *, alpha=1, out=None):
    with torch._C.DisableTorchFunctionSubclass():
        result = torch.add(_plain(input), _plain(other), alpha=alpha)
        if isinstance(input, torch.Tensor) and input.dim() > 0:
            with torch.no_grad():
                _plain(input).mul_(2)
    x = input if isinstance(input, ChangesLargeInputs) else other
    return ChangesLargeInputs(result, metadata_of(x))


def test_mutation_runs_samples_beyond_the_first():
    report = run(
        ChangesLargeInputs,
        make_metadata(ChangesLargeInputs),
        ops=["add"],
        checks=["mutation"],
        max_samples=3,
    )
    assert ("mutation", "add") in found(report)


class FlipOneDim(MetadataTensor):
    """x.flip(0, 1) flips dim 0 only: a method written on the class (which no binding of
    the dispatch table reaches) that takes the varargs form's first dim."""

    def flip(self, *dims, **kwargs):
        if "dims" in kwargs:
            dims = (kwargs["dims"],)
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims[:1]
        return torch.flip(self, dims)


def test_the_varargs_method_spelling_is_checked_by_aliases():
    report = run(FlipOneDim, make_metadata(FlipOneDim), ops=["flip"], checks=["aliases"])
    assert found(report) == {("aliases", "flip")}
    assert all("varargs method form" in f.reason for f in report.failures)


class Masked(MetadataTensor):
    """The metadata holds a mask of the tensor's shape; flip forgets to flip it."""


def make_masked(t):
    return Masked(t, {"mask": torch.arange(t.numel()).reshape(t.shape) % 3 == 0})


def mask_follows(x, result, func=None, args=(), kwargs=None):
    """The rule, given the call: a flip's result holds the input's mask flipped alike."""
    if func is torch.flip and isinstance(result, Masked):
        want = torch.flip(_plain(metadata_of(x)["mask"]), *args[1:], **kwargs)
        if not torch.equal(_plain(metadata_of(result)["mask"]), want):
            return "the mask is not flipped with the values"
    return ""


def test_the_rule_is_given_the_function_and_its_arguments():
    spec = testing.TypeSpec(Masked, make=make_masked, rule=mask_follows)
    report = run(spec, ops=["flip"], checks=["types"])
    assert found(report) == {("types", "flip")}
    assert "the mask is not flipped" in report.failures[0].reason


# --- compile: backends, one line per failure --------------------------------------------------


@torch.library.custom_op("tensortools_test::exp_as_float64", mutates_args=())
def _exp_as_float64(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x).double()


@_exp_as_float64.register_fake
def _(x):
    return torch.empty_like(x)  # wrong: the kernel gives float64


class WrongFake(MetadataTensor):
    """exp through an operator whose fake kernel gives the wrong dtype: right in eager
    and under the eager backend; under aot_eager, whose trace believes the fake, the
    cast back to the input's dtype is dropped."""


@WrongFake.implements(torch.exp)
def _exp_wrong_fake(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = _exp_as_float64(input).to(input.dtype)
    # (in forms dynamo traces, so that the handler is inlined into the compiled graph,
    # where aot_eager believes the fake: a frame dynamo runs eagerly never meets it)
    return WrongFake.wrap(out, metadata_of(input))


@pytest.mark.slow
def test_a_fault_under_aot_eager_only_is_caught_by_compile():
    options = {"ops": ["exp"], "checks": ["compile"]}
    make = make_metadata(WrongFake)
    eager_only = run(WrongFake, make, options={"compile": {"backends": ["eager"]}}, **options)
    assert eager_only.passed, eager_only.summary()
    report = run(WrongFake, make, **options)
    # (exp alone: the dtype the fake kernel claims; the chains of other calls meet
    # MetadataTensor's own aot_eager failure, test_testing_compile.py)
    alone = [f.reason for f in report.failures if not f.reason.startswith("chained")]
    assert alone == [
        "under backend aot_eager: dtype/shape torch.float64 (20,) instead of torch.float32 (20,)"
    ], alone


class Uncompilable(torch.Tensor):
    """Raises a message of its own under torch.compile."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling():
            raise ValueError("the real reason")
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.slow
def test_a_compile_failure_is_one_line_with_the_real_message(capfd):
    report = run(
        testing.TypeSpec(Uncompilable, make=lambda t: t.as_subclass(Uncompilable)),
        ops=["exp"],
        checks=["compile"],
        options={"compile": {"backends": ["eager"]}},
    )
    assert found(report) == {("compile", "exp")}
    assert all("ValueError: the real reason" in f.reason for f in report.failures)
    assert len(capfd.readouterr().err.splitlines()) < 5


# --- the report ----------------------------------------------------------------------------------


class OffByOne(MetadataTensor):
    """Every call returns one more than it should."""

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        result = super().fallback(func, types, args, kwargs)
        if isinstance(result, torch.Tensor) and result.is_floating_point():
            with torch._C.DisableTorchFunctionSubclass():
                torch.Tensor.add_(result, 1)
        return result


def test_the_summary_groups_failures_by_cause():
    ops = ["exp", "sin", "cos", "tanh", "neg", "abs"]
    report = run(OffByOne, make_metadata(OffByOne), ops=ops, checks=["values"])
    assert len(report.failures) >= len(ops)
    groups = report.groups()  # the function form, the in-place form and the out= form
    assert [g.count for g in groups] == [len(ops)] * 3
    assert all(g.functions == sorted(ops) for g in groups)
    lines = report.summary().splitlines()
    assert len(lines) == 8 and "3 causes" in lines[1]  # the counts, the causes, 2 lines each
    assert f"in {len(ops)} functions" in lines[2] and "e.g. [values]" in lines[3]


# --- the coverage command on a type it did not make ------------------------------------------

OUTSIDE = '''
import torch
from tensortools.dispatch import TensorWrapper


class Labelled(TensorWrapper):
    """A tensor with a label, set by its constructor; results keep the first's."""

    @staticmethod
    def __new__(cls, data, label="x"):
        return cls._make(data)

    def __init__(self, data, label="x"):
        self.label = label

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        label = next(a.label for a in args if isinstance(a, Labelled))
        with torch._C.DisableTorchFunctionSubclass():
            plain = func(*[a.as_subclass(torch.Tensor) if isinstance(a, Labelled) else a
                           for a in args], **kwargs)
        if isinstance(plain, torch.Tensor):
            return Labelled(plain, label)
        return plain
'''


def test_coverage_and_the_kit_build_an_outside_type_with_its_constructor(tmp_path, monkeypatch):
    (tmp_path / "outside_labelled.py").write_text(textwrap.dedent(OUTSIDE))
    monkeypatch.syspath_prepend(str(tmp_path))
    from outside_labelled import Labelled

    assert coverage.resolve_type("outside_labelled.Labelled") is Labelled
    counts = coverage.report(Labelled, ops=["exp", "add", "sum"]).counts()
    assert counts["samples error"] == 0 and counts["samples correct"] > 0, counts
    options = testing.options_from_coverage_hooks(Labelled)
    spec = testing.TypeSpec(Labelled, make=options["make"])
    report = run(spec, ops=["exp", "add"], checks=["types"])
    assert report.passed, report.summary()
