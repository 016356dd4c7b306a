"""tensortools.testing's open check registry, its options mapping, the one TypeSpec the kit
and the coverage report share, and the deprecated keywords of earlier versions (each maps
to the new form and gives the same report)."""

import warnings

import pytest
import torch
from torch.utils.data import default_collate

from tensortools import LoggingTensor, MetadataTensor, coverage, testing
from tensortools.testing import TypeSpec, legacy
from tensortools.types.metadata import metadata_of


def make_metadata(cls=MetadataTensor):
    return lambda t: cls(t, {"unit": "m"})


class OffExp(MetadataTensor):
    """exp one part in a thousand off (the values check and the user check catch it)."""


@OffExp.implements(torch.exp)
def _off_exp(input):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.exp(input) * 1.001
    return OffExp(out, metadata_of(input))


@pytest.fixture
def float64_exp_check():
    """A user's check: exp of each sample's instance equals exp in float64 of the plain
    tensor it stands for (to float32's tolerance); registered for the test only."""
    seen = []

    @testing.register_check("float64_exp", options={"rtol": 1e-5})
    def check(run, samples, options):
        seen.append(options)
        for s in samples:
            x = run.typed(s)
            if not isinstance(x, run.cls):
                continue
            got = torch.exp(x).as_subclass(torch.Tensor)
            plain = run.plain(x)
            want = torch.exp(plain.double()).to(plain.dtype)
            if not torch.allclose(got, want, rtol=options["rtol"], atol=1e-6):
                run.fail("float64_exp", s, "exp differs from float64")

    yield seen
    testing.unregister_check("float64_exp")


CASES = [
    (MetadataTensor, make_metadata(), ["exp", "sin", "flip"], 0),
    (LoggingTensor, LoggingTensor, ["exp", "sum"], 0),
    (OffExp, make_metadata(OffExp), ["exp", "sin", "flip"], 1),
]


@pytest.mark.parametrize(
    "cls, make, ops, wrong_exp", CASES, ids=lambda c: getattr(c, "__name__", None)
)
def test_a_users_check_runs_and_its_failures_land_in_the_report(
    float64_exp_check, cls, make, ops, wrong_exp
):
    report = testing.check_type(
        TypeSpec(cls, make=make),
        checks=["float64_exp"],
        ops=ops,
        progress=False,
        raise_on_failure=False,
    )
    assert float64_exp_check == [{"rtol": 1e-5}]  # (run once, with its defaults)
    assert report.checks == ("float64_exp",) and sorted(report.functions) == sorted(ops)
    # (the check takes exp of every sample's input: a wrong exp fails every sample)
    failed = {f.function for f in report.failures}
    assert failed == (set(ops) if wrong_exp else set()), report.summary()
    if wrong_exp:
        assert all(f.check == "float64_exp" for f in report.failures)
        with pytest.raises(testing.TypeCheckError, match=r"float64_exp"):
            testing.check_type(
                TypeSpec(cls, make=make), checks=["float64_exp"], ops=["exp"], progress=False
            )


def test_a_users_check_takes_its_options_and_runs_by_default(float64_exp_check):
    assert "float64_exp" in testing.check_names() and "float64_exp" in testing.default_checks()
    # rtol 0.01 lets OffExp's one part in a thousand pass
    report = testing.check_type(
        TypeSpec(OffExp, make=make_metadata(OffExp)),
        checks=["float64_exp"],
        ops=["exp"],
        options={"float64_exp": {"rtol": 1e-2}},
        progress=False,
    )
    assert report.passed and float64_exp_check == [{"rtol": 1e-2}]


def test_a_users_check_that_raises_is_a_failure_of_that_check():
    @testing.register_check("explodes", default=False)
    def explodes(run, samples, options):
        run.typed(samples[0])  # (an instance made: a run that makes none fails on its own)
        raise RuntimeError("boom")

    try:
        report = testing.check_type(
            MetadataTensor,
            make_metadata(),
            checks=["explodes"],
            ops=["exp"],
            progress=False,
            raise_on_failure=False,
        )
    finally:
        testing.unregister_check("explodes")
    assert "explodes" not in testing.check_names()
    assert [(f.check, f.reason) for f in report.failures] == [
        ("explodes", "the check could not run: RuntimeError: boom")
    ]


