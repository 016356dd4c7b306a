"""The ``batches`` check of tensortools.testing: asked for by name only; MetadataTensor
passes it; types whose batches lose their samples' state (an index that reorders rows
but keeps the old labels, a ``torch.cat`` that gives every row the first batch's labels,
a type with no batch semantics at all) are caught at the index form that loses it; and
MONAI's ``MetaTensor`` (optional; skipped without it) shows what its batches lose, each
kind confirmed by hand."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from torch.utils.data import default_collate
from torch.utils.data._utils.collate import default_collate_fn_map

from tensortools import MetadataTensor, testing
from tensortools.testing.batches import N_SAMPLES, batch_samples

#: The index forms the check applies to every batch, as its failures name them.
FORMS = {
    "b[1]",
    "b[-1]",
    "b[-3:-1]",
    "b[[2, 0, 2]]",
    "b[torch.tensor([n-1, 0])]",
    "b[bool mask]",
    "b.unbind(0)",
    "for row in b",
    "torch.save/torch.load",
}
REORDERING = {"b[[2, 0, 2]]", "b[torch.tensor([n-1, 0])]", "b[bool mask]"}
#: The batches the check takes apart, as its failures label them.
COLLATED = "collate_fn(samples 0-5)"
LOADED = "DataLoader batch 2 (samples 3-5)"
JOINED = "torch.cat(DataLoader batches 2, 1)"
#: The label of the check's calls with a type that overrides nothing.
UNKNOWN = "with a Tensor subclass that overrides nothing"


def labelled(cls=MetadataTensor):
    """make: each of the check's samples labelled by its first value (the samples hold
    distinct values), so that a row with another sample's label is seen."""
    return lambda t: cls(t, {"id": int(t.flatten()[0])})


def failures(spec, make=None, **options):
    report = testing.check_type(spec, make, checks=["batches"], raise_on_failure=False, **options)
    return {(f.function, f.sample) for f in report.failures}, report


def test_batches_is_run_only_when_named():
    assert "batches" in testing.CHECKS and "batches" not in testing.DEFAULT_CHECKS
    assert set(testing.CHECKS) - set(testing.DEFAULT_CHECKS) == set(testing.ON_REQUEST)
    # (checks=None: the registry's default checks, the kit's own where no user added one)
    assert inspect.signature(testing.check_type).parameters["checks"].default is None
    assert testing.default_checks() == testing.DEFAULT_CHECKS


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_metadata_tensor_passes(dtype):
    report = testing.check_type(
        MetadataTensor, labelled(), checks=["batches"], dtypes=(dtype,), ops=["exp"]
    )
    assert report.passed and report.checks == ("batches",)
    assert report.samples == 0  # (alone, the check runs no op_db sample)
    # the state named by a function: the metadata, and that a row is not a batch
    state = lambda x: (x.metadata, x.batch_size)  # noqa: E731
    spec = testing.TypeSpec(MetadataTensor, make=labelled(), sample_state=state)
    assert testing.check_type(spec, checks=["batches"])


def test_the_samples_differ_by_values():
    plains = batch_samples()
    values = torch.stack(plains).flatten().tolist()
    assert len(plains) == N_SAMPLES and len(set(values)) == len(values)
    assert all(t.shape == plains[0].shape for t in plains)


class ReorderKeepsLabels(MetadataTensor):
    """Indexing by a list, a tensor or a mask picks the rows, but leaves the labels in
    the batch's order (the first n of them)."""

    def __getitem__(self, index):
        out = super().__getitem__(index)
        if self.is_batch and not isinstance(index, (int, slice)) and out.is_batch:
            out.metadata = {k: v[: out.batch_size] for k, v in self.metadata.items()}
        return out


class CatKeepsFirstLabels(MetadataTensor):
    """torch.cat of batches gives every batch the first one's labels."""


@CatKeepsFirstLabels.implements(torch.cat)
def _cat_keeps_first_labels(tensors, dim=0):
    with torch._C.DisableTorchFunctionSubclass():
        data = torch.cat([torch.Tensor(t) for t in tensors], dim)
    first = tensors[0].metadata
    labels = {k: list(v) * len(tensors) for k, v in first.items()}
    return CatKeepsFirstLabels.wrap_batch(data, labels, data.shape[0])


