"""The documentation stays true: every code example of README.md and docs/ runs, and the
API reference builds from the docstrings without a warning.

Python blocks run in order, one namespace per file (a block may use what an earlier block
of its file defined); a block of ``>>>`` lines is a doctest whose printed output must
match. Bash blocks run with ``bash -euo pipefail`` from the repository root, ``python``
being this interpreter. A block that cannot run here (it builds, installs, needs a GPU or
takes minutes) is preceded by ``<!-- skip: next "why" -->``, and the reason is reported.
"""

from __future__ import annotations

import doctest
import logging
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

import pytest

from tensortools import (
    MetadataTensor,
    ScalarTensor,
    bench,
    coverage,
    dispatch,
    distributed,
    nn,
    ops,
    reference,
    testing,
    types,
)
from tensortools.types.logging_tensor import LOGGER_NAME

pytestmark = pytest.mark.slow  # runs every code example and builds the API reference

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Fenced blocks must say what they hold: code that runs (python, bash) or text that does
# not (diagrams, maths, program output).
LANGUAGES = {"python", "bash", "text"}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module")
def python_on_path(tmp_path_factory) -> str:
    """A PATH whose ``python`` is this interpreter (the docs write ``python -m ...``)."""
    bindir = tmp_path_factory.mktemp("bin")
    # A script, not a symlink: a virtual environment's python finds its packages through
    # the path it was started by.
    (bindir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bindir / "python").chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
def restore_settings():
    """Examples may change process-wide settings; later tests get the defaults back."""
    policy = ScalarTensor.set_policy("fallback")
    ScalarTensor.set_policy(policy)
    merge = MetadataTensor.set_merge_policy("first")
    MetadataTensor.set_merge_policy(merge)
    tracking = MetadataTensor.set_tracking(True)
    logger = logging.getLogger(LOGGER_NAME)
    level, handlers = logger.level, list(logger.handlers)
    yield
    ScalarTensor.set_policy(policy)
    MetadataTensor.set_merge_policy(merge)
    MetadataTensor.set_tracking(tracking)
    logger.setLevel(level)
    logger.handlers[:] = handlers


def _parse(path: Path, path_env: str):
    sybil = pytest.importorskip("sybil", reason="the docs' examples need sybil")
    from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

    def run_bash(example) -> None:
        env = dict(os.environ, PATH=path_env)
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", example.parsed],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"exit {result.returncode}\n{example.parsed}\n"
                f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )

    parsers = [
        PythonCodeBlockParser(doctest_optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE),
        CodeBlockParser(language="bash", evaluator=run_bash),
        SkipParser(),
    ]
    return sybil.Sybil(parsers=parsers).parse(path)


def _fences(path: Path) -> list[tuple[str, int, int]]:
    """(language, first line, last line) of each fenced block, lines counted from 1."""
    marks = [
        (number, line.strip()[3:].strip())
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.lstrip().startswith("```")
    ]
    assert len(marks) % 2 == 0, f"{_relative(path)}: unbalanced ``` fences"
    return [(language, start, end) for (start, language), (end, _) in zip(marks[::2], marks[1::2])]


@pytest.mark.parametrize("path", DOCUMENTS, ids=_relative)
def test_code_examples_run(path, python_on_path, restore_settings, summary_note):
    seen, skipped = [], []
    for example in _parse(path, python_on_path):
        seen.append(example.line)
        try:
            example.evaluate()
        except pytest.skip.Exception as why:  # pytest.skip() in a block: not a doc skip
            failure = f"{_relative(path)}, example at line {example.line} called skip: {why}"
            break
        except unittest.SkipTest as why:
            skipped.append(f"line {example.line}: {why}")
        except Exception as error:  # noqa: BLE001 (reported below, without the chain)
            failure = f"{_relative(path)}, example at line {example.line} failed:\n{error}"
            break
    else:
        failure = None
    if failure:
        pytest.fail(failure, pytrace=False)
    # Every code block was found (and run, or skipped with a reason).
    missed = [
        start
        for language, start, end in _fences(path)
        if language in ("python", "bash") and not any(start <= n <= end for n in seen)
    ]
    assert not missed, f"{_relative(path)}: code blocks at lines {missed} were not run"
    for why in skipped:
        summary_note(f"{_relative(path)}, example not run: {why}")