def test_registering_a_check_twice_or_badly_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'values'"):
        testing.register_check("values")(lambda run, samples, options: None)
    with pytest.raises(ValueError, match="'no such'"):
        testing.register_check("no such")
    with pytest.raises(ValueError, match="'nothing'"):
        testing.unregister_check("nothing")


@pytest.mark.parametrize("check", testing.CHECKS)
def test_unknown_options_give_an_error_naming_the_check_and_the_option(check):
    spec = TypeSpec(MetadataTensor, make=make_metadata())
    with pytest.raises(ValueError, match=rf"\['bogus'\] for check '{check}'"):
        testing.check_type(spec, ops=["exp"], options={check: {"bogus": 1}})
    with pytest.raises(ValueError, match=r"unknown checks \['nope'\]"):
        testing.check_type(spec, ops=["exp"], options={"nope": {}, check: {}})
    with pytest.raises(TypeError, match=rf"options\['{check}'\] must be a mapping"):
        testing.check_type(spec, ops=["exp"], options={check: 3})


@pytest.mark.parametrize(
    "check, option, bad, error",
    [
        ("autograd", "gradcheck_samples", -1, ValueError),
        ("serialization", "samples", 0, ValueError),
        ("compile", "samples", 1.5, ValueError),
        ("compile", "backends", "eager", TypeError),
        ("compile", "backends", (), TypeError),
    ],
)
def test_bad_option_values_give_an_error_naming_the_option(check, option, bad, error):
    with pytest.raises(error, match=rf"options\['{check}'\]\['{option}'\]"):
        testing.check_type(
            MetadataTensor, make_metadata(), ops=["exp"], options={check: {option: bad}}
        )


def test_options_must_be_a_mapping_and_checks_known():
    with pytest.raises(TypeError, match="'options' must map check names"):
        testing.check_type(MetadataTensor, make_metadata(), options=[("values", {})])
    with pytest.raises(ValueError, match=r"unknown checks \['valeus'\]"):
        testing.check_type(MetadataTensor, make_metadata(), checks=["valeus"])


def test_the_kit_and_the_coverage_report_read_one_spec():
    spec = coverage.spec_for(MetadataTensor)
    assert isinstance(spec, testing.TypeSpec) and coverage.TypeSpec is testing.TypeSpec
    assert spec.cls is MetadataTensor and spec.rule is not None
    # the class alone is its registered spec: the coverage report's make and rule
    report = testing.check_type(
        MetadataTensor, ops=["exp", "flip"], checks=["values", "types"], progress=False
    )
    assert report.passed
    made = spec.make_for(MetadataTensor)(torch.ones(2))
    assert type(made) is MetadataTensor and metadata_of(made) == {"coverage": 1}
    assert spec.rule_for(MetadataTensor)(made, made + 1) == ""
    assert "metadata" in spec.rule_for(MetadataTensor)(made, MetadataTensor(torch.ones(2), {}))


# --- the deprecated keywords: each maps to the new form, with the same report ---------------

M = make_metadata()
OLD = {
    # keyword: (value, the new form: spec fields, options), checks to run
    "reference": (lambda fn, inp, args, kwargs: fn(inp, *args, **kwargs), ["values"]),
    "rule": (lambda x, result: "", ["values", "types"]),
    "refusals": ((TypeError,), ["values"]),
    "settings": ({}, ["threads"]),
    "safe_globals": ([MetadataTensor], ["serialization"]),
    "volatile_attrs": (("_cache",), ["mutation"]),
    "views_copy": (True, ["values"]),
    "sample_state": (lambda x: metadata_of(x), ["values"]),
    "collate_fn": (default_collate, ["values"]),
    "gradcheck_samples": (0, ["autograd"]),
    "serialization_samples": (2, ["serialization"]),
    "compile_samples": (2, ["values"]),
    "compile_backends": (("eager",), ["values"]),
}


def _same(a, b):
    return (a.checks, a.functions, a.samples, [str(f) for f in a.failures], a.declined) == (
        b.checks,
        b.functions,
        b.samples,
        [str(f) for f in b.failures],
        b.declined,
    )


def test_every_old_keyword_is_covered():
    assert set(OLD) == set(legacy.SPEC_KEYWORDS) | set(legacy.OPTION_KEYWORDS)


