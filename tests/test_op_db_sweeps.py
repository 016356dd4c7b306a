"""Sweeps over PyTorch's operator database: the sample inputs PyTorch tests itself with.

Sampling: for each op_db entry supporting float32, its first 2 CPU samples (about 1250
calls per wrapper type and 250 square-matrix calls for ScalarTensor); each type's sweep
takes about 15 s on the 2-core CI machine.
"""

import pytest

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, coverage

pytest.importorskip("expecttest", reason="op_db needs the expecttest package")

pytestmark = pytest.mark.slow


def _sample_counts(cls):
    rep = coverage.report(cls, max_samples=2)
    counts = rep.counts()
    run = sum(counts[f"samples {r}"] for r in coverage.SAMPLE_RESULTS)
    names = [f.name for f in rep.functions]
    assert len(names) == len(set(names)), "a function has two rows"  # polygamma's 5 entries
    return rep, counts, run


@pytest.mark.parametrize("cls", [MetadataTensor, LoggingTensor], ids=lambda c: c.__name__)
def test_wrapper_types_are_identical_to_plain_tensors(cls):
    rep, counts, run = _sample_counts(cls)
    assert run > 1000
    assert counts["samples correct"] / run >= 0.99, rep.to_text()
    # what is not identical is a clear refusal, never a wrong value
    assert counts["samples wrong"] == 0 and counts["samples error"] == 0, rep.to_text()


def test_scalar_tensor_is_never_wrong():
    rep, counts, run = _sample_counts(ScalarTensor)
    assert run > 200
    assert counts["samples wrong"] == 0 and counts["samples error"] == 0, rep.to_text()
