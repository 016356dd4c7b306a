"""tensortools.ops.graph_conv and nn.GraphConv against adj @ x @ weight + bias."""

import pytest
import torch
from _support.op_records import AutocastUnit, CompileCall, ErrorCall, Transform
from _support.op_samples import D, OperatorTests, make, requiring_grad

from tensortools import MetadataTensor, nn, ops, reference


def _graph(nodes, f_in, f_out, dtype=torch.float64, requires_grad=False):
    adj = (torch.rand(nodes, nodes) < 0.3).to(dtype) * torch.rand(nodes, nodes, dtype=dtype)
    x = torch.randn(nodes, f_in, dtype=dtype)
    w = torch.randn(f_in, f_out, dtype=dtype)
    b = torch.randn(f_out, dtype=dtype)
    return [t.requires_grad_(requires_grad) for t in (adj, x, w, b)]


# in < out multiplies (adj @ x) @ weight first; in > out, adj @ (x @ weight)
@pytest.mark.parametrize("nodes,f_in,f_out", [(6, 3, 8), (6, 8, 3), (1, 2, 2), (0, 3, 2)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_dense_matches_reference(nodes, f_in, f_out, with_bias):
    adj, x, w, b = _graph(nodes, f_in, f_out)
    b = b if with_bias else None
    torch.testing.assert_close(ops.graph_conv(adj, x, w, b), reference.graph_conv(adj, x, w, b))


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_adj_matches_dense(layout):
    adj, x, w, b = _graph(7, 4, 5)
    sparse = adj.to_sparse() if layout == "coo" else adj.to_sparse_csr()
    torch.testing.assert_close(ops.graph_conv(sparse, x, w, b), reference.graph_conv(adj, x, w, b))
    # gradients for x, weight and bias through a sparse adj
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    g = torch.randn(7, 5, dtype=torch.float64)
    got = torch.autograd.grad(ops.graph_conv(sparse, x, w, b), (x, w, b), g)
    want = torch.autograd.grad(reference.graph_conv(adj, x, w, b), (x, w, b), g)
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r)


def test_sparse_adj_gradient_is_refused_clearly():
    adj, x, w, b = _graph(4, 2, 3)
    sparse = adj.to_sparse().requires_grad_()
    out = ops.graph_conv(sparse, x.requires_grad_(), w, b)
    with pytest.raises(RuntimeError, match="no gradient for a sparse 'adj'"):
        out.sum().backward()


@pytest.mark.parametrize("nodes,f_in,f_out", [(5, 2, 4), (5, 4, 2)])
def test_gradcheck_dense(nodes, f_in, f_out):
    args = _graph(nodes, f_in, f_out, requires_grad=True)
    assert torch.autograd.gradcheck(ops.graph_conv, args)
    assert torch.autograd.gradgradcheck(ops.graph_conv, args)


@pytest.mark.slow
def test_opcheck_and_compile():
    args = _graph(5, 3, 4, dtype=torch.float32, requires_grad=True)
    torch.library.opcheck(torch.ops.tensortools.graph_conv.default, args)
    torch.library.opcheck(torch.ops.tensortools.graph_conv.default, (*args[:3], None))
    layer = nn.GraphConv(3, 4)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(args[0], args[1]), layer(args[0], args[1]))


def test_module():
    torch.manual_seed(0)
    layer = nn.GraphConv(4, 6)
    assert layer.weight.shape == (4, 6) and torch.equal(layer.bias, torch.zeros(6))
    bound = (6 / (4 + 6)) ** 0.5
    assert layer.weight.abs().max() <= bound
    adj, x = torch.eye(3), torch.randn(3, 4)
    torch.testing.assert_close(layer(adj, x), x @ layer.weight + layer.bias)
    assert nn.GraphConv(4, 6, bias=False).bias is None
    assert "in_features=4, out_features=6, bias=True" in repr(layer)
    with pytest.raises(ValueError, match="'out_features' must be positive"):
        nn.GraphConv(4, 0)


def test_bad_input():
    adj, x, w, b = _graph(4, 2, 3)
    with pytest.raises(ValueError, match=r"'adj' must have shape \[4, 4\]"):
        ops.graph_conv(adj[:3], x, w, b)
    with pytest.raises(ValueError, match="'weight' has in_features 3 but 'x' has 2"):
        ops.graph_conv(adj, x, torch.randn(3, 3, dtype=torch.float64), b)
    with pytest.raises(ValueError, match=r"'bias' must have shape \[3\]"):
        ops.graph_conv(adj, x, w, b[:2])
    with pytest.raises(TypeError, match="'adj' must have the same dtype as 'x'"):
        ops.graph_conv(adj.float(), x, w, b)
    with pytest.raises(TypeError, match="'x' must have dtype Float or Double"):
        ops.graph_conv(adj.long(), x.long(), w.long(), b.long())
    with pytest.raises(ValueError, match="'x' must be 2-D"):
        ops.graph_conv(adj, x[0], w, b)
    with pytest.raises(TypeError, match="'adj' must be a torch.Tensor"):
        ops.graph_conv(adj.tolist(), x, w, b)


def test_with_metadata_tensor():
    adj, x, w, b = _graph(4, 2, 3)
    out = ops.graph_conv(adj, MetadataTensor(x, {"graph": "g1"}), w, b)
    assert isinstance(out, MetadataTensor) and out.metadata == {"graph": "g1"}
    torch.testing.assert_close(out.as_subclass(torch.Tensor), reference.graph_conv(adj, x, w, b))