class Tagged(torch.Tensor):
    """A tensor with a tag and no batch semantics: torch.stack (hence default_collate)
    gives a Tagged without one."""


def tagged(t):
    x = t.as_subclass(Tagged)
    x.tag = int(t.flatten()[0])
    return x


def test_reordering_that_keeps_the_labels_is_caught():
    found, report = failures(ReorderKeepsLabels, labelled(ReorderKeepsLabels))
    # each reordering form, on each batch: and nothing else
    assert found == {(form, batch) for form in REORDERING for batch in (COLLATED, LOADED, JOINED)}
    example = next(f for f in report.failures if f.function == "b[[2, 0, 2]]")
    assert (
        example.reason
        == "row 0 (sample 2): attribute 'metadata'['id'] is 0 instead of the sample's 12"
    )


def test_cat_that_drops_the_labels_is_caught():
    found, report = failures(
        testing.TypeSpec(
            CatKeepsFirstLabels,
            make=labelled(CatKeepsFirstLabels),
            safe_globals=[CatKeepsFirstLabels],
        )
    )
    # every form that reaches the joined batch's rows from the second batch (rows 3-5);
    # (with a type that declines every call, the dispatch base gives that type the call
    # before any handler: torch's TypeError, as for a plain batch)
    assert found == {(form, JOINED) for form in FORMS - {"b[1]", "b[[2, 0, 2]]"}}
    example = next(f for f in report.failures if f.function == "b[-1]")
    assert (
        example.reason == "(sample 2): attribute 'metadata'['id'] is 30 instead of the sample's 12"
    )


class AnswersForOthers(MetadataTensor):
    """Takes a call another overriding type takes part in for its own (its batch rules
    answer where the other type should have a say)."""

    @classmethod
    def others_take_part(cls, types):
        return False


def test_a_batch_that_answers_for_another_type_is_caught():
    found, report = failures(AnswersForOthers, labelled(AnswersForOthers))
    # (index_select's rule reads the index, which the other type declines: a TypeError)
    answered = {"torch.cat([b, u])", "torch.cat([u, b])", "b[u]"}
    assert found == {(name, UNKNOWN) for name in answered}, report.summary()
    reasons = {f.function: f.reason for f in report.failures}
    assert reasons["torch.cat([b, u])"].startswith("raised ValueError where plain torch")
    assert reasons["b[u]"].startswith("returned a AnswersForOthers where plain torch")
    # MetadataTensor leaves such calls to the other type: torch's TypeError
    found, _ = failures(MetadataTensor, labelled())
    assert not found


def test_a_type_without_batch_semantics_fails():
    found, report = failures(Tagged, tagged)
    assert found == {(form, b) for form in FORMS for b in (COLLATED, LOADED, JOINED)}
    assert all("attribute 'tag' missing" in f.reason for f in report.failures)


def test_samples_of_one_state_fail():
    # (a row with another sample's state would pass: the run says so instead)
    found, report = failures(MetadataTensor, lambda t: MetadataTensor(t, {"unit": "m"}))
    assert ("make", "6 samples torch.float32 (2, 3)") in found
    assert "make gave samples 0 and 1 the same attributes" in report.failures[0].reason


@pytest.mark.parametrize("how", ["Unsupported", "None"])
@pytest.mark.parametrize("which", [0, 3, 5])
def test_a_sample_the_type_cannot_take_is_declined_not_failed(how, which):
    def make(t):
        if int(t.flatten()[0]) == 6 * which:  # (sample k holds 6k .. 6k + 5)
            if how == "None":
                return None
            raise testing.Unsupported("not this one")
        return labelled()(t)

    found, report = failures(MetadataTensor, make)
    assert not found, report.summary()
    assert report.passed and len(report.declined) == 1
    assert report.declined[0].check == "make"


def test_a_make_that_raises_fails_make():
    def make(t):
        raise ValueError("broken")

    report = testing.check_type(
        MetadataTensor, make, checks=["batches"], raise_on_failure=False, progress=False
    )
    assert [(f.check, f.reason) for f in report.failures] == [
        ("make", "make raised ValueError: broken")
    ]


