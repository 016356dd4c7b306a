"""MetadataTensor batches (tensortools/types/metadata/batch.py): every way of taking a
batch apart along dim 0 gives each piece its own samples' metadata, for batches made by
default_collate, torch.stack and torch.cat; building batches keeps every sample; the
rest of a pipeline keeps the batch; bad batches are refused by name."""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

import tensortools
from tensortools import MetadataTensor, decollate
from tensortools import nn as tnn

SIZES = [1, 2, 5]


def sample_metadata(i: int) -> dict:
    """Sample i's metadata: numbers, a tuple, nested dicts and lists, a tensor."""
    return {
        "id": i,
        "spacing": (1.0, 0.5 * i),
        "nested": {"tags": [f"t{i}", i], "deep": {"name": f"s{i}"}},
        "affine": torch.eye(3, dtype=torch.float64) * (i + 1),
    }


def samples(n: int) -> list[MetadataTensor]:
    return [MetadataTensor(torch.full((2, 3), float(i)), sample_metadata(i)) for i in range(n)]


def by_collate(n):
    return default_collate(samples(n))


def by_stack(n):
    return torch.stack(samples(n))


def by_cat(n):
    items = samples(n)
    k = n // 2
    if k == 0:
        return torch.cat([torch.stack(items)])
    return torch.cat([default_collate(items[:k]), torch.stack(items[k:])])


MAKERS = {"collate": by_collate, "stack": by_stack, "cat": by_cat}


