"""tensortools.coverage: the report, its formats and the command line."""

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import types

import pytest
import torch
from torch.utils._pytree import tree_leaves

import tensortools
from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, coverage
from tensortools.dispatch import TensorLike, TensorWrapper


def test_overridable_functions_exclude_ignored():
    names = dict(coverage.overridable_functions())
    ignored = torch.overrides.get_ignored_functions()
    assert "torch.add" in names and "torch.Tensor.add" in names
    assert names["tensortools.ops.lltm"] is tensortools.ops.lltm
    assert not any(f in ignored for f in names.values())
    total = {f for fs in torch.overrides.get_overridable_functions().values() for f in fs}
    assert len(names) >= len(total - ignored) - 5  # a few share one qualified name


def test_static_classification_follows_table_and_policy():
    rep = coverage.report(ScalarTensor, samples=False)
    by_name = {f.name: f for f in rep.functions}
    assert by_name["torch.add"].outcome == "handled"
    assert by_name["torch.Tensor.__radd__"].outcome == "handled"
    assert by_name["torch.exp"].outcome == "fallback"
    counts = rep.counts()
    assert counts["handled"] == sum(
        ScalarTensor.handler_for(f) is not None for _, f in coverage.overridable_functions()
    )
    with ScalarTensor.using_policy("strict"):
        strict = coverage.report(ScalarTensor, samples=False).counts()
    assert strict["refused"] == counts["fallback"] and strict["fallback"] == 0


def test_check_sample_judges_against_plain_results():
    x = torch.randn(3, 3)
    ok = coverage.check_sample(MetadataTensor, torch.sin, x, (), {})
    assert ok.result == "correct"
    bad = coverage.check_sample(
        MetadataTensor,
        lambda t: t.as_subclass(torch.Tensor) + 1 if isinstance(t, MetadataTensor) else t + 2,
        x,
        (),
        {},
    )
    assert bad.result == "wrong"
    err = coverage.check_sample(LoggingTensor, lambda t: t.reshape(5), x, (), {})
    assert err is None  # the plain call fails too: nothing to compare
    d = coverage.check_sample(ScalarTensor, torch.linalg.det, x, (), {})
    assert d.result == "correct"
    assert coverage.check_sample(ScalarTensor, torch.sin, torch.randn(2, 3), (), {}) is None


