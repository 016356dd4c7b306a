"""A NumPy int where torch takes an int (a dim, a size, sizes spread out) binds as torch
binds it: handlers and the rules that read arguments get Python ints
(tensortools.dispatch.binding.as_python_ints)."""

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map_only

from tensortools.dispatch import TensorWrapper
from tensortools.dispatch.binding import argument

_NUMPY_INTS = (np.int64, np.int32, np.int16, np.uint8)

# function the handler is registered for -> calls, each of (x, n) with n the int type
_CALLS = {
    torch.flip: [
        lambda x, n: x.flip(n(0)),
        lambda x, n: x.flip(n(0), n(1)),
        lambda x, n: x.flip((n(1), 0)),
        lambda x, n: torch.flip(x, [n(2)]),
        lambda x, n: x.flip(dims=(n(0),)),
    ],
    torch.permute: [
        lambda x, n: x.permute(n(1), 0, 2),
        lambda x, n: x.permute((n(2), n(0), 1)),
        lambda x, n: torch.permute(x, [n(1), n(2), n(0)]),
    ],
    torch.Tensor.view: [
        lambda x, n: x.view(n(6), 4),
        lambda x, n: x.view(n(24)),
        lambda x, n: x.view((n(4), -1)),
    ],
    torch.reshape: [lambda x, n: x.reshape(n(4), n(6)), lambda x, n: torch.reshape(x, (n(24),))],
    torch.sum: [
        lambda x, n: x.sum(n(1)),
        lambda x, n: torch.sum(x, n(0), True),
        lambda x, n: x.sum((n(0), n(2))),
        lambda x, n: x.sum(dim=n(2)),
    ],
    torch.mean: [lambda x, n: x.mean(n(1)), lambda x, n: torch.mean(x, [n(0), 1])],
    torch.softmax: [lambda x, n: x.softmax(n(1)), lambda x, n: torch.softmax(x, n(2))],
    torch.cumsum: [lambda x, n: x.cumsum(n(1)), lambda x, n: torch.cumsum(x, dim=n(0))],
    torch.max: [lambda x, n: x.max(n(1)), lambda x, n: torch.max(x, n(2), True)],
    torch.transpose: [lambda x, n: x.transpose(n(0), n(2)), lambda x, n: x.swapaxes(n(1), 0)],
    torch.unsqueeze: [lambda x, n: x.unsqueeze(n(1))],
    torch.stack: [lambda x, n: torch.stack([x, x], n(0)), lambda x, n: torch.stack((x, x), n(3))],
    torch.cat: [lambda x, n: torch.cat([x, x], n(1)), lambda x, n: torch.concat([x, x], dim=n(2))],
}


def _plain(value):
    return tree_map_only(torch.Tensor, lambda t: t.as_subclass(torch.Tensor), value)


def _recording(func, seen):
    cls = type("Ints", (TensorWrapper,), {"policy": "strict"})

    @cls.implements(func)
    def handler(*args, **kwargs):
        seen.append([type(v) for v in tree_leaves((args, kwargs)) if not torch.is_tensor(v)])
        return func(*_plain(args), **_plain(kwargs))

    return cls


def _cases():
    return [
        (func, i, n)
        for func, calls in _CALLS.items()
        for i in range(len(calls))
        for n in _NUMPY_INTS
    ]


@pytest.mark.parametrize("func, index, kind", _cases())
def test_a_numpy_int_reaches_the_handler_as_a_python_int(func, index, kind):
    call, seen = _CALLS[func][index], []
    cls = _recording(func, seen)
    t = torch.arange(24.0).reshape(2, 3, 4)
    got = call(t.as_subclass(cls), kind)
    assert len(seen) == 1, "the handler was skipped"
    assert not [k for k in seen[0] if issubclass(k, np.generic)], seen[0]
    want = call(t, kind)
    torch.testing.assert_close(_plain(got), want, rtol=0, atol=0)


@pytest.mark.parametrize("kind", _NUMPY_INTS)
def test_rules_read_a_numpy_int_as_a_python_int(kind):
    for args, kwargs, position, want in [
        ((None, kind(1)), {}, 1, 1),
        ((None,), {"dim": kind(2)}, 1, 2),
        ((None, (kind(0), 1)), {}, 1, (0, 1)),
        ((None, [kind(0), kind(2)]), {}, 1, [0, 2]),
        ((None,), {"axis": kind(0)}, 1, 0),
    ]:
        got = argument(torch.sum, args, kwargs, position)
        assert got == want and type(got) is type(want)
        leaves = got if isinstance(got, (list, tuple)) else [got]
        assert all(type(v) is int for v in leaves)