def assert_same(got, want, where="metadata"):
    """Equal values, tensors compared by value (and kind: a tensor stays a tensor)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), (where, got)
        assert torch.equal(got, want), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (where, got, want)
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (where, got, want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
    else:
        assert got == want, (where, got, want)


def batch_metadata(ids: list[int]) -> dict:
    """The metadata of the batch of samples `ids`, built by hand: a list per key; the
    tensors stacked."""
    metas = [sample_metadata(i) for i in ids]
    out = {key: [m[key] for m in metas] for key in ("id", "spacing", "nested")}
    out["affine"] = (
        torch.stack([m["affine"] for m in metas])
        if metas
        else torch.empty(0, 3, 3, dtype=torch.float64)
    )
    return out


def assert_piece(piece, ids, data):
    """piece holds samples `ids` (an int: that one sample) with the values of `data`."""
    assert type(piece) is MetadataTensor
    assert torch.equal(piece.as_subclass(torch.Tensor), data)
    if isinstance(ids, int):
        assert piece.batch_size is None and not piece.is_batch
        assert_same(piece.metadata, sample_metadata(ids))
    else:
        assert piece.batch_size == len(ids) and piece.is_batch
        assert_same(piece.metadata, batch_metadata(list(ids)))


def plain(t):
    return t.as_subclass(torch.Tensor)


def decollating_forms(b, n):
    """(name, result, samples each piece holds) of every decollating form on batch b."""
    p = plain(b)
    forms = []
    for i in range(-n, n):
        forms += [
            (f"b[{i}]", b[i], i % n, p[i]),
            (f"b[{i}, ...]", b[i, ...], i % n, p[i, ...]),
            (f"b[{i}, 1]", b[i, 1], i % n, p[i, 1]),
            (f"select(0, {i})", b.select(0, i), i % n, p.select(0, i)),
            (f"torch.select({i})", torch.select(input=b, dim=0, index=i), i % n, p[i]),
            (f"b[tensor({i})]", b[torch.tensor(i)], i % n, p[torch.tensor(i)]),
        ]
    ids = list(range(n))
    for s in (slice(1, None), slice(None, None, 2), slice(None, 0), slice(-2, None)):
        forms.append((f"b[{s}]", b[s], ids[s], p[s]))
    picks = [n - 1, 0, n - 1]
    mask = torch.tensor([i % 2 == 0 for i in range(n)])
    forms += [
        ("b[index tensor]", b[torch.tensor(picks)], picks, p[torch.tensor(picks)]),
        ("b[list]", b[picks], picks, p[picks]),
        ("b[mask]", b[mask], [i for i in ids if i % 2 == 0], p[mask]),
        ("b[index tensor, 1:]", b[torch.tensor(picks), 1:], picks, p[torch.tensor(picks), 1:]),
        ("index_select", b.index_select(0, torch.tensor(picks)), picks, p[picks]),
        (
            "torch.index_select",
            torch.index_select(input=b, dim=0, index=torch.tensor(picks)),
            picks,
            p[picks],
        ),
        ("narrow", b.narrow(0, n - 1, 1), [n - 1], p.narrow(0, n - 1, 1)),
        (
            "torch.narrow",
            torch.narrow(input=b, dim=0, start=-n, length=n),
            ids,
            p.narrow(0, -n, n),
        ),
    ]

    # Pieces of the whole batch, and their samples.
    def pieces(name, got, want, groups):
        assert len(got) == len(want) == len(groups), name
        return [(f"{name}[{k}]", g, s, w) for k, (g, s, w) in enumerate(zip(got, groups, want))]

    forms += pieces("unbind", b.unbind(0), p.unbind(0), ids)
    forms += pieces("torch.unbind", torch.unbind(input=b, dim=0), p.unbind(0), ids)
    forms += pieces("iter", list(b), list(p), ids)
    forms += pieces("decollate", decollate(b), p.unbind(0), ids)
    groups2 = [ids[k : k + 2] for k in range(0, n, 2)]
    forms += pieces("split(2)", b.split(2), p.split(2), groups2)
    forms += pieces(
        "torch.split",
        torch.split(tensor=b, split_size_or_sections=2, dim=0),
        p.split(2),
        groups2,
    )
    sections = [n - 1, 1] if n > 1 else [1]
    bounds = [0, n - 1, n] if n > 1 else [0, 1]
    groups = [ids[bounds[k] : bounds[k + 1]] for k in range(len(sections))]
    forms += pieces("split(list)", b.split(sections, 0), p.split(sections), groups)
    chunks = p.chunk(2)
    starts = [sum(len(c) for c in chunks[:k]) for k in range(len(chunks))]
    chunk_groups = [ids[s : s + len(c)] for s, c in zip(starts, chunks)]
    forms += pieces("chunk", b.chunk(2), chunks, chunk_groups)
    forms += pieces("torch.chunk", torch.chunk(input=b, chunks=2, dim=0), chunks, chunk_groups)
    split_at = [1, 1, n]  # an empty piece between, and one past the end
    groups_at = [ids[:1], ids[1:1], ids[1:n], ids[n:]]
    forms += pieces(
        "tensor_split(indices)", b.tensor_split(split_at), p.tensor_split(split_at), groups_at
    )
    forms += pieces(
        "torch.tensor_split(sections)",
        torch.tensor_split(input=b, sections=2, dim=0),
        p.tensor_split(2),
        [ids[s : s + len(c)] for s, c in zip([0, len(p.tensor_split(2)[0])], p.tensor_split(2))],
    )
    return forms


@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize("n", SIZES)
def test_every_decollating_form_gives_each_piece_its_samples(maker, n):
    b = MAKERS[maker](n)
    assert b.batch_size == n and b.is_batch
    assert_same(b.metadata, batch_metadata(list(range(n))))
    forms = decollating_forms(b, n)
    assert len(forms) > 30
    for name, got, ids, data in forms:
        try:
            assert_piece(got, ids, data)
        except AssertionError as err:
            raise AssertionError(f"{maker}, N={n}, {name}: {err}") from None


@pytest.mark.parametrize("n", SIZES)
def test_indexing_off_dim_0_keeps_the_batch(n):
    b = by_collate(n)
    for name, got, data in [
        ("b[:, 0]", b[:, 0], plain(b)[:, 0]),
        ("b[..., 1]", b[..., 1], plain(b)[..., 1]),
        ("b[:]", b[:], plain(b)),
        ("b[()]", b[()], plain(b)),
        ("b[:, [0, 1]]", b[:, [0, 1]], plain(b)[:, [0, 1]]),
        ("b[:, torch.tensor([True, False])]", b[:, torch.tensor([True, False])], plain(b)[:, :1]),
        ("unbind(1)", b.unbind(1)[1], plain(b)[:, 1]),
        ("split(1, dim=2)", b.split(1, dim=2)[0], plain(b)[:, :, :1]),
        ("select(1, 0)", torch.select(input=b, dim=1, index=0), plain(b)[:, 0]),
        ("narrow(-1, 1, 2)", b.narrow(-1, 1, 2), plain(b)[..., 1:3]),
    ]:
        assert torch.equal(plain(got), data), name
        assert got.batch_size == n, name
        assert_same(got.metadata, batch_metadata(list(range(n))), name)


def test_an_index_that_mixes_samples_into_dim_0_leaves_one_tensor():
    b = by_collate(3)
    moved = b[None]  # the samples are now dim 1
    assert moved.batch_size is None
    assert_same(moved.metadata, batch_metadata([0, 1, 2]))
    one = b[None, 2]  # one sample, under a new dim
    assert one.batch_size is None
    assert_same(one.metadata, sample_metadata(2))


def _index_cases(n):
    t = torch.tensor
    return [
        0,
        -1,
        n - 1,
        t(1),
        slice(1, None),
        slice(None, None, 2),
        slice(None),
        (),
        ...,
        (..., 0),
        (slice(None), 1),
        (None,),
        (None, 1),
        (1, None),
        (slice(None), None),
        [0, n - 1],
        t([n - 1, 0, 0]),
        [],
        t([i % 2 == 0 for i in range(n)]),
        (t([0, n - 1]), 1),
        (t([0, n - 1]), t([1, 0])),
        (t([0, n - 1]), slice(None), t([1, 2])),
        (slice(None), t([0, 1])),
        (..., t([0, 2])),
        (1, t([0, 1])),
        t(True),
        (slice(None), t(True)),
        [[0, n - 1], [0, 1]],
        t([[0, 1], [1, 0]]),
        True,
    ]


@pytest.mark.parametrize("n", [2, 5])
def test_no_index_assigns_a_row_another_samples_metadata(n):
    """Each element of the batch holds its sample's number: every batch an index gives
    holds, row by row, the samples its values come from; one sample's result holds only
    that sample's values; anything else is one tensor with the batch's metadata whole."""
    b = torch.stack([MetadataTensor(torch.full((3, 3), float(i)), {"id": i}) for i in range(n)])
    for index in _index_cases(n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a list read as a tuple: deprecated)
            got, want = b[index], plain(b)[index]
        assert torch.equal(plain(got), want), index
        ids = got.metadata["id"]
        if got.batch_size is not None:
            assert got.batch_size == len(ids) == want.shape[0], index
            for row, i in zip(want, ids):
                assert bool((row == i).all()), (index, ids)
        elif isinstance(ids, int):
            assert bool((want == ids).all()), index
        else:
            assert ids == list(range(n)), index


# -- building batches ---------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_stack_of_samples_is_the_batch_default_collate_makes(n):
    a, b = torch.stack(samples(n), dim=0), default_collate(samples(n))
    assert a.batch_size == b.batch_size == n
    assert_same(a.metadata, b.metadata)
    assert torch.equal(plain(a), plain(b))
    neg = torch.stack(samples(n), dim=-3)  # dim 0 of the result, counted from the end
    assert neg.batch_size == n


def test_stack_along_another_dim_follows_the_merge_policy_and_stack_of_batches_is_one():
    items = samples(3)
    s = torch.stack(items, dim=1)
    assert s.batch_size is None
    assert_same(s.metadata, sample_metadata(0))  # "first"
    with MetadataTensor.using_merge_policy("union"):
        assert_same(torch.stack(items, 2).metadata, sample_metadata(0))
    first, second = by_collate(2), torch.stack(samples(4)[2:])
    steps = torch.stack([first, second])  # time-major steps of batches: a batch of steps
    assert steps.shape[:2] == (2, 2) and steps.batch_size == 2
    assert steps.metadata["id"] == [[0, 1], [2, 3]]
    assert_same(steps[1].metadata, batch_metadata([2, 3]))  # step 1: its batch, whole
    assert steps[1].batch_size is None
    assert_same(default_collate([first, second]).metadata, steps.metadata)
    # along dim 1, each row stacks one sample's steps: the batch, of the same samples
    by_sample = torch.stack([first, first * 2], 1)
    assert by_sample.batch_size == 2 and by_sample[1].metadata["id"] == 1
    assert torch.stack([first, second], 1).batch_size is None  # (rows of two batches)


@pytest.mark.parametrize("n", SIZES)
def test_cat_of_batches_joins_their_samples(n):
    first, second = by_collate(n), torch.stack(samples(n + 1)[1:])
    joined = torch.cat([first, second])
    ids = list(range(n)) + list(range(1, n + 1))
    assert joined.batch_size == 2 * n
    assert_same(joined.metadata, batch_metadata(ids))
    for i, piece in enumerate(joined.unbind(0)):
        assert_same(piece.metadata, sample_metadata(ids[i]))
    assert torch.equal(plain(torch.concat(tensors=[first, second], dim=0)), plain(joined))
    # along another dim: the merge policy, the batch kept
    wide = torch.cat([first, first], dim=1)
    assert wide.batch_size == n and wide.shape == (n, 4, 3)


def test_cat_with_what_is_not_a_batch_is_refused():
    b = by_collate(2)
    for other in (samples(1)[0][None], torch.zeros(1, 2, 3)):
        for tensors in ([b, other], [other, b]):
            with pytest.raises(ValueError, match="is not a batch"):
                torch.cat(tensors)
    keyed = MetadataTensor.wrap_batch(torch.zeros(1, 2, 3), {"other": [0]}, 1)
    with pytest.raises(ValueError, match="need the same keys"):
        torch.cat([b, keyed])
    # plain tensors and non-batches alone: as before
    assert torch.cat([samples(1)[0], samples(2)[1]]).metadata["id"] == 0


class _Declining(torch.Tensor):
    """Another library's type, which overrides every call and answers none."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


