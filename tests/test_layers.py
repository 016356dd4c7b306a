"""The layers of tensortools (docs/design.md, "Layers"): each part of the package imports
only the parts below it, wherever an import stands (in a function too), so the types never
reach the tools, the dispatch core never reaches the operators or the types, and the
testing kit and the coverage report do not import each other both ways."""

import pathlib

import pytest
from _support.packages import assert_no_cycle, import_graph

import tensortools

ROOT = pathlib.Path(tensortools.__file__).parent

#: Each part of the package: the module names it holds (a name stands for the module and
#: the modules under it).
PARTS = {
    "leaves": (
        "tensortools._C",
        "tensortools._compiler",
        "tensortools._extension",
        "tensortools._native",
        "tensortools._optional",
        "tensortools._progress",
        "tensortools._settings",
    ),
    "dispatch": ("tensortools.dispatch",),
    "ops": ("tensortools.ops",),
    "reference": ("tensortools.reference",),
    "hooks": ("tensortools._spec", "tensortools._samples"),
    "types": ("tensortools.types",),
    "nn": ("tensortools.nn",),
    "runtime": ("tensortools", "tensortools.distributed"),
    "testing": ("tensortools.testing",),
    "coverage": ("tensortools.coverage",),
    "bench": ("tensortools.bench",),
    "demo": ("tensortools.demo",),
}

#: The parts each part may import, besides itself: the layers, bottom up.
MAY_IMPORT = {
    "leaves": set(),
    "dispatch": {"leaves"},
    "ops": {"leaves", "dispatch"},
    "reference": set(),
    # what the types register for the tools, and the tools share (over the dispatch core)
    "hooks": {"leaves", "dispatch"},
    "types": {"leaves", "dispatch", "ops", "hooks"},
    "nn": {"leaves", "ops"},
    "runtime": {"leaves", "dispatch", "ops", "reference", "types", "nn"},
    # (overhead_report times calls as the benchmarks do: bench imports no tool)
    "testing": {"leaves", "dispatch", "ops", "reference", "hooks", "types", "nn", "runtime"}
    | {"bench"},
    # the coverage command's --check runs the testing kit: coverage sits above testing
    "coverage": {"leaves", "dispatch", "ops", "hooks", "types", "nn", "runtime", "testing"},
    "bench": {"leaves", "dispatch", "ops", "reference", "types", "nn", "runtime"},
    # the tour of the package shows every part
    "demo": {"leaves", "dispatch", "ops", "reference", "types", "nn", "runtime"}
    | {"testing", "coverage", "bench"},
}

GRAPH = import_graph(ROOT)


def part_of(module: str) -> str:
    """The part holding `module`: the one naming the longest prefix of it."""
    best = max(
        (
            name
            for names in PARTS.values()
            for name in names
            if module == name or module.startswith(name + ".")
        ),
        key=len,
        default=None,
    )
    assert best is not None, f"{module} belongs to no part of PARTS: place it in a layer"
    return next(part for part, names in PARTS.items() if best in names)


def test_every_module_is_in_a_part():
    for module in GRAPH:
        part_of(module)
    assert set(MAY_IMPORT) == set(PARTS)


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_imports_only_the_parts_below_it(part):
    crossings = [
        f"{module} imports {target} ({part_of(target)})"
        for module, targets in sorted(GRAPH.items())
        if part_of(module) == part
        for target in sorted(targets)
        if part_of(target) not in MAY_IMPORT[part] | {part}
    ]
    assert not crossings, "\n".join(crossings)


def test_the_layers_have_no_cycle():
    # (what MAY_IMPORT allows is itself one way: a topological order of the parts exists)
    assert_no_cycle(MAY_IMPORT, "the allowed imports go round")


def test_the_rules_are_those_the_issue_names():
    # The rules a reader looks for, spelled out (MAY_IMPORT states them all).
    tools = {"testing", "coverage", "bench", "demo"}
    assert not MAY_IMPORT["types"] & tools
    assert not MAY_IMPORT["dispatch"] & {"ops", "types", "nn"}
    assert "coverage" not in MAY_IMPORT["testing"]
    assert not {"testing", "coverage"} & MAY_IMPORT["bench"]


def test_the_checker_sees_an_import_inside_a_function(tmp_path):
    # (a sweep that would fail on the layering before: coverage.cli imported the testing
    # kit inside main(), and the testing kit imported coverage.samples)
    pkg = tmp_path / "tensortools"
    (pkg / "coverage").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "coverage" / "__init__.py").write_text("")
    (pkg / "coverage" / "cli.py").write_text("def main():\n    from tensortools import testing\n")
    (pkg / "testing.py").write_text("from tensortools.coverage.samples import op_db\n")
    graph = import_graph(pkg)
    assert graph["tensortools.coverage.cli"] == {"tensortools.testing"}
    assert graph["tensortools.testing"] == {"tensortools.coverage.samples"}


def test_the_cycle_check_names_the_cycle():
    assert_no_cycle({"types": {"dispatch"}, "dispatch": set()}, "layers")
    with pytest.raises(
        AssertionError, match="layers: .*types.*dispatch.*types|layers: .*dispatch.*types.*dispatch"
    ):
        assert_no_cycle({"types": {"dispatch"}, "dispatch": {"types"}}, "layers")
