"""First contact: what a user gets from ``import tensortools`` with torch alone, as one
script. Every runtime module imports and works with the development tools missing (each is
blocked here, so the check also holds in a full test environment), nothing of torch's
compiler or test internals is loaded, torch's collate entry for plain tensors is its own,
each type and operator answers as the plain-PyTorch maths does, the demo runs (its timing
tables stubbed) and the testing kit says what to install.

Run by tests/test_import.py in a process of its own, and by scripts/clean_room.sh against
the wheel installed in a new virtual environment; prints "ok" last.
"""

# ruff: noqa: E402 (the tools are blocked before anything else is imported)

import contextlib
import io
import runpy
import sys

# The development tools (requirements-dev.txt) are missing: importing one fails.
TOOLS = ("expecttest", "pytest", "hypothesis", "sybil", "sphinx", "monai", "matplotlib", "tqdm")
# NumPy too: torch does not require it (torch warns at import that it is missing).
TOOLS += ("numpy",)
for name in TOOLS:
    sys.modules[name] = None

import torch
from torch.utils.data import default_collate
from torch.utils.data._utils import collate

COMPILER = ("torch._dynamo", "torch._inductor", "sympy", "torch.testing._internal")


def compiler_modules():
    return {m for m in sys.modules if any(m == c or m.startswith(c + ".") for c in COMPILER)}


# (torch itself imports two modules of torch.testing._internal: what counts is what
# tensortools adds)
before = compiler_modules()
torch_collate = collate.default_collate_fn_map[torch.Tensor]

import tensortools

added = sorted(compiler_modules() - before)
assert not added, f"import tensortools loaded {added}"
# The types register their coverage hooks without importing the tools (tests/test_layers.py)
tools = sorted(m for m in sys.modules if m.split(".")[:2][-1] in ("testing", "coverage", "bench"))
assert not [m for m in tools if m.startswith("tensortools.")], f"import tensortools loaded {tools}"
assert collate.default_collate_fn_map[torch.Tensor] is torch_collate, "collate changed"
assert collate.default_collate_fn_map[torch.Tensor] is collate.collate_tensor_fn

import tensortools.dispatch
import tensortools.distributed
import tensortools.nn
import tensortools.ops
import tensortools.reference
import tensortools.types
from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs, ops

# The public surface imports whole with torch alone (the tools are not in __all__).
star: dict = {}
exec("from tensortools import *", star)
assert set(tensortools.__all__) <= set(star), set(tensortools.__all__) - set(star)

d = ScalarTensor(3, 2.0)
assert torch.equal(d @ torch.ones(3, 2), torch.full((3, 2), 2.0))
m = MetadataTensor(torch.ones(2), {"id": 1})
assert (m * 2).metadata == {"id": 1}
batch = default_collate([MetadataTensor(torch.ones(2), {"id": i}) for i in range(3)])
assert type(batch) is MetadataTensor and batch.metadata == {"id": [0, 1, 2]}
for index, ids in (([2, 0], [2, 0]), (range(1, 3), [1, 2]), ([True, False, True], [0, 2])):
    rows = batch[index]  # (an index read without NumPy)
    assert rows.metadata == {"id": ids} and torch.equal(
        rows, batch.as_subclass(torch.Tensor)[index]
    )
assert type(default_collate([torch.ones(2), torch.zeros(2)])) is torch.Tensor
with capture_logs() as logs:
    torch.sin(LoggingTensor(torch.ones(2)))
assert [r.function for r in logs] == ["torch.sin"]
torch.manual_seed(0)
x, w, b, h, c = (
    torch.randn(s, dtype=torch.float64) for s in ((2, 3), (12, 7), (12,), (2, 4), (2, 4))
)
# (torch.allclose: torch.testing.assert_close itself imports sympy)
for got, want in zip(ops.lltm(x, w, b, h, c), tensortools.reference.lltm(x, w, b, h, c)):
    assert torch.allclose(got, want), (got, want)
new_h, _ = tensortools.nn.LLTM(3, 4)(x.float(), (h.float(), c.float()))
assert new_h.shape == (2, 4)


class Tagged(tensortools.dispatch.TensorWrapper):
    pass


assert type(torch.add(Tagged._make(torch.ones(1)), 1)) is Tagged
added = sorted(compiler_modules() - before)
assert not added, f"using the runtime loaded {added}"

# Each operator once, against the plain-PyTorch maths (float64).
ref = tensortools.reference
seq = (torch.randn(5, 2, 3, dtype=torch.float64), w, b, h, c)
for got, want in zip(ops.lltm_sequence(*seq), ref.lltm_sequence(*seq)):
    assert torch.allclose(got, want), "lltm_sequence"
u, v = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
assert torch.allclose(ops.axpby(u, v, 2.0, -0.5), ref.axpby(u, v, 2.0, -0.5)), "axpby"
assert torch.allclose(ops.scale(u, 3.0), 3.0 * u), "scale"
sq = torch.randn(4, 4, dtype=torch.float64)
assert torch.allclose(ops.add_diagonal(sq, 2.0), sq + 2.0 * torch.eye(4, dtype=sq.dtype))
adj, feats = torch.rand(6, 6, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
gw, gb = torch.randn(3, 2, dtype=torch.float64), torch.randn(2, dtype=torch.float64)
assert torch.allclose(ops.graph_conv(adj, feats, gw, gb), ref.graph_conv(adj, feats, gw, gb))
img, kernel = (
    torch.randn(2, 3, 6, 6, dtype=torch.float64),
    torch.randn(4, 3, 3, 3, dtype=torch.float64),
)
assert torch.allclose(ops.fused_conv_bn2d(img, kernel), ref.fused_conv_bn2d(img, kernel))
added = sorted(compiler_modules() - before)
assert not added, f"the operators loaded {added}"

# The demo runs (its timing tables, which take seconds, stubbed).
from tensortools import bench

bench.lltm_rows = bench.dispatch_rows = bench.sequence_rows = lambda *a, **k: []
sys.argv = ["tensortools.demo", "--quick"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        runpy.run_module("tensortools.demo", run_name="__main__")
    except SystemExit as exit:
        assert exit.code == 0, f"the demo exited with {exit.code}"
assert "== 7." in out.getvalue(), out.getvalue()[-2000:]

# The testing kit imports; what needs PyTorch's op_db says what to install.
try:
    tensortools.testing.check_type(MetadataTensor, MetadataTensor, ops=["sin"])
except ImportError as err:
    # (the first missing tool named: expecttest, or numpy where torch came without it)
    assert "pip install 'tensortools[testing]'" in str(err), err
    assert "expecttest" in str(err) or "numpy" in str(err), err
else:
    raise AssertionError("check_type ran op_db without expecttest")
print("ok")