class _Answering(torch.Tensor):
    """Another library's type, which answers every call: the plain call, marked."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return "answered", func(*args, **(kwargs or {}))


#: The calls that take batches apart or join them (their rules), each with another type's
#: tensor among its arguments: (name, call of (batch, other type's tensor maker)).
_RULE_CALLS_WITH_ANOTHER_TYPE = [
    ("cat", lambda b, of: torch.cat([b, of(torch.zeros(1, 2, 3))])),
    ("cat, the other first", lambda b, of: torch.cat([of(torch.zeros(1, 2, 3)), b])),
    ("concat", lambda b, of: torch.concat([b, of(torch.zeros(1, 2, 3))])),
    ("concatenate", lambda b, of: torch.concatenate([b, of(torch.zeros(1, 2, 3))])),
    ("index", lambda b, of: b[of(torch.tensor([1, 0]))]),
    ("index_select", lambda b, of: torch.index_select(b, 0, of(torch.tensor([1, 0])))),
    ("tensor_split", lambda b, of: torch.tensor_split(b, of(torch.tensor([1])))),
    ("narrow", lambda b, of: torch.narrow(b, 0, of(torch.tensor(1)), 1)),
]


@pytest.mark.parametrize("name, call", _RULE_CALLS_WITH_ANOTHER_TYPE)
def test_a_call_with_another_type_is_left_to_it_as_every_call(name, call):
    # (the base passes every call another overriding type takes part in on to it, with
    # its instances as plain tensors: the batch rules did not, and answered for it,
    # torch.cat with a ValueError where the other type would have answered)
    b = by_collate(2)
    with pytest.raises(TypeError, match="returned NotImplemented"):
        call(b, lambda t: t.as_subclass(_Declining))
    mark, got = call(b, lambda t: t.as_subclass(_Answering))
    want = call(b.as_subclass(torch.Tensor), lambda t: t)
    assert mark == "answered"
    got, want = (list(r) if isinstance(r, tuple) else [r] for r in (got, want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        # the other type's answer: as it gave it where torch asked it first, else wrapped
        # by the batch's type with the batch's metadata whole (no row claims a sample)
        assert torch.equal(g.as_subclass(torch.Tensor), w), name
        if type(g) is MetadataTensor:
            assert g.batch_size is None and g.metadata == b.metadata, name
        else:
            assert type(g) is torch.Tensor, name


@pytest.mark.parametrize("order", ["plain first", "metadata first"])
def test_a_batch_mixing_plain_tensors_and_samples_is_the_same_in_either_order(order):
    keyless = [MetadataTensor(torch.ones(2)), torch.zeros(2)]
    keyed = [MetadataTensor(torch.ones(2), {"id": 1}), torch.zeros(2)]
    if order == "plain first":
        keyless, keyed = keyless[::-1], keyed[::-1]
    for build in (default_collate, torch.stack):
        batch = build(keyless)
        assert type(batch) is MetadataTensor and batch.batch_size == 2 and batch.metadata == {}
        with pytest.raises(ValueError, match="same keys"):
            build(keyed)


# -- the rest of a pipeline keeps the batch -------------------------------------------


def test_elementwise_calls_modules_autograd_and_to_keep_the_batch():
    b = by_collate(4).requires_grad_()
    ids = [0, 1, 2, 3]
    for name, got in [
        ("mul", b * 2),
        ("sin", torch.sin(b)),
        ("to", b.to(torch.float64)),
        ("detach", b.detach()),
        ("linear", torch.nn.Linear(3, 5)(b)),
        ("sum(1)", b.sum(1)),
        ("transpose", b.transpose(1, 2).transpose(1, 2)),
    ]:
        assert got.batch_size == 4, name
        assert [x.metadata["id"] for x in got] == ids, name
    (b * torch.arange(4.0).view(4, 1, 1)).sum().backward()
    grad = b.grad
    assert type(grad) is MetadataTensor and grad.batch_size == 4
    assert grad[2].metadata["id"] == 2 and torch.equal(plain(grad[2]), torch.full((2, 3), 2.0))


def test_conv_module_keeps_the_batch():
    images = default_collate([MetadataTensor(torch.randn(3, 8, 8), {"id": i}) for i in range(3)])
    out = torch.nn.Conv2d(3, 4, 3, padding=1)(images)
    assert out.batch_size == 3 and [x.metadata["id"] for x in out] == [0, 1, 2]


@pytest.mark.parametrize("given_state", [False, True])
def test_lltm_sequence_module_batch_first_keeps_the_batch(given_state):
    def plain(t):
        return t.as_subclass(torch.Tensor)

    # batch first: the samples at dim 0 of the input and of every result, labelled row by
    # row, with the values of the same module on plain tensors
    torch.manual_seed(0)
    samples = [MetadataTensor(torch.randn(5, 4, dtype=torch.float64), {"id": i}) for i in range(3)]
    seqs = default_collate(samples)
    module = tnn.LLTMSequence(4, 6, batch_first=True).double()
    state = None
    if given_state:
        state = tuple(
            default_collate([MetadataTensor(torch.randn(6, dtype=torch.float64), {"id": i})
                             for i in range(3)])
            for _ in range(2)
        )  # fmt: skip
    output, (h, c) = module(seqs, state)
    plain_state = None if state is None else tuple(plain(s) for s in state)
    want_output, (want_h, want_c) = module(plain(seqs), plain_state)
    for got, want in ((output, want_output), (h, want_h), (c, want_c)):
        assert got.batch_size == 3 and [x.metadata["id"] for x in got] == [0, 1, 2]
        torch.testing.assert_close(plain(got), want, rtol=0, atol=0)
    # each row is its own sample's sequence run alone
    for i, sample in enumerate(samples):
        alone, _ = module(plain(sample).unsqueeze(0), None if state is None else
                          tuple(plain(s)[i : i + 1] for s in state))  # fmt: skip
        torch.testing.assert_close(plain(output[i]), alone[0])


def test_reductions_over_dim_0_are_not_batches():
    """A reduction over dim 0 (or every dim) mixes the samples: its result is one tensor,
    with the batch's metadata (one entry per sample) as it was."""
    b = by_collate(3)
    want = batch_metadata([0, 1, 2])
    for name, got in [
        ("sum(0)", b.sum(0)),
        ("torch.sum(dim=0)", torch.sum(input=b, dim=0)),
        ("mean((0, 1))", b.mean((0, 1))),
        ("amax(-3)", b.amax(-3)),
        ("max(0)", b.max(0).values),
        ("argmax(0)", b.argmax(dim=0)),
        ("std(0, keepdim)", b.std(0, keepdim=True)),
        ("sum()", b.sum()),
        ("vector_norm(dim=0)", torch.linalg.vector_norm(b, dim=0)),
    ]:
        assert got.batch_size is None, name
        assert_same(got.metadata, want, name)
    for name, got in [("sum(1)", b.sum(1)), ("max(b, b)", torch.max(b, b)), ("mode()", b.mode())]:
        got = got.values if name == "mode()" else got
        assert got.batch_size == 3, name


