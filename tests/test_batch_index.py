"""Every index form torch accepts, on MetadataTensor batches
(tensortools/types/metadata/batch_index.py and the indexing rule of
tensortools/types/metadata/batch.py): row by row, each row's label is the sample whose
values it holds, against plain torch's indexing of the same data.

Sample s holds the values 100 * s + k (k < 100), so that a row's values say which sample
they come from. A result that is a batch labels each row; one sample's result holds only
that sample's values and its metadata; any other result is one tensor with the batch's
metadata whole. Where torch raises, so must the batch, with the same kind of error.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from tensortools import MetadataTensor, decollate

N = 5


def plain(t):
    return t.as_subclass(torch.Tensor)


def samples(n: int = N, shape=(3, 4)) -> list[MetadataTensor]:
    """Sample s: values 100 * s + k, metadata {"id": s, "name": "s<s>"}."""
    k = torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape)
    return [MetadataTensor(100 * s + k, {"id": s, "name": f"s{s}"}) for s in range(n)]


def steps(t: int = 3, b: int = 2) -> MetadataTensor:
    """A stack of `t` batches of `b` samples each (a batch of steps): step i holds the
    values 100 * i + k, its batch the ids i * 10 + j."""
    batches = []
    for i in range(t):
        items = [
            MetadataTensor(100 * i + 10 * j + torch.arange(3), {"id": i * 10 + j, "step": i})
            for j in range(b)
        ]
        batches.append(torch.stack(items))
    return torch.stack(batches)


BATCHES = {
    "stack": lambda: torch.stack(samples()),
    "collate": lambda: default_collate(samples()),
    "cat": lambda: torch.cat([torch.stack(samples()[:2]), default_collate(samples()[2:])]),
    "1-D": lambda: torch.stack(samples(shape=())),
    "steps": steps,
}


def label(entry, where):
    """The sample an entry of the metadata names: its id (a step's: its number)."""
    if isinstance(entry, dict):
        return label(entry["step"] if "step" in entry else entry["id"], where)
    if isinstance(entry, list):  # (a step's entries, one per sample of its batch)
        assert len(set(entry)) == 1, (where, entry)
        return entry[0]
    return entry


def check_result(got, want, batch, where):
    """got (the batch's result) against want (plain torch's): the same values, and each
    row labelled with the sample its values come from."""
    assert type(got) is MetadataTensor, where
    assert torch.equal(plain(got), want), where
    size = batch.batch_size
    whole = batch.metadata
    key = "step" if "step" in whole else "id"
    if got.batch_size is not None:
        assert got.batch_size == want.shape[0] == len(got.metadata[key]), where
        for r, entry in enumerate(got.metadata[key]):
            s = label(entry, where)
            assert bool((want[r] // 100 == s).all()), (where, r, s, want[r])
            # (each key's entry is the same sample's)
            assert got.metadata["id"][r] == whole["id"][_position(whole, key, s)], where
    elif _is_one(got.metadata, whole, key):
        s = label(got.metadata[key], where)
        assert bool((want // 100 == s).all()), (where, s)
    else:
        assert got.metadata == whole, (where, got.metadata)
    assert size == batch.batch_size  # (the batch itself is left as it was)


def _position(whole, key, s):
    return [label(e, "") for e in whole[key]].index(s)


def _is_one(metadata, whole, key):
    """Whether metadata is one sample's (of the batch whose metadata is `whole`)."""
    entries = whole[key]
    return metadata[key] in entries and metadata[key] != entries


def index_forms(b) -> list:
    """(name, index) of every form torch takes, for batch b of n samples."""
    n = b.shape[0]
    t = torch.tensor
    bools = [i % 2 == 0 for i in range(n)]
    picks = [n - 1, 0, n - 1]
    forms = [
        ("int 0", 0),
        ("int -1", -1),
        ("int n-1", n - 1),
        ("np.int64", np.int64(1)),
        ("np.int32 negative", np.int32(-2)),
        ("np 0-d int array", np.array(1)),
        ("0-d tensor", t(1)),
        ("0-d int32 tensor", t(-1, dtype=torch.int32)),
        ("slice 1:", slice(1, None)),
        ("slice ::2", slice(None, None, 2)),
        ("slice -2:", slice(-2, None)),
        ("slice -3:-1", slice(-3, -1)),
        ("slice 1::3", slice(1, None, 3)),
        ("slice :0", slice(None, 0)),
        ("slice past the end", slice(2, 99)),
        ("slice ::-1 (torch refuses)", slice(None, None, -1)),
        ("list", picks),
        ("list negative", [-1, -n]),
        ("empty list", []),
        ("np.array", np.array(picks)),
        ("np.array int32", np.array([1, 0], dtype=np.int32)),
        ("range", range(2)),
        ("range backwards", range(n - 1, 0, -1)),
        ("tensor of indices", t(picks)),
        ("tensor negative", t([-1, 0])),
        ("empty tensor", t([], dtype=torch.int64)),
        ("2-D tensor", t([[0, 1], [1, 0]])),
        ("2-D np.array", np.array([[0, 1], [1, 0]])),
        ("bool tensor mask", t(bools)),
        ("uint8 mask", t(bools, dtype=torch.uint8)),
        ("NumPy bool mask", np.array(bools)),
        ("list of bools", bools),
        ("mask of none", t([False] * n)),
        ("mask of all", t([True] * n)),
        ("mask over two dims", plain(b) % 3 == 0 if b.dim() > 1 else t(bools)),
        ("mask from the batch", _row_sums(b) > _row_sums(b).median()),
        ("mask from the batch, all", _row_sums(b) > -1),
        ("mask from the batch, none", _row_sums(b) < -1),
        ("argsort of the batch", _row_sums(b).argsort(descending=True)),
        ("()", ()),
        ("...", ...),
        ("None", None),
        ("True", True),
        ("False", False),
        ("0-d bool tensor", t(True)),
        ("(None, 1)", (None, 1)),
        ("(1, None)", (1, None)),
        ("(None, ...)", (None, ...)),
        ("(..., None)", (..., None)),
        ("(np.int64, ...)", (np.int64(2), ...)),
        ("(None, slice)", (None, slice(1, 3))),
        ("(tensor, slice)", (t(picks), slice(None))),
        ("(list, ...)", ([0, 2], ...)),
        ("(mask, ...)", (t(bools), ...)),
        ("(np mask, ...)", (np.array(bools), ...)),
        ("(range, ...)", (range(1, 3), ...)),
    ]
    if b.dim() > 1:
        forms += [
            ("(int, int)", (1, 0)),
            ("(np.int64, np.int64)", (np.int64(-1), np.int64(1))),
            ("(slice, int)", (slice(None), 1)),
            ("(slice, np.int64)", (slice(1, None), np.int64(0))),
            ("(..., int)", (..., 1)),
            ("(..., tensor)", (..., t([0, 2]))),
            ("(tensor, int)", (t([0, n - 1]), 1)),
            ("(tensor, tensor)", (t([0, n - 1]), t([1, 0]))),
            ("(np.array, np.array)", (np.array([0, n - 1]), np.array([1, 0]))),
            ("(tensor, tensor) broadcast", (t([[0], [n - 1]]), t([1, 0]))),
            ("(slice, tensor)", (slice(None), t([0, 1]))),
            ("(int, tensor)", (1, t([0, 1]))),
            ("(None, slice, tensor)", (None, slice(None), t([0, 1]))),
            ("(mask, int)", (t(bools), 0)),
            ("(mask, tensor)", (t(bools), t([0] * sum(bools)))),
            ("(slice, True)", (slice(None), True)),
            ("(slice, 0-d bool)", (slice(None), t(True))),
            ("(slice, None, int)", (slice(None), None, 1)),
            ("list read as a tuple", [[0, n - 1], [0, 1]]),
            ("list of a slice", [slice(1, None), 0]),
        ]
    if b.dim() > 2:
        forms += [
            ("(tensor, slice, tensor)", (t([0, n - 1]), slice(None), t([1, 2]))),
            ("(..., tensor, slice)", (..., t([0, 1]), slice(None))),
            ("(int, ..., int)", (2, ..., 1)),
        ]
    return forms


def _row_sums(b):
    return b.flatten(1).sum(1) if b.dim() > 1 else b


@pytest.mark.parametrize("policy", ["first", "union"])  # (the compiled path; the Python one)
@pytest.mark.parametrize("maker", sorted(BATCHES))
def test_every_index_form_labels_each_row_with_its_sample(maker, policy):
    failures = []
    with MetadataTensor.using_merge_policy(policy):
        b = BATCHES[maker]()
        forms = index_forms(b)
        for name, index in forms:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (a list read as a tuple, byte masks)
                try:
                    want = plain(b)[index]
                except (IndexError, ValueError, TypeError) as err:
                    want = err
                try:
                    got = b[index]
                except Exception as err:  # noqa: BLE001 - compared with torch's below
                    got = err
            if isinstance(want, Exception) or isinstance(got, Exception):
                if type(got) is not type(want):
                    failures.append(f"{name}: {got!r} where torch gives {want!r}")
                continue
            try:
                check_result(got, want, b, name)
            except AssertionError as err:
                failures.append(f"{name}: {err}")
    assert len(forms) > 50
    assert not failures, f"{maker}, {policy}:\n" + "\n".join(failures)


@pytest.mark.parametrize("maker", sorted(BATCHES))
def test_unbind_iteration_and_decollate_give_each_sample(maker):
    b = BATCHES[maker]()
    want = plain(b).unbind(0)
    for name, pieces in [
        ("unbind", b.unbind(0)),
        ("torch.unbind", torch.unbind(b)),
        ("iteration", list(b)),
        ("decollate", decollate(b)),
        ("select", [b.select(0, i) for i in range(b.shape[0])]),
        ("split(1)", [p[0] for p in b.split(1)]),
    ]:
        assert len(pieces) == len(want), name
        for piece, w in zip(pieces, want):
            check_result(piece, w, b, name)


def test_a_stack_of_batches_is_a_batch_of_steps():
    """torch.stack of batches along dim 0: a batch whose samples are the steps; one step
    is one tensor holding its batch's metadata, which setting its batch_size makes the
    batch again; every index form agrees (the sweep above)."""
    s = steps(3, 2)
    assert s.batch_size == 3 and s.shape == (3, 2, 3)
    assert s.metadata["id"] == [[0, 1], [10, 11], [20, 21]]
    last = s[-1]
    assert last.batch_size is None and last.metadata == {"id": [20, 21], "step": [2, 2]}
    last.batch_size = 2
    assert [x.metadata["id"] for x in last] == [20, 21]
    assert s[1:].metadata["id"] == [[10, 11], [20, 21]] and s[1:].batch_size == 2
    # along dim 1, each row one sample's steps: the batch, where every step holds the same
    # samples; rows that would hold several batches' samples are not a batch
    b = torch.stack(samples(2))
    by_sample = torch.stack([b, b * 2], 1)
    assert by_sample.batch_size == 2 and by_sample[1].metadata == {"id": 1, "name": "s1"}
    mixed = torch.stack([b, torch.stack(samples(3)[1:])], 1)
    assert mixed.batch_size is None and mixed.metadata == b.metadata
    # a stack mixing batches and tensors that are not batches is refused by name
    for items in ([b, plain(b)], [b, MetadataTensor(plain(b), {"id": 0, "name": "x"})]):
        with pytest.raises(ValueError, match="sample 1 is not a batch, sample 0 is a batch"):
            torch.stack(items)


def test_cat_onto_an_empty_tensor_joins_the_samples():
    """The accumulator idiom: an empty tensor that is not a batch adds no samples."""
    b = torch.stack(samples(3))
    for start in (torch.empty(0, 3, 4, dtype=torch.int64), torch.empty(0, dtype=torch.int64)):
        acc = torch.cat([start, b])
        assert acc.batch_size == 3 and acc.metadata == b.metadata
        acc = torch.cat([acc, b[1:]])
        assert acc.batch_size == 5 and acc.metadata["id"] == [0, 1, 2, 1, 2]
        for piece, w in zip(acc, plain(acc)):
            check_result(piece, w, acc, "accumulated")
    with pytest.raises(ValueError, match="tensor 1 is not a batch"):
        torch.cat([b, torch.zeros(1, 3, 4, dtype=torch.int64)])


def test_aminmax_over_another_dim_keeps_the_batch_as_amax_does():
    b = torch.stack(samples())
    for got in (*torch.aminmax(b, dim=1), *b.aminmax(dim=-1, keepdim=True), b.amax(1)):
        assert got.batch_size == N and got.metadata == b.metadata
    assert torch.aminmax(b).min.batch_size is None  # (over every dim)
