"""A DataLoader's MetadataTensor batches through a compiled step: one graph for every
batch, however new its metadata, with eager's values and every sample's labels.

What a call's results take from their arguments' metadata is decided when the function
is traced and applied outside the graph: a result holds the dict it takes by reference
and makes its own copy when first read, so no value of the metadata becomes a guard of
the graph (docs/metadata-tensor.md, "torch.compile"). Only its structure (keys, batch or
not) may recompile.
"""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
import torch
import torch._dynamo.testing
from torch.utils.data import DataLoader, Dataset, default_collate

import tensortools
from tensortools import MetadataTensor

DOUBLE = torch.float64


class _Samples(Dataset):
    """Sample i: a 3x8x8 image with its id (a string), spacing (a float) and a tensor."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start = n, start

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> MetadataTensor:
        i += self.start
        g = torch.Generator().manual_seed(i)
        image = torch.randn(3, 8, 8, generator=g, dtype=DOUBLE)
        return MetadataTensor(
            image, {"id": f"sample-{i}", "spacing": 0.5 + i / 64, "origin": torch.tensor([i, -i])}
        )


def _steps():
    # Calls that keep the batch (pointwise, reductions over other dims, views, a conv
    # through torch.nn.functional), so that the result holds every sample's labels.
    w = torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(7), dtype=DOUBLE)
    return {
        "pointwise and reductions": lambda x: (x * 2 + 1).tanh().sum(dim=(2, 3)) - x.mean(),
        "views": lambda x: x.flatten(1).relu()[:, :5] * 3,
        "conv2d": lambda x: torch.nn.functional.conv2d(x, w).sigmoid().amax(dim=(2, 3)),
    }


STEPS = _steps()


def _run(step, batches, backend="eager"):
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    return [compiled(b) for b in batches], counter


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor)


def _check_like_eager(step, batches, outs) -> None:
    for b, out in zip(batches, outs, strict=True):
        want = step(b)
        torch.testing.assert_close(_plain(out), _plain(want), rtol=1e-12, atol=1e-12)
        assert type(out) is type(want) is MetadataTensor
        assert out.batch_size == want.batch_size == b.batch_size
        assert out.metadata.keys() == want.metadata.keys() == b.metadata.keys()
        assert out.metadata["id"] == want.metadata["id"] == b.metadata["id"]
        assert out.metadata["spacing"] == b.metadata["spacing"]
        assert torch.equal(out.metadata["origin"], b.metadata["origin"])


@pytest.mark.parametrize("name", sorted(STEPS))
def test_twenty_batches_of_new_metadata_run_one_graph(name):
    step = STEPS[name]
    batches = list(DataLoader(_Samples(80), batch_size=4))
    outs, counter = _run(step, batches)
    assert counter.frame_count == 1, f"{counter.frame_count} graphs for 20 batches"
    _check_like_eager(step, batches, outs)
    # each result's rows map back to their samples' ids
    for b, out in zip(batches, outs):
        rows = tensortools.decollate(out)
        assert [r.metadata["id"] for r in rows] == b.metadata["id"]


def test_a_dataloader_with_workers_runs_one_graph():
    step = STEPS["pointwise and reductions"]
    # (spawned workers: a fork of a process that has compiled can hang in its threads)
    loader = DataLoader(_Samples(40), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    batches = list(loader)
    outs, counter = _run(step, batches)
    assert len(batches) == 10 and counter.frame_count == 1
    _check_like_eager(step, batches, outs)


@pytest.mark.slow  # (an inductor compile)
def test_inductor_runs_one_graph_for_new_metadata():
    step = STEPS["pointwise and reductions"]
    batches = list(DataLoader(_Samples(40), batch_size=4))
    outs, counter = _run(step, batches, backend="inductor")
    assert counter.frame_count == 1
    _check_like_eager(step, batches, outs)


def _single(values: dict) -> MetadataTensor:
    return MetadataTensor(torch.arange(6, dtype=DOUBLE).reshape(2, 3), values)


@pytest.mark.parametrize(
    "values",
    [
        [{"k": 1}, {"k": 2}, {"k": "three"}, {"k": None}],
        [{"k": [1, 2]}, {"k": [3]}, {"k": (4, 5, 6)}],
        [{"k": torch.zeros(2)}, {"k": torch.ones(5)}],
        [{"k": {"nested": 1}}, {"k": {"nested": 2}}],
    ],
    ids=["scalars", "sequences", "tensors", "dicts"],
)
def test_new_values_under_the_same_keys_run_one_graph(values):
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda x: x.sin() * 2, backend=counter, fullgraph=True)
    for v in values:
        out = compiled(_single(v))
        assert out.metadata.keys() == v.keys()
        got, want = out.metadata["k"], v["k"]
        assert torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
    assert counter.frame_count == 1


def test_new_keys_compile_again_and_stay_right():
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda x: x + 1, backend=counter, fullgraph=True)
    for values in ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {}):
        assert compiled(_single(values)).metadata == values


def test_each_result_holds_its_own_copy():
    compiled = torch.compile(lambda x: (x + 1, x * 2), backend="eager", fullgraph=True)
    x = _single({"id": ["a", "b"], "n": 1})
    a, b = compiled(x)
    assert a.metadata == b.metadata == x.metadata
    assert a.metadata is not x.metadata and b.metadata is not x.metadata
    assert a.metadata is not b.metadata
    a.metadata["n"] = 5
    assert x.metadata["n"] == 1 and b.metadata["n"] == 1


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "repr", "clone"])
def test_a_result_not_read_yet_keeps_its_metadata(how):
    compiled = torch.compile(lambda x: x.exp(), backend="eager", fullgraph=True)
    x = _single({"id": 3})
    out = compiled(x)  # (its metadata not read before the call below)
    if how == "pickle":
        again = pickle.loads(pickle.dumps(out))
    elif how == "deepcopy":
        again = copy.deepcopy(out)
    elif how == "clone":
        again = out.clone()
    else:
        assert "'id': 3" in repr(out)
        again = out
    assert again.metadata == {"id": 3}
    torch.testing.assert_close(_plain(again), _plain(x).exp())


@pytest.mark.parametrize("policy", ["union", "strict"])
def test_other_merge_policies_stay_right(policy):
    # (they read the values to merge them: guarded on them, they compile per value)
    compiled = torch.compile(lambda x, y: x + y, backend="eager", fullgraph=True)
    with MetadataTensor.using_merge_policy(policy):
        for i in range(3):
            out = compiled(_single({"a": i}), _single({"b": -i}))
            assert out.metadata == {"a": i, "b": -i}


def test_a_tensor_made_the_type_by_other_means_has_no_metadata_attribute():
    t = torch.zeros(2).as_subclass(MetadataTensor)
    assert not hasattr(t, "metadata")
    with pytest.raises(AttributeError, match="metadata"):
        t.metadata  # noqa: B018


def test_batches_collated_by_hand_run_one_graph():
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda x: x.square().sum(dim=1), backend=counter, fullgraph=True)
    for start in range(0, 30, 3):
        batch = default_collate([_Samples(3, start)[i] for i in range(3)])
        out = compiled(batch)
        assert out.batch_size == 3
        assert out.metadata["id"] == [f"sample-{start + i}" for i in range(3)]
    assert counter.frame_count == 1


def test_threads_reading_a_result_at_once_get_one_copy():
    compiled = torch.compile(lambda x: x + 1, backend="eager", fullgraph=True)
    outs = [compiled(_single({"id": i})) for i in range(50)]
    seen: list = []
    barrier = threading.Barrier(4)

    def read():
        barrier.wait()
        seen.append([o.metadata for o in outs])

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, o in enumerate(outs):
        assert o.metadata == {"id": i}
        assert all(r[i] is o.metadata for r in seen)


class _Relabelled(MetadataTensor):
    """A user's subclass with its own wrap (which takes a dict, as the docs say)."""

    @classmethod
    def wrap(cls, tensor, context):
        out = super().wrap(tensor, context)
        out.metadata["wrapped"] = isinstance(context, dict)
        return out


def test_a_subclass_with_its_own_wrap_is_given_a_dict_when_compiled():
    compiled = torch.compile(lambda x: x * 2, backend="eager", fullgraph=True)
    x = _Relabelled(torch.ones(2), {"id": 1})
    out = compiled(x)
    assert type(out) is _Relabelled and out.metadata == {"id": 1, "wrapped": True}


def test_the_metadata_of_a_tensor_made_inside_is_read_with_metadata_of():
    from tensortools.types.metadata import metadata_of

    def step(x):
        y = x + 1
        return y * 2, metadata_of(y)["id"]

    compiled = torch.compile(step, backend="eager", fullgraph=True)
    for i in ("a", "b"):
        out, read = compiled(_single({"id": i}))
        assert read == i and out.metadata == {"id": i}


def test_reading_y_metadata_inside_says_what_to_write():
    # (a limit of the design, docs/metadata-tensor.md: "Metadata outside the graph")
    def step(x):
        y = x + 1
        return y * 2, y.metadata["id"]

    with pytest.raises(AttributeError, match="metadata_of"):
        torch.compile(step, backend="eager")(_single({"id": 1}))