# -- saving, loading, copying, workers ---------------------------------------------------


def test_pickle_save_load_and_deepcopy_keep_the_batch():
    b = by_collate(3)
    buf = io.BytesIO()
    torch.save(b, buf)
    buf.seek(0)
    for copied in (
        pickle.loads(pickle.dumps(b)),
        copy.deepcopy(b),
        torch.load(buf, weights_only=True),
    ):
        assert copied.batch_size == 3
        for i, piece in enumerate(copied):
            assert_same(piece.metadata, sample_metadata(i))


class _Items(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return MetadataTensor(torch.full((2, 3), float(i)), sample_metadata(i)), i


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_batches_decollate_to_their_samples(workers):
    seen = []
    for x, label in DataLoader(_Items(), batch_size=4, num_workers=workers, shuffle=True):
        assert x.batch_size == len(label)
        for piece, i in zip(decollate(x), label.tolist()):
            assert_same(piece.metadata, sample_metadata(i))
            assert torch.equal(plain(piece), torch.full((2, 3), float(i)))
            seen.append(i)
    assert sorted(seen) == list(range(10))


def test_dataloader_pipeline_gives_per_sample_outputs():
    """DataLoader -> model -> one output per sample, each knowing which input it is."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 2))
    outputs = {}
    for batch, _ in DataLoader(_Items(), batch_size=3):
        for out in decollate(model(batch)):
            outputs[out.metadata["id"]] = (out, out.metadata["spacing"])
    assert sorted(outputs) == list(range(10))
    for i, (out, spacing) in outputs.items():
        want = model(torch.full((1, 2, 3), float(i)))[0]
        torch.testing.assert_close(plain(out), want)
        assert spacing == (1.0, 0.5 * i)


# -- bad batches ------------------------------------------------------------------------


def test_a_batch_whose_metadata_does_not_match_its_size_is_refused():
    b = by_collate(3)
    b.metadata["id"] = [0, 1]
    for take in (lambda: b[0], lambda: b.unbind(0), lambda: decollate(b), lambda: b[1:]):
        with pytest.raises(ValueError, match="holds 2 entries under metadata key 'id'"):
            take()
    b.metadata["id"] = 7
    with pytest.raises(ValueError, match="holds int under metadata key 'id'"):
        b[0]
    moved = by_collate(3).transpose(0, 1)  # dim 0 is no longer the samples: not a batch
    assert moved.batch_size is None
    moved._batch_size = 3  # (forced: the batch code still checks what it is given)
    with pytest.raises(ValueError, match="3 samples whose dim 0 has 2 entries"):
        moved[0]
    with pytest.raises(ValueError, match="holds 2 entries"):
        MetadataTensor.wrap_batch(torch.zeros(3), {"id": [1, 2]}, 3)
    m = MetadataTensor(torch.zeros(3), {"id": [1, 2, 3]})
    with pytest.raises(TypeError, match="'batch_size' must be a non-negative int"):
        m.batch_size = -1
    with pytest.raises(ValueError, match="dim 0 has 3 entries"):
        m.batch_size = 2
    m.batch_size = 3
    assert m[2].metadata == {"id": 3}
    m.batch_size = None
    assert m[2].metadata == {"id": [1, 2, 3]}


def test_a_batch_that_does_not_hold_its_samples_is_not_saved():
    b = by_collate(2)
    b.metadata["id"].append(9)
    for save in (lambda: pickle.dumps(b), lambda: torch.save(b, io.BytesIO())):
        with pytest.raises(pickle.PicklingError, match="holds 3 entries under metadata key 'id'"):
            save()
    with pytest.raises(ValueError, match="must have a dim 0"):
        MetadataTensor(torch.tensor(1.0), {"id": [1]}).batch_size = 1


def test_a_batch_of_no_samples_and_indices_out_of_range():
    empty = by_collate(2)[2:]
    assert empty.batch_size == 0 and decollate(empty) == [] and list(empty) == []
    assert_same(empty.metadata, batch_metadata([]))
    b = by_collate(2)
    for bad in (lambda: b[2], lambda: b[-3], lambda: b.select(0, 5), lambda: b[[0, 9]]):
        with pytest.raises(IndexError):
            bad()
    with pytest.raises(TypeError, match="'batch' must be a MetadataTensor batch"):
        decollate(MetadataTensor(torch.zeros(2)))
    with pytest.raises(TypeError, match="'batch' must be a MetadataTensor batch"):
        decollate(torch.zeros(2))


def test_crafted_files_with_bad_batches_are_refused_at_load():
    """A batch saved with a metadata list of the wrong length, or a batch size that is
    not one, loads with a clear error (weights_only), in a subprocess that must not
    crash."""
    script = textwrap.dedent(
        """
        import io, pickle, torch, tensortools
        from tensortools import MetadataTensor
        b = MetadataTensor.wrap_batch(torch.zeros(3, 2), {"id": [0, 1, 2]}, 3)
        check = MetadataTensor.__dict__["_check_state"]
        get = MetadataTensor.__getstate__
        for bad in ({"id": [0, 1]}, "x"):
            if isinstance(bad, dict):
                b.metadata = bad
            else:
                b._batch_size = bad
            buf = io.BytesIO()
            # (saving refuses both: the file is crafted past its checks)
            MetadataTensor._check_state = classmethod(lambda cls, state, error: state)
            MetadataTensor.__getstate__ = lambda self: dict(vars(self))
            torch.save(b, buf)
            MetadataTensor._check_state, MetadataTensor.__getstate__ = check, get
            buf.seek(0)
            try:
                torch.load(buf, weights_only=True)
            except pickle.UnpicklingError as err:
                print("refused:", err)
            b.metadata, b._batch_size = {"id": [0, 1, 2]}, 3
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 2, done.stdout
    assert "holds 2 entries under metadata key 'id'" in done.stdout
    assert "'_batch_size' must be a non-negative int" in done.stdout


# -- compiled ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_compiled_model_with_per_sample_indexing_matches_eager():
    torch._dynamo.reset()
    model = torch.nn.Conv2d(3, 2, 3, padding=1)

    def step(batch):
        out = model(batch).relu()
        return [out[i] for i in range(out.shape[0])]

    batch = default_collate(
        [MetadataTensor(torch.randn(3, 6, 6), {"id": i, "name": f"s{i}"}) for i in range(3)]
    )
    eager = step(batch)
    compiled = torch.compile(step, fullgraph=True)(batch)
    for e, c, i in zip(eager, compiled, range(3)):
        assert type(c) is MetadataTensor and c.metadata == e.metadata == {"id": i, "name": f"s{i}"}
        assert c.batch_size is None
        torch.testing.assert_close(plain(c), plain(e))


# -- the testing kit --------------------------------------------------------------------

DECOLLATING = ["unbind", "split", "chunk", "tensor_split", "select", "narrow", "index_select"]


def _as_batch(t):
    if t.dim() == 0:
        return None
    return MetadataTensor.wrap_batch(t, {"id": list(range(t.shape[0]))}, t.shape[0])


def _rule(instance, result) -> str:
    """Every batch among the results holds consistent metadata; every sample one id."""
    leaves = result if isinstance(result, (tuple, list)) else [result]
    for r in leaves:
        if not isinstance(r, MetadataTensor):
            return f"a result is a {type(r).__name__}"
        size = r.batch_size
        ids = r.metadata.get("id")
        if size is not None and (not isinstance(ids, list) or len(ids) != size):
            return f"a batch of {size} holds ids {ids!r}"
        if size is None and not isinstance(ids, (int, list)):
            return f"a result holds ids {ids!r}"
    return ""


def test_check_type_passes_on_batches_for_the_decollating_functions():
    pytest.importorskip("expecttest")
    report = tensortools.testing.check_type(
        MetadataTensor,
        _as_batch,
        rule=_rule,
        ops=DECOLLATING,
        checks=("values", "types", "aliases", "autograd", "serialization"),
        raise_on_failure=False,
    )
    assert not report.failures, report


def test_two_threads_taking_batches_apart_interleaved():
    """Two threads, each with its own batch and its own settings block, step by step in
    lockstep: every piece keeps its own batch's samples."""
    import threading

    rounds, barrier, errors = 200, threading.Barrier(2), []

    def work(tag, policy):
        items = [MetadataTensor(torch.full((2,), float(i)), {"id": f"{tag}{i}"}) for i in range(3)]
        try:
            with MetadataTensor.using_merge_policy(policy):
                for _ in range(rounds):
                    b = torch.stack(items)
                    barrier.wait()
                    joined = torch.cat([b, b[1:]])
                    barrier.wait()
                    got = [x.metadata["id"] for x in joined]
                    want = [f"{tag}{i}" for i in (0, 1, 2, 1, 2)]
                    assert got == want, (tag, got)
                    assert (b * 2)[2].metadata == {"id": f"{tag}2"}
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
            barrier.abort()

    threads = [
        threading.Thread(target=work, args=("a", "first")),
        threading.Thread(target=work, args=("b", "union")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
