"""Hostile calls into tensortools, run by tests/test_hostile.py in a separate process:
huge logical sizes (expanded tensors, huge N), out-of-range geometry, malformed sparse
tensors, wrong arguments to the raw torch.ops entry points. Prints one line per call:
its name and "ok" or the exception type. A crash (a signal) ends the process early."""

import sys
from pathlib import Path

import torch

# Run as a script, its folder is on the path; imported by the tests, its package is.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tensortools  # noqa: E402,F401
from _support.sparse_cases import MALFORMED  # noqa: E402
from tensortools import MetadataTensor, ScalarTensor, ops  # noqa: E402

T = torch.ops.tensortools
big = 2**40
f = torch.randn


def bad_sparse():
    indices = torch.tensor([[0, 5], [7, 0]])  # out of range for 3 x 3
    return torch.sparse_coo_tensor(indices, torch.ones(2), (3, 3), check_invariants=False)


CALLS = {
    "lltm huge expanded batch": lambda: ops.lltm(
        torch.zeros(1, 4).expand(big, 4),
        f(6, 6),
        f(6),
        torch.zeros(1, 2).expand(big, 2),
        torch.zeros(1, 2).expand(big, 2),
    ),
    "lltm state overflows int32": lambda: ops.lltm(
        f(1, 1),
        torch.zeros(1, 1).expand(3 * 2**31, 2**31 + 1),
        torch.zeros(1).expand(3 * 2**31),
        torch.zeros(1, 1).expand(1, 2**31),
        torch.zeros(1, 1).expand(1, 2**31),
    ),
    "lltm_forward raw 1-d": lambda: T.lltm_forward(f(3), f(3), f(3), f(3), f(3)),
    "lltm_backward raw mismatched": lambda: T.lltm_backward(
        f(2, 3), f(2, 3), f(2, 3), f(2, 9), f(2, 7), f(9, 5)
    ),
    "lltm_backward raw empty": lambda: T.lltm_backward(*(torch.empty(0) for _ in range(6))),
    "add_diagonal 2^31 x 2^31 expanded": lambda: ops.add_diagonal(
        torch.zeros(1, 1).expand(2**31, 2**31), 1.0
    ),
    "add_diagonal raw value 1-d": lambda: T.add_diagonal(f(3, 3), f(1)),
    "scale raw value other dtype": lambda: T.scale(f(3), torch.tensor(1, dtype=torch.int64)),
    "scale_finite raw undefined-ish": lambda: T.scale_finite(torch.empty(0), torch.tensor(2.0)),
    "scale huge expanded": lambda: ops.scale(torch.ones(1).expand(2**62), 2.0),
    "axpby broadcast mismatch": lambda: ops.axpby(f(3, 4), f(5), 1.0, 1.0),
    "axpby raw huge alpha": lambda: T.axpby(f(3), f(3), 1e308, -1e308),
    "graph_conv malformed sparse adj": lambda: ops.graph_conv(bad_sparse(), f(3, 2), f(2, 2)),
    "graph_conv raw wrong adj": lambda: T.graph_conv(f(2, 3), f(3, 2), f(2, 2), None),
    "conv_bn stride 2^40": lambda: ops.fused_conv_bn2d(f(2, 1, 4, 4), f(1, 1, 2, 2), stride=big),
    "conv_bn padding 2^62": lambda: ops.fused_conv_bn2d(
        f(2, 1, 4, 4), f(1, 1, 2, 2), padding=2**62
    ),
    "conv_bn raw stride 0": lambda: T.conv_bn2d_forward(
        f(2, 1, 4, 4), f(1, 1, 2, 2), None, None, [0, 0], [0, 0], 1e-5
    ),
    "conv_bn raw padding 2^62": lambda: T.conv_bn2d_forward(
        f(2, 1, 4, 4), f(1, 1, 2, 2), None, None, [1, 1], [2**62, 2**62], 1e-5
    ),
    "conv_bn raw negative eps": lambda: T.conv_bn2d_forward(
        f(2, 1, 4, 4), f(1, 1, 2, 2), None, None, [1, 1], [0, 0], -1.0
    ),
    "conv_bn raw backward wrong stats": lambda: T.conv_bn2d_backward(
        f(2, 1, 3, 3),
        f(2, 1, 4, 4),
        f(1, 1, 2, 2),
        None,
        f(5),
        f(5),
        [1, 1],
        [0, 0],
        1e-5,
        [True, True, True],
    ),
    "conv_bn zero out channels": lambda: ops.fused_conv_bn2d(f(2, 1, 4, 4), f(0, 1, 2, 2)),
    "ScalarTensor huge N dense fallback": lambda: torch.sin(ScalarTensor(2**62, 1.0)),
    "ScalarTensor huge N structured": lambda: torch.add(
        ScalarTensor(2**62, 1.0), ScalarTensor(2**62, 2.0)
    ),
    "ScalarTensor huge N mean": lambda: torch.mean(ScalarTensor(2**62, 1.0)),
    "ScalarTensor N 2^64": lambda: ScalarTensor(2**64, 1.0).shape,
    # reductions and linear algebra whose results have N entries: an allocation error
    "ScalarTensor huge N sum along a dim": lambda: ScalarTensor(2**62, 1.0).sum(0),
    "ScalarTensor huge N argmax": lambda: ScalarTensor(2**62, -1.0).argmax(1),
    "ScalarTensor huge N var along a dim": lambda: ScalarTensor(2**62, 1.0).var(0),
    "ScalarTensor huge N eigvals": lambda: torch.linalg.eigvals(ScalarTensor(2**62, 1.0)),
    "ScalarTensor huge N whole-matrix norms": lambda: (
        torch.linalg.norm(ScalarTensor(2**62, 1.0)),
        torch.linalg.matrix_norm(ScalarTensor(2**62, 1.0), "nuc"),
        torch.std(ScalarTensor(2**62, 3.0)),
        torch.linalg.slogdet(ScalarTensor(2**62, 3.0)),
    ),
    "ScalarTensor huge N solve": lambda: torch.linalg.solve(
        ScalarTensor(2**31, 2.0), torch.ones(1, 1).expand(2**31, 2**31)
    ),
    "ScalarTensor @ huge expanded": lambda: (
        ScalarTensor(2**31, 2.0) @ torch.ones(1, 1).expand(2**31, 2**31)
    ),
    "MetadataTensor self-referencing metadata": lambda: repr(_cyclic()),
    "MetadataTensor in a list subclass whose iteration makes new ones": lambda: _iterating(),
    "MetadataTensor metadata not a dict": lambda: MetadataTensor(f(2), metadata=[1, 2]),
    "conv_bn raw backward grad on meta": lambda: T.conv_bn2d_backward(
        f(2, 1, 3, 3, device="meta"),
        f(2, 1, 4, 4),
        f(1, 1, 2, 2),
        None,
        f(1),
        f(1),
        [1, 1],
        [0, 0],
        1e-5,
        [True, True, True],
    ),
    "conv_bn zero in channels compiled": lambda: torch.compile(
        ops.fused_conv_bn2d, backend="aot_eager"
    )(f(2, 0, 4, 4), f(3, 0, 2, 2)),
}
# A malformed sparse adjacency, each for graph_conv (and its raw operator): refused.
SPARSE = {
    f"graph_conv {name}": (lambda make=make: ops.graph_conv(make(), f(4, 3), f(3, 2)))
    for name, make in MALFORMED.items()
}
SPARSE |= {
    f"graph_conv raw {name}": (lambda make=make: T.graph_conv(make(), f(4, 3), f(3, 2), None))
    for name, make in MALFORMED.items()
}
CALLS |= SPARSE


