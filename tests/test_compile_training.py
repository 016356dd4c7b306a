"""A user's whole training step over MetadataTensor batches, compiled with inductor (the
default backend): conv, FusedConvBN2d, LLTMSequence(batch_first=True), linear, a matrix
product, a loss, backward() and an optimizer step, over a DataLoader with workers.

One set of graphs serves every batch however new its metadata (dynamo's counters), each
step gives eager's values (float64) and every row the labels of its sample, and the
trained parameters equal eager's. A user's own TensorWrapper type compiles through the
same base.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import tensortools
from tensortools import MetadataTensor
from tensortools.dispatch import TensorWrapper
from tensortools.nn import FusedConvBN2d, LLTMSequence

DOUBLE = torch.float64
TIGHT = {"rtol": 1e-9, "atol": 1e-9}


class _Images(Dataset):
    """(a 3x8x8 image with its id and spacing, its class)."""

    def __len__(self) -> int:
        return 80

    def __getitem__(self, i: int) -> tuple:
        g = torch.Generator().manual_seed(i)
        image = torch.randn(3, 8, 8, generator=g, dtype=DOUBLE)
        return MetadataTensor(image, {"id": f"image-{i}", "spacing": 0.5 + i / 64}), i % 3


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, dtype=DOUBLE)
        self.conv_bn = FusedConvBN2d(4, 4, 3, dtype=DOUBLE)
        self.sequence = LLTMSequence(4, 5, batch_first=True, dtype=DOUBLE)
        self.linear = nn.Linear(5, 3, dtype=DOUBLE)
        self.mix = nn.Parameter(torch.randn(3, 3, dtype=DOUBLE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_bn(F.relu(self.conv(x)))  # B x 4 x 4 x 4
        steps = y.flatten(2).transpose(1, 2)  # B x 16 x 4: the pixels as time steps
        _, (h, _) = self.sequence(steps)
        return self.linear(h) @ self.mix  # B x 3


def _step(model, optimizer, x, y):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return logits, loss


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor)


def test_a_training_step_compiles_once_for_every_batch():
    torch.manual_seed(0)
    model = _Model()
    eager = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    eager_optimizer = torch.optim.SGD(eager.parameters(), lr=0.05)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    step = torch.compile(_step, backend=counter)
    # (spawned workers: a fork of a process that has compiled can hang in its threads)
    loader = DataLoader(_Images(), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    graphs = []
    for x, y in loader:
        logits, loss = step(model, optimizer, x, y)
        want, want_loss = _step(eager, eager_optimizer, x, y)
        graphs.append(counter.frame_count)
        torch.testing.assert_close(_plain(logits), _plain(want), **TIGHT)
        torch.testing.assert_close(_plain(loss), _plain(want_loss), **TIGHT)
        assert type(logits) is MetadataTensor and logits.batch_size == 4
        assert logits.metadata == want.metadata == x.metadata
        rows = tensortools.decollate(logits)
        assert [r.metadata["id"] for r in rows] == x.metadata["id"]
        for r, w in zip(rows, _plain(want)):
            torch.testing.assert_close(_plain(r), w, **TIGHT)
    assert len(graphs) == 20
    assert graphs == [graphs[0]] * 20, f"graphs compiled after each batch: {graphs}"
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(_plain(p), _plain(q), **TIGHT, msg=name)
    for b, c in zip(model.buffers(), eager.buffers()):
        torch.testing.assert_close(b, c, **TIGHT)


class _Tagged(TensorWrapper):
    """A user's type: a tensor with a tag that results take from their first argument."""

    @classmethod
    def context(cls, func, args, kwargs):
        for t in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(t, _Tagged):
                return getattr(t, "tag", None)
        return None

    @classmethod
    def wrap(cls, tensor, context):
        out = cls._instance(tensor)
        out.tag = context
        return out


@pytest.mark.parametrize(
    "call",
    [
        lambda x, w: x @ w,
        lambda x, w: F.linear(x, w),
        lambda x, w: torch.sort(x, dim=1).values + torch.cumsum(x, 0),
    ],
    ids=["matmul", "linear", "sort-cumsum"],
)
def test_a_users_wrapper_type_compiles_with_inductor(call):
    torch.manual_seed(1)
    x, w = torch.randn(4, 4, dtype=DOUBLE), torch.randn(4, 4, dtype=DOUBLE)
    tagged = _Tagged._instance(x)
    tagged.tag = "mine"
    torch._dynamo.reset()
    got = torch.compile(call, fullgraph=True)(tagged, w)
    assert type(got) is _Tagged and got.tag == "mine"
    torch.testing.assert_close(_plain(got), call(x, w), **TIGHT)
