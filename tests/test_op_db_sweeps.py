"""Sweeps over PyTorch's operator database: the sample inputs PyTorch tests itself with.

Sampling: the first 2 CPU samples of each op_db entry supporting float32. The full tier
(--full) takes every entry (about 1250 calls per wrapper type and 250 square-matrix calls
for ScalarTensor, 15-70 s a type on the 2-core CI machine); the default tier a seeded
quarter of the entries, part of the draw every op_db sweep shares (tests/_support/tiers.py).
"""

import pytest
from _support import tiers

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, coverage

pytest.importorskip("expecttest", reason="op_db needs the expecttest package")

pytestmark = pytest.mark.slow


def _sample_counts(cls, minimum):
    rep = coverage.report(cls, max_samples=2, ops=tiers.op_db_names(4))
    counts = rep.counts()
    run = sum(counts[f"samples {r}"] for r in coverage.SAMPLE_RESULTS)
    names = [f.name for f in rep.functions]
    assert len(names) == len(set(names)), "a function has two rows"  # polygamma's 5 entries
    # (a quarter of op_db's names holds a quarter of its samples on average, but not in
    # every draw: over 2,000 seeds the quarter ran as few as 0.14x of ScalarTensor's
    # whole run, whose samples sit in few functions; the default tier's floor is an
    # eighth of the full one, which says the sweep ran, not how lucky the draw was)
    scale = 1 if tiers.full() else 8
    assert run > minimum // scale, (run, tiers.describe())
    return rep, counts, run


@pytest.mark.parametrize("cls", [MetadataTensor, LoggingTensor], ids=lambda c: c.__name__)
def test_wrapper_types_are_identical_to_plain_tensors(cls):
    rep, counts, run = _sample_counts(cls, 1000)
    assert counts["samples correct"] / run >= 0.99, rep.to_text()
    # what is not identical is a clear refusal, never a wrong value
    assert counts["samples wrong"] == 0 and counts["samples error"] == 0, rep.to_text()


def test_scalar_tensor_is_never_wrong():
    rep, counts, run = _sample_counts(ScalarTensor, 200)
    assert counts["samples wrong"] == 0 and counts["samples error"] == 0, rep.to_text()