KINDS = (TypeError, ValueError, NotImplementedError, RuntimeError)


def _iterating():
    # A list subclass whose iteration hands out MetadataTensors nothing else holds: their
    # metadata dicts live only as long as the iteration's temporaries.
    class Shifty(list):
        def __iter__(self):
            return iter([MetadataTensor(f(2), {"key": "x" * 50}), torch.zeros(2)])

    kept = []
    for _ in range(500):
        kept.append(torch.cat(Shifty([f(2), MetadataTensor(torch.zeros(2))])).metadata)
        _ = [{"a": j} for j in range(5)]  # reuse freed memory
    assert all(isinstance(m, dict) for m in kept), kept[:3]


def _cyclic():
    m = MetadataTensor(f(2), {})
    m.metadata["self"] = m.metadata
    return torch.add(m, 1)


if __name__ == "__main__":
    for name, call in CALLS.items():
        print(name, end=": ", flush=True)
        try:
            call()
            print("ok", flush=True)
        except Exception as err:
            # by the kind of error (torch.compile wraps errors in RuntimeError subclasses)
            kind = next((k.__name__ for k in KINDS if isinstance(err, k)), type(err).__name__)
            print(kind, str(err).splitlines()[0][:100] if str(err) else "", flush=True)
    print("done", flush=True)
    sys.exit(0)