@pytest.mark.parametrize("path", DOCUMENTS, ids=_relative)
def test_fences_are_labelled(path):
    # A fence with no language (or a spelling such as "py") would never run.
    unknown = [
        f"line {start}: {language!r}"
        for language, start, _ in _fences(path)
        if language not in LANGUAGES
    ]
    assert not unknown, f"{_relative(path)}: fences {unknown}; use one of {sorted(LANGUAGES)}"
    # A block left out of the test run says why, in a string (sybil evaluates the reason:
    # anything else could evaluate to false and run the block, or fail obscurely).
    directives = re.findall(r"<!--\s*skip:.*?-->", path.read_text())
    unclear = [d for d in directives if not re.fullmatch(r'<!-- skip: next "[^"]+" -->', d)]
    assert not unclear, f'{_relative(path)}: use <!-- skip: next "why" -->, not {unclear}'


def test_every_document_is_reachable_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text()
    linked = {
        (ROOT / "docs" / target).resolve() for target in re.findall(r"\]\(([^)#]+\.md)\)", index)
    }
    orphans = [
        _relative(p) for p in DOCUMENTS[1:] if p.name != "index.md" and p.resolve() not in linked
    ]
    assert not orphans, f"docs/index.md links none of {orphans}"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    anchors, inside = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and re.match(r"#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("path", DOCUMENTS, ids=_relative)
def test_links_and_anchors_resolve(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{_relative(path)}: links that lead nowhere: {broken}"


def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="the API reference needs sphinx")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(ROOT / "docs" / "api"),
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    html = "".join(p.read_text() for p in tmp_path.glob("*.html"))
    # Every public name has an entry.
    modules = [
        bench,
        coverage,
        dispatch,
        testing,
        distributed,
        nn,
        ops,
        reference,
        types.scalar,
        types.metadata,
        types.logging_tensor,
    ]
    missing = [
        f"{m.__name__}.{name}"
        for m in modules
        for name in m.__all__
        if f'id="{m.__name__}.{name}"' not in html
    ]
    missing += [
        f"tensortools.{name}" for name in ("with_cuda",) if f'id="tensortools.{name}"' not in html
    ]
    assert not missing, f"not in the API reference: {missing}"


def test_docs_write_no_count_of_the_suites_tests():
    # A number that describes the project drifts unless a test checks it; the size of the
    # suite changes with every feature, so the docs do not write it (pytest prints it).
    for path in DOCUMENTS:
        counts = re.findall(r"\b\d[\d,]*\+? (?:tests|test cases)\b", path.read_text())
        assert not counts, f"{_relative(path)} states the suite's size: {counts}"


def _notes_referred_to(text: str) -> set[str]:
    """The names in the ``See Note [name]`` comments of a source file, also where the
    comment breaks a line inside the pointer."""
    lines = [re.sub(r"^\s*(#|//|\*)?\s?", "", line) for line in text.splitlines()]
    return set(re.findall(r"[Ss]ee Note \[([^\]]+)\]", re.sub(r"\s+", " ", " ".join(lines))))


def test_every_note_a_comment_points_to_is_in_the_design_notes():
    notes = set(re.findall(r"^### Note \[(.+)\]$", (ROOT / "docs/design.md").read_text(), re.M))
    sources = [*(ROOT / "tensortools").rglob("*.py"), *(ROOT / "csrc").rglob("*.[ch]*")]
    pointed = {p.relative_to(ROOT).as_posix(): _notes_referred_to(p.read_text()) for p in sources}
    missing = {path: names - notes for path, names in pointed.items() if names - notes}
    assert not missing, f"comments point to notes docs/design.md lacks: {missing}"
    # every note is pointed to from the code it explains
    assert notes == set().union(*pointed.values()), notes - set().union(*pointed.values())


def test_every_operator_is_in_each_table_of_its_page_and_in_the_readme():
    # (the operators' page has a table of them, a section each, and the tables of
    # torch.func and autocast support; a new operator missing from one is stale docs)
    text = (ROOT / "docs/operators.md").read_text()

    def section(title: str) -> str:
        start = text.index(f"\n## {title}\n")
        end = text.find("\n## ", start + 1)
        return text[start : end if end > 0 else None]

    headings = [line for line in text.splitlines() if line.startswith("## ")]
    places = {
        "the table of operators": text[: text.index("\n## ")],
        "the torch.func table": section("torch.func"),
        "the autocast table": section("Autocast"),
    }
    readme = (ROOT / "README.md").read_text()
    for name in ops.__all__:
        assert any(f"`tensortools.ops.{name}(" in h for h in headings), f"{name}: no section"
        for place, part in places.items():
            assert re.search(rf"`{name}[`(\s]", part), f"{name} missing from {place}"
        assert f"ops.{name}`" in readme, f"{name} missing from README.md's list"