@pytest.mark.parametrize("keyword", sorted(OLD))
def test_an_old_keyword_warns_with_the_new_form_and_gives_the_same_report(keyword):
    value, checks = OLD[keyword]
    common = dict(ops=["exp"], checks=checks, progress=False, raise_on_failure=False)
    with pytest.warns(DeprecationWarning) as caught:
        old = testing.check_type(OffExp, make_metadata(OffExp), **common, **{keyword: value})
    message = str(caught[0].message)
    assert f"{keyword}=" in message
    if keyword in legacy.SPEC_KEYWORDS:
        assert f"TypeSpec(OffExp, make=..., {keyword}=...)" in message
        spec = TypeSpec(OffExp, make=make_metadata(OffExp), **{keyword: value})
        options = None
    else:
        check, option = legacy.OPTION_KEYWORDS[keyword]
        assert f"options={{{check!r}: {{{option!r}: {value!r}}}}}" in message
        spec = TypeSpec(OffExp, make=make_metadata(OffExp))
        options = {check: {option: value}}
    # the mapping itself, field by field
    with pytest.warns(DeprecationWarning):
        mapped, mapped_options = legacy.translate(
            TypeSpec(OffExp, make=spec.make), None, None, {keyword: value}
        )
    if keyword in legacy.SPEC_KEYWORDS:
        assert getattr(mapped, keyword) == (tuple(value) if keyword == "volatile_attrs" else value)
    else:
        assert mapped_options == options
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # (the new form warns of nothing)
        new = testing.check_type(spec, **common, options=options)
    assert _same(old, new), (old.summary(), new.summary())


def test_the_make_densify_pair_warns_and_gives_the_same_report():
    from tensortools import ScalarTensor

    def make(t):
        if t.dim() != 2 or t.shape[0] != t.shape[1]:
            raise testing.Unsupported("square matrices only")
        return ScalarTensor(t.shape[0], 2.0, dtype=t.dtype)

    def densify(x):
        return x.tensor()

    common = dict(ops=["exp", "neg"], checks=["values"], progress=False, raise_on_failure=False)
    with pytest.warns(DeprecationWarning, match=r"TypeSpec\(ScalarTensor, make=make, densify="):
        old = testing.check_type(ScalarTensor, (make, densify), **common)
    new = testing.check_type(TypeSpec(ScalarTensor, make=make, densify=densify), **common)
    assert _same(old, new) and old.samples > 0


def test_an_old_keyword_and_its_option_given_twice_is_an_error():
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="given twice|twice"):
        testing.check_type(
            MetadataTensor,
            M,
            gradcheck_samples=1,
            options={"autograd": {"gradcheck_samples": 2}},
        )
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        testing.check_type(MetadataTensor, M, colour="red")
    with pytest.raises(TypeError, match="'make' in the TypeSpec"):
        testing.check_type(TypeSpec(MetadataTensor, make=M), M)


def test_the_coverage_reports_old_field_names_warn_and_give_the_same_results():
    from tensortools.dispatch import TensorWrapper

    class Old(TensorWrapper):
        pass

    class New(TensorWrapper):
        pass

    def negative_results(cls, result):  # (the old signature: the class, the result)
        return "a negative result" if (result.as_subclass(torch.Tensor) < 0).any() else ""

    with pytest.warns(DeprecationWarning, match=r"write register\(\.\.\., make=g\)"):
        coverage.register(Old, instance=lambda cls, t: cls(t.abs()))
    with pytest.warns(DeprecationWarning, match=r"write register\(\.\.\., rule=g\)"):
        coverage.register(Old, result_problem=negative_results)
    coverage.register(New, make=lambda t: New(t.abs()))
    coverage.register(New, rule=lambda x, result, *, cls: negative_results(cls, result))
    x = torch.linspace(-2, 2, 9)
    for op in (torch.exp, torch.neg, torch.sin, torch.abs, torch.sub):
        args = (x.flip(0),) if op is torch.sub else ()
        old, new = (coverage.check_sample(c, op, x, args, {}) for c in (Old, New))
        plain = op(x.abs(), *(a.abs() for a in args))
        want = "wrong" if (plain < 0).any() else "correct"
        assert (old.result, old.reason) == (new.result, new.reason) and old.result == want, op
    with pytest.warns(DeprecationWarning, match=r"TypeSpec\.instance is deprecated"):
        assert coverage.spec_for(Old).instance(Old, x).as_subclass(torch.Tensor).min() >= 0