def test_formats_and_cli(capsys):
    rep = coverage.report(ScalarTensor, samples=False)
    data = json.loads(rep.to_json())
    assert data["type"] == "ScalarTensor" and data["counts"]["handled"] > 10
    assert rep.to_text().startswith("ScalarTensor: ")
    assert rep.to_markdown().startswith("## ScalarTensor")
    assert coverage.main(["ScalarTensor", "--no-samples", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["type"] == "ScalarTensor"


class Interval(TensorLike):
    """A user's type for the dotted-path test: torch.add only; without a fallback of its
    own, the rest is refused."""


Interval.implements(torch.add)(lambda a, b, alpha=1: "sum")


def test_cli_takes_a_users_type_by_dotted_path(capsys):
    assert coverage.main(["test_coverage.Interval", "--no-samples"]) == 0
    out = capsys.readouterr().out
    # torch.add, Tensor.add, Tensor.__add__ and Tensor.__radd__
    assert "      4 handled   a handler in the type's table" in out
    assert "      0 fallback" in out
    assert "a TypeError without trying: the type has no fallback" in out
    with pytest.raises(SystemExit):
        coverage.main(["no_such_module.Type"])
    with pytest.raises(SystemExit):
        coverage.main(["json.JSONDecoder"])  # not built on tensortools.dispatch


@pytest.mark.slow  # (times ten calls in interleaved rounds, a few seconds)
def test_cli_times_common_calls_with_overhead(capsys):
    from tensortools.testing.surveys import OVERHEAD_CALLS

    args = ["LoggingTensor", "test_coverage.Interval", "--no-samples", "--overhead"]
    assert coverage.main(args) == 0
    out = capsys.readouterr().out
    table = out[out.index("LoggingTensor: per-call time, 16x16 float32") :].splitlines()
    rows = [
        re.fullmatch(r"(.+?)\s+([\d.]+)us\s+([\d.]+)us\s+([\d.]+)x[? ]?", r) for r in table[2:7]
    ]
    assert [m.group(1) for m in rows] == list(OVERHEAD_CALLS)  # (LoggingTensor refuses none)
    for m in rows:
        plain, typed, ratio = (float(m.group(k)) for k in (2, 3, 4))
        # (each printed to two places: the ratio's rounding and the times')
        bound = 0.005 / plain + 0.005 / typed + 0.005 / ratio
        assert plain > 0 and ratio == pytest.approx(typed / plain, rel=bound)
    # a type whose hooks make no instance of a plain matrix: said, not failed
    assert "Interval: no per-call times: make gave no Interval of a (16, 16)" in out
    with pytest.raises(SystemExit):  # (a table after the JSON would make it unreadable)
        coverage.main(["LoggingTensor", "--no-samples", "--overhead", "--format", "json"])
    assert "--overhead prints a table" in capsys.readouterr().err


def test_docs_coverage_is_current():
    # docs/coverage.md is generated by the command at its top, over every tensor type
    # tensortools exports; regenerate it when handlers or types change
    from pathlib import Path

    from tensortools import types
    from tensortools.dispatch import TorchFunctionTable

    ours = [getattr(types, n) for n in types.__all__]
    ours = [c for c in ours if isinstance(c, type) and issubclass(c, TorchFunctionTable)]
    text = (Path(__file__).resolve().parent.parent / "docs" / "coverage.md").read_text()
    names = " ".join(c.__name__ for c in ours)
    assert f"`python -m tensortools.coverage {names} --format markdown`" in text
    for cls in ours:
        summary = coverage.report(cls, samples=False).to_markdown().split("\n\nop_db")[0]
        assert summary in text, cls


def _report_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_text_report_puts_the_summary_first_in_the_types_words():
    rep = coverage.report(ScalarTensor, samples=False)
    c = rep.counts()
    lines = _report_lines(rep.to_text())
    assert lines[0] == f"ScalarTensor: {sum(c[o] for o in coverage.OUTCOMES)} overridable " + (
        "functions (torch.overrides, tensortools.ops)"
    )
    assert lines[1].split()[:2] == [str(c["handled"]), "handled"]
    assert coverage.spec_for(ScalarTensor).handled_means in lines[1]
    assert coverage.spec_for(ScalarTensor).fallback_means in lines[2] and "dense" in lines[2]
    # without --all: the summary and where to find the rest, not one row per function
    assert len(lines) < 10 and lines[-1] == "every function and its samples: --all"
    full = rep.to_text(full=True)
    assert full.startswith(rep.to_text().rsplit("\n", 1)[0].rstrip())  # summary first
    assert f"handled ({c['handled']}):" in full and f"fallback ({c['fallback']}):" in full
    assert sum(line.startswith("  torch.") for line in full.splitlines()) >= c["fallback"]
    # MetadataTensor's fallback is its design, and the report says so
    meta = _report_lines(coverage.report(MetadataTensor, samples=False).to_text())
    assert "fallback" in meta[2] and "not a gap" in meta[2]


def test_failures_are_grouped_by_reason_and_explained():
    x = torch.randn(3, 3)
    refused = coverage.check_sample(ScalarTensor, lambda t: torch.Tensor.cauchy_(t), x, (), {})
    assert refused.result == "refused"
    assert "a ScalarTensor is not one" in refused.reason and "descriptor" not in refused.reason
    rep = coverage.report(ScalarTensor, samples=False)
    rows = {f.name: f for f in rep.functions}
    for name in ("torch.exp", "torch.sin"):
        rows[name].samples = {"refused": 1}
        rows[name].reasons = {"refused": refused.reason}
    rows["torch.cos"].samples = {"wrong": 1, "correct": 1}
    rows["torch.cos"].reasons = {"wrong": "values differ"}
    # grouped by its most serious result, with that result's reason
    rows["torch.tan"].samples = {"refused": 1, "error": 1}
    rows["torch.tan"].reasons = {"refused": "TypeError: first", "error": "RuntimeError: second"}
    groups = rep.failure_groups()
    assert [(result, reason[:12], [f.name for f in fs]) for result, reason, fs in groups] == [
        ("error", "RuntimeError", ["torch.tan"]),
        ("wrong", "values diffe", ["torch.cos"]),
        ("refused", refused.reason[:12], ["torch.exp", "torch.sin"]),
    ]
    text = rep.to_text()
    assert "Not answered correctly: 5 samples in 4 rows (functions or op_db entries)" in text
    assert "refused: TypeError: first; error" not in rep.to_text(full=True)  # worst first
    assert "error: RuntimeError: second; refused: TypeError: first" in rep.to_text(full=True)
    assert text.count("a ScalarTensor is not") == 1  # one line for the group
    md = rep.to_markdown()
    assert "| wrong | values differ | `torch.cos` |" in md


def test_command_shows_progress_on_stderr(monkeypatch, capsys):
    pytest.importorskip("tqdm")
    pytest.importorskip("expecttest", reason="op_db needs the expecttest package")
    report_module = importlib.import_module("tensortools.coverage.report")  # (not the function)

    def few_cases(max_samples, on_entry=None, ops=None):
        for _ in range(3):
            yield "sin", torch.sin, torch.randn(2, 2), (), {}
            on_entry()

    monkeypatch.setattr(report_module, "sample_cases", few_cases)
    monkeypatch.setattr(report_module, "op_db_size", lambda ops=None: 3)
    assert coverage.main(["ScalarTensor"]) == 0
    captured = capsys.readouterr()
    assert "ScalarTensor: op_db" in captured.err  # not a terminal, and still shown
    assert "3 run" in captured.out and "Every sample was answered correctly." in captured.out
    assert coverage.main(["ScalarTensor", "--no-progress"]) == 0
    assert "op_db" not in capsys.readouterr().err
    # no sample at all is not "every sample correct"
    monkeypatch.setattr(
        report_module, "sample_cases", lambda max_samples, on_entry=None, ops=None: iter(())
    )
    assert coverage.main(["ScalarTensor", "--no-progress"]) == 0
    assert "No op_db sample ran: ScalarTensor stands in for none" in capsys.readouterr().out
    for bad in (["--all", "--failures-only"], ["--all", "--format", "json"]):
        with pytest.raises(SystemExit):
            coverage.main(["ScalarTensor", "--no-samples", *bad])
    capsys.readouterr()
    assert coverage.main(["ScalarTensor", "--no-samples", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["max_samples"] == 0
        and data["means"]["handled"] == coverage.spec_for(ScalarTensor).handled_means
    )


def test_command_piped_into_head_exits_cleanly():
    # `python -m tensortools.coverage ... | head` may close the pipe before the command
    # writes: here the reading end is closed from the start
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tensortools.coverage", "ScalarTensor", "--no-samples"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_subclass_uses_its_parents_spec_until_it_registers_its_own():
    class Tagged(MetadataTensor):
        pass

    assert coverage.spec_for(Tagged) is coverage.spec_for(MetadataTensor)
    # the parent's functions receive the subclass: its samples are of the subclass
    substituted = coverage.spec_for(Tagged).substitute(Tagged, torch.ones(2), (), {})
    assert type(substituted[0]) is Tagged and substituted[0].metadata == {"coverage": 1}
    x = torch.randn(3)
    assert coverage.check_sample(Tagged, torch.exp, x, (), {}).result == "correct"
    rep = coverage.report(Tagged, samples=False)
    assert rep.means["fallback"] == coverage.spec_for(MetadataTensor).fallback_means

    own = coverage.register(Tagged, handled_means="tagged", exact=False)
    assert coverage.spec_for(Tagged) is own
    assert own.make is coverage.spec_for(MetadataTensor).make
    assert coverage.spec_for(MetadataTensor).handled_means != "tagged"  # the parent's is kept
    assert coverage.report(Tagged, samples=False).means["handled"] == "tagged"


def test_registering_a_spec_changes_what_the_report_runs():
    class Plain(TensorWrapper):
        pass

    x = torch.randn(3)
    # the TensorWrapper default: every tensor wrapped, every result of the type
    assert coverage.check_sample(Plain, torch.exp, x, (), {}).result == "correct"

    def broken_rule(x, result):
        return "results are never right"

    coverage.register(Plain, rule=broken_rule, handled_means="mine")
    got = coverage.check_sample(Plain, torch.exp, x, (), {})
    assert (got.result, got.reason) == ("wrong", "results are never right")
    assert coverage.report(Plain, samples=False).means["handled"] == "mine"
    coverage.register(Plain, substitute=lambda cls, inp, args, kwargs: None)
    assert coverage.check_sample(Plain, torch.exp, x, (), {}) is None
    # the testing kit reads the same spec
    options = tensortools.testing.options_from_coverage_hooks(Plain)
    assert options["make"](x) is None
    with pytest.raises(TypeError, match="cls"):
        coverage.register("Plain")


@pytest.mark.slow  # (imports op_db)
def test_op_db_samples_are_generated_once_and_handed_out_as_copies():
    pytest.importorskip("expecttest", reason="op_db needs the expecttest package")
    from tensortools import _samples as module

    entries = {info.name: info for info in module.op_db()}
    infos = [entries[name] for name in ("add", "index_add", "t", "cat")]
    calls = []
    for info in infos:
        real = info.sample_inputs
        # (counts the generator's runs: a second walk must not run it again)
        object.__setattr__(
            info,
            "sample_inputs",
            lambda *a, _r=real, _n=info.name, **k: calls.append(_n) or _r(*a, **k),
        )
    try:
        module._GENERATED.clear()
        torch.manual_seed(7)
        state = torch.default_generator.get_state()
        first = {i.name: module.op_db_samples(i, torch.float32, 3) for i in infos}
        assert torch.equal(torch.default_generator.get_state(), state)  # put back
        # a fresh generation from the seed gives the same samples, whatever ran before
        torch.default_generator.manual_seed(0)
        direct = {i.name: list(i.sample_inputs("cpu", torch.float32))[:3] for i in infos}
        calls.clear()
        for name, got in first.items():
            assert len(got) == len(direct[name]) > 0
            for s, d in zip(got, direct[name]):
                for a, b in zip(
                    tree_leaves((s.input, s.args, s.kwargs)),
                    tree_leaves((d.input, d.args, d.kwargs)),
                ):
                    if isinstance(a, torch.Tensor):
                        assert a.stride() == b.stride() and torch.equal(a, b)
        # each call gets its own tensors: writing to one changes no later walk's
        for s in first["add"]:
            s.input.fill_(123.0)
        again = module.op_db_samples(entries["add"], torch.float32, 3)
        assert not any(bool((s.input == 123.0).all()) for s in again)
        assert calls == []  # generated once
        module.op_db_samples(entries["add"], torch.float32, 5)  # more than kept: once more
        assert calls == ["add"]
    finally:
        for info in infos:
            object.__delattr__(info, "sample_inputs")
        module._GENERATED.clear()


def test_a_sample_generator_that_raises_raises_on_every_call_without_running_again():
    from tensortools import _samples as module

    runs = []

    class Broken:
        name, variant_test_name = "broken", ""

        def sample_inputs(self, device, dtype):
            runs.append(dtype)
            raise RuntimeError("no samples on this build")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="no samples on this build"):
            module.op_db_samples(Broken(), torch.float32, 1)
    assert runs == [torch.float32]
    module._GENERATED.pop(("broken", "", torch.float32))


@pytest.mark.parametrize("first", [None, 0, 2, 7])
def test_every_sample_is_none_and_leaves_later_calls_whole(first):
    """n=None asks for every sample; a call with None before or after a call with a count
    gets every sample, and the count's call gets its first n (None was compared with a
    count, raised inside the generator's guard and was kept as the OpInfo's failure)."""
    from tensortools import _samples as module

    class Five:
        name, variant_test_name = f"five-{first}", ""

        def sample_inputs(self, device, dtype):
            return (
                types.SimpleNamespace(input=torch.full((2,), float(i)), args=(), kwargs={})
                for i in range(5)
            )

    info = Five()
    try:
        if first is not None:
            assert len(module.op_db_samples(info, torch.float32, first)) == min(first, 5)
        every = module.op_db_samples(info, torch.float32, None)
        assert [s.input[0].item() for s in every] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert len(module.op_db_samples(info, torch.float32, 3)) == 3
        assert len(module.op_db_samples(info, torch.float32, None)) == 5
    finally:
        module._GENERATED.pop((info.name, "", torch.float32), None)


def test_threads_generating_samples_at_once_get_what_one_thread_alone_gets(monkeypatch):
    # (the samples are drawn from the process's generator, seeded for the generation: two
    # threads drawing at once would each take some of the other's numbers)
    from tensortools import _samples as module

    class Drawing:
        variant_test_name = ""

        def __init__(self, name):
            self.name = name

        def sample_inputs(self, device, dtype):
            for _ in range(20):
                time.sleep(0)  # (lets the other threads run between draws)
                yield types.SimpleNamespace(input=torch.randn(4, dtype=dtype), args=(), kwargs={})

    torch.manual_seed(0)
    alone = [s.input for s in Drawing("alone").sample_inputs("cpu", torch.float32)]
    monkeypatch.setattr(module, "_GENERATED", {})
    torch.manual_seed(7)
    state = torch.default_generator.get_state()
    barrier = threading.Barrier(4)
    got = {}

    def generate(name):
        barrier.wait()
        got[name] = module.op_db_samples(Drawing(name), torch.float32, 20)

    threads = [threading.Thread(target=generate, args=(f"drawing{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [f"drawing{i}" for i in range(4)]
    for name, samples in got.items():
        assert all(torch.equal(s.input, a) for s, a in zip(samples, alone, strict=True)), name
    assert torch.equal(torch.default_generator.get_state(), state)  # put back


def test_the_overridable_functions_do_not_depend_on_dynamo_being_imported():
    """torch._dynamo, once imported, replaces torch.manual_seed by a wrapper, which torch's
    ignored set does not hold: the list of functions (and docs/coverage.md's counts) must be
    what a process without dynamo gets."""
    code = (
        "import sys; from tensortools import coverage; "
        "print(len(coverage.overridable_functions()), 'torch._dynamo' in sys.modules)"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, dynamo = fresh.stdout.split()
    assert dynamo == "False"
    import torch._dynamo  # noqa: F401  (its import wraps torch.manual_seed)

    assert len(coverage.overridable_functions()) == int(count)