@pytest.mark.parametrize("name", ["sample_state", "collate_fn"])
def test_hooks_must_be_callable(name):
    with pytest.raises(TypeError, match=f"'{name}' must be callable"):
        testing.check_type(
            testing.TypeSpec(MetadataTensor, make=labelled(), **{name: 3}), checks=["batches"]
        )


# --- MONAI's MetaTensor ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def monai():
    monai = pytest.importorskip("monai")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MONAI's own deprecation warnings
        import monai.data
    return monai


@pytest.fixture
def fresh_collate(monai, monkeypatch):
    """torch's default_collate as a process that has not run MONAI's list_data_collate
    sees it: that call registers MetaTensor's collation with torch's table, and nothing
    before it does."""
    monkeypatch.delitem(default_collate_fn_map, monai.data.MetaTensor, raising=False)


def monai_samples(monai):
    make = labelled(lambda t, meta: monai.data.MetaTensor(t, meta=meta))
    return make, [make(t) for t in batch_samples()]


#: What MONAI 1.6.1's batches lose under its own collation (monai.data.list_data_collate),
#: each confirmed by test_monai_loses below: a list, tensor or mask index keeps the
#: batch's labels, and torch.cat keeps the first batch's alone (so the rows of the second
#: hold the first's labels under every form that reaches them).
MONAI_LOSES = {
    *((form, b) for form in REORDERING for b in (COLLATED, LOADED, JOINED)),
    *((form, JOINED) for form in FORMS - {"b[1]"}),
}


@pytest.mark.slow  # (imports MONAI)
def test_monai_metatensor_batches(monai):
    make, _ = monai_samples(monai)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found, report = failures(
            testing.TypeSpec(
                monai.data.MetaTensor, make=make, collate_fn=monai.data.list_data_collate
            )
        )
    assert found == MONAI_LOSES, report.summary()


@pytest.mark.slow  # (imports MONAI)
def test_monai_metatensor_batches_by_torch(monai, fresh_collate):
    # torch's own default_collate (so torch's DataLoader), before MONAI's collation has
    # registered itself: a batch whose meta is sample 0's, which its rows then hold
    make, _ = monai_samples(monai)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found, report = failures(monai.data.MetaTensor, make)
    assert {form for form, b in found if b == COLLATED} == FORMS, report.summary()
    reasons = [f.reason for f in report.failures if f.sample == COLLATED]
    assert all("attribute '_meta'['id'] is 0 instead of" in r for r in reasons)


def _list_index(monai, samples):
    b = monai.data.list_data_collate(samples)
    return b[[2, 0]][1], 0


def _tensor_index(monai, samples):
    b = monai.data.list_data_collate(samples)
    return b[torch.tensor([5, 0])][0], 5


def _mask_index(monai, samples):
    b = monai.data.list_data_collate(samples)
    return b[torch.tensor([True, False, True, False, False, False])][1], 2


def _cat(monai, samples):
    first, second = (monai.data.list_data_collate(samples[k : k + 3]) for k in (0, 3))
    return torch.cat([second, first])[-1], 2


def _torch_collate(monai, samples):
    # (in a process where list_data_collate has not run: see fresh_collate)
    return default_collate(samples)[1], 1


@pytest.mark.slow  # (imports MONAI)
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="MONAI 1.6.1: a MetaTensor batch's list, tensor and mask indexes keep the "
    "batch's meta, torch.cat keeps the first batch's, torch's default_collate sample 0's",
)
@pytest.mark.parametrize("lose", [_list_index, _tensor_index, _mask_index, _cat, _torch_collate])
def test_monai_loses(monai, fresh_collate, lose):
    """The row of each kind the check reports holds its sample's values (else this
    reproducer, not MONAI, is wrong: a failure, not the expected one) and another meta."""
    _, samples = monai_samples(monai)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row, k = lose(monai, samples)
    if not torch.equal(row.as_tensor(), samples[k].as_tensor()):
        pytest.fail(f"the row does not hold sample {k}'s values")
    got, want = (torch.as_tensor(x.meta["id"]) for x in (row, samples[k]))
    assert torch.equal(got, want), f"meta id {got} instead of {want}"