@pytest.mark.parametrize("f_in,f_out,first", [(2, 16, (9, 9)), (16, 2, (9, 16))])
def test_cheaper_multiplication_order_is_used(f_in, f_out, first):
    adj, x, w, b = _graph(9, f_in, f_out, dtype=torch.float32)
    with torch.profiler.profile(record_shapes=True) as prof:
        ops.graph_conv(adj, x, w, None)
    shapes = [e.input_shapes for e in prof.events() if e.name == "aten::mm"]
    # the first product: adj @ x (adj first) or x @ weight (weight first)
    assert tuple(shapes[0][0]) == first


# --- samples of the raw operator, and the checks every operator's samples go through ---


def _graph_conv_samples(layout, dtype, device):
    n = 0 if layout == "empty" else 5
    adj, x = make((n, n), layout, dtype, device), make((n, 3), layout, dtype, device)
    # in < out multiplies (adj @ x) @ weight first; in > out, adj @ (x @ weight)
    w, wide = make((3, 2), layout, dtype, device), make((3, 4), layout, dtype, device)
    b = make((2,), layout, dtype, device)
    return [
        tuple(requiring_grad(adj, x, w, b)),
        (*requiring_grad(adj.detach(), x.detach(), wide), None),
    ]


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
SAMPLE_BUILDERS = {"graph_conv": _graph_conv_samples}


def _dense_adj(adj):
    return adj.to_dense() if adj.layout != torch.strided else adj


def _with_dense_adj(adj, x, weight, bias):
    return reference.graph_conv(_dense_adj(adj), x, weight, bias)


def autocast_graph(device, f_in, f_out, layout):
    """[adj (dense, "coo" or "csr"), x, weight, bias] in float32, all but adj requiring grad."""
    adj = (torch.rand(7, 7, device=device) < 0.4) * torch.rand(7, 7, device=device)
    adj = adj.to_sparse() if layout == "coo" else adj.to_sparse_csr() if layout == "csr" else adj
    x = torch.randn(7, f_in, device=device).requires_grad_()
    w = torch.randn(f_in, f_out, device=device).requires_grad_()
    b = torch.randn(f_out, device=device).requires_grad_()
    return [adj, x, w, b]


def _square_metadata():
    return MetadataTensor(torch.randn(3, 3, dtype=D), metadata={"k": 4})


class TestSamples(OperatorTests):
    """graph_conv's samples against reference.graph_conv, gradients, opcheck, meta kernel;
    its cases of the sweeps over every operator (_support/op_records.py)."""

    builders = SAMPLE_BUILDERS
    references = {"graph_conv": reference.graph_conv}
    error_calls = {
        "graph_conv": ErrorCall(
            ops.graph_conv,
            lambda: dict(adj=make((5, 5)), x=make((5, 3)), weight=make((3, 2)), bias=make((2,))),
            _with_dense_adj,
            {"adj": frozenset({"coo", "csr"})},
        )
    }
    autocast = {
        f"graph_conv({layout}, {f_in}->{f_out}{', bias' if bias else ''})": AutocastUnit(
            (lambda a, x, w, b: ops.graph_conv(a, x, w, b))
            if bias
            else (lambda a, x, w, b: ops.graph_conv(a, x, w)),
            (lambda a, x, w, b: _with_dense_adj(a, x, w, b))
            if bias
            else (lambda a, x, w, b: _with_dense_adj(a, x, w, None)),
            lambda device, f_in=f_in, f_out=f_out, layout=layout: autocast_graph(
                device, f_in, f_out, layout
            ),
        )
        for layout in ("dense", "coo", "csr")
        for f_in, f_out in ((3, 6), (6, 3))  # both orders of the products
        for bias in (True, False)
    }
    compile_calls = {
        "graph_conv": CompileCall(
            lambda a, x: ops.graph_conv(a, x, torch.ones(3, 2, dtype=x.dtype)),
            lambda: (_square_metadata(), torch.randn(3, 3, dtype=D)),
        )
    }
    transforms = {
        "graph_conv": Transform(
            ops.graph_conv,
            reference.graph_conv,
            [(4, 4), (4, 3), (3, 2), (2,)],
            (None, 0, None, None),
            "graph_conv",
        )
    }


sample_inputs = TestSamples.sample_inputs


# --- more devices and refusals -------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["dense", "coo", "csr"])
def test_graph_conv_cuda_matches_cpu(layout):
    adj = (torch.rand(7, 7) < 0.4).double() * torch.rand(7, 7, dtype=D)
    x, w, b = torch.randn(7, 3, dtype=D), torch.randn(3, 5, dtype=D), torch.randn(5, dtype=D)
    a = adj.cuda()
    a = a.to_sparse() if layout == "coo" else a.to_sparse_csr() if layout == "csr" else a
    got = ops.graph_conv(a, x.cuda(), w.cuda(), b.cuda())
    torch.testing.assert_close(got.cpu(), reference.graph_conv(adj, x, w, b))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("nodes", [0, 4])
def test_sparse_adj_in_half_types_is_refused_naming_adj(dtype, layout, nodes):
    # ATen's sparse COO product has no half-type CUDA kernel (its error names no argument)
    # and an empty one returned without reaching it; a dense adj takes them.
    adj = torch.rand(nodes, nodes, device="cuda").to(dtype)
    x, w = torch.randn(nodes, 3, device="cuda", dtype=dtype), torch.randn(3, 2, device="cuda")
    w = w.to(dtype)
    assert ops.graph_conv(adj, x, w).shape == (nodes, 2)
    sparse = adj.to_sparse() if layout == "coo" else adj.to_sparse_csr()
    with pytest.raises(TypeError, match="sparse 'adj' must have dtype Float or Double"):
        ops.graph_conv(sparse, x, w)
