"""The CUDA kernels: agreement with the CPU kernels and the float64 reference, gradients,
half types, large batches and device errors. Skipped without a GPU (marker `cuda`)."""

import pytest
import torch

from tensortools import ScalarTensor, nn, ops, reference

pytestmark = pytest.mark.cuda

F64 = torch.float64
# max |half result - float64 reference| allowed, relative to the reference's scale
HALF_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}


def _lltm_args(batch, features, state, dtype=F64, device="cpu"):
    g = {"dtype": dtype, "device": device}
    weights = torch.randn(3 * state, state + features, **g) / (state + features) ** 0.5
    return [
        torch.randn(batch, features, **g),
        weights,
        torch.randn(3 * state, **g),
        torch.randn(batch, state, **g),
        torch.randn(batch, state, **g),
    ]


def _to(args, **kw):
    return [a.to(**kw) for a in args]


@pytest.mark.parametrize("size", [(3, 17, 5), (16, 32, 128), (1, 4, 1031)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_lltm_cuda_matches_cpu_forward_and_backward(size, dtype):
    cpu = [a.to(dtype).requires_grad_() for a in _lltm_args(*size)]
    gpu = [a.detach().cuda().requires_grad_() for a in cpu]
    grads = [torch.randn(size[0], size[2], dtype=dtype) for _ in range(2)]
    out_c = ops.lltm(*cpu)
    out_g = ops.lltm(*gpu)
    d_c = torch.autograd.grad(out_c, cpu, grads)
    d_g = torch.autograd.grad(out_g, gpu, [g.cuda() for g in grads])
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    for a, b in zip(out_g + d_g, out_c + d_c):
        torch.testing.assert_close(a.cpu(), b, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_lltm_half_types_against_float64(dtype):
    args = _lltm_args(64, 32, 128)
    want = reference.lltm(*args)
    got = ops.lltm(*_to(args, dtype=dtype, device="cuda"))
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 4, err


def test_lltm_batch_beyond_grid_limit():
    # more rows than a grid's y dimension could hold: the grid-stride loop covers them
    args = _lltm_args(70000, 3, 4, dtype=torch.float32, device="cuda")
    got = ops.lltm(*args)
    want = reference.lltm(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _sequence_args(steps, batch, features, state, dtype=F64, device="cpu"):
    cell = _lltm_args(batch, features, state, dtype, device)
    return [torch.randn(steps, batch, features, dtype=dtype, device=device), *cell[1:]]


@pytest.mark.parametrize("size", [(0, 3, 4, 5), (1, 3, 17, 5), (32, 16, 32, 128), (5, 2, 4, 1031)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_lltm_sequence_cuda_matches_cpu_forward_and_backward(size, dtype):
    steps, batch, _, state = size
    cpu = [a.to(dtype).requires_grad_() for a in _sequence_args(*size)]
    gpu = [a.detach().cuda().requires_grad_() for a in cpu]
    out_c, out_g = ops.lltm_sequence(*cpu), ops.lltm_sequence(*gpu)
    grads = [torch.randn(o.shape, dtype=dtype) for o in out_c]

    def loss(outs, grads):
        return sum((o * g).sum() for o, g in zip(outs, grads))

    d_c = torch.autograd.grad(loss(out_c, grads), cpu, materialize_grads=True)
    d_g = torch.autograd.grad(loss(out_g, [g.cuda() for g in grads]), gpu, materialize_grads=True)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for a, b in zip(out_g + d_g, out_c + d_c):
        torch.testing.assert_close(a.cpu(), b, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lltm_sequence_half_types_against_float64(dtype):
    # Errors grow along the recurrence: 16 steps, compared at the scale of the results.
    args = _sequence_args(16, 64, 32, 128)
    want = reference.lltm_sequence(*args)
    got = ops.lltm_sequence(*_to(args, dtype=dtype, device="cuda"))
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 16, err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lltm_sequence_half_types_backward_against_float64(dtype):
    # The backward adds each step's recurrent gradient into grad_h in the half type.
    args = _sequence_args(16, 64, 32, 128)
    grads = [torch.randn(16, 64, 128, dtype=F64), torch.randn(64, 128, dtype=F64)]

    def run(fn, args, grads):
        leaves = [a.detach().requires_grad_() for a in args]
        output, h_n, _ = fn(*leaves)
        return torch.autograd.grad((output * grads[0]).sum() + (h_n * grads[1]).sum(), leaves)

    want = run(reference.lltm_sequence, args, grads)
    got = run(
        ops.lltm_sequence,
        _to(args, dtype=dtype, device="cuda"),
        _to(grads, dtype=dtype, device="cuda"),
    )
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 16, err


def test_lltm_sequence_launches_at_most_two_kernels_per_step_forward():
    from tensortools.bench import kernel_count

    args = _sequence_args(1, 16, 32, 128, dtype=torch.float32, device="cuda")
    counts = {}
    for steps in (8, 16):
        seq = [torch.randn(steps, 16, 32, device="cuda"), *args[1:]]
        counts[steps] = kernel_count(lambda: ops.lltm_sequence(*seq), "cuda")
    assert (counts[16] - counts[8]) / 8 <= 2, counts


def test_gradcheck_every_op_on_cuda():
    d = {"dtype": F64, "device": "cuda", "requires_grad": True}
    args = [a.cuda().requires_grad_() for a in _lltm_args(3, 4, 5)]
    assert torch.autograd.gradcheck(ops.lltm, args)
    seq = [a.cuda().requires_grad_() for a in _sequence_args(4, 3, 2, 3)]
    assert torch.autograd.gradcheck(ops.lltm_sequence, seq)
    x, y = torch.randn(3, 1, **d), torch.randn(1, 4, **d)
    assert torch.autograd.gradcheck(lambda a, b: ops.axpby(a, b, 1.5, -2.0), (x, y))
    m, v = torch.randn(4, 4, **d), torch.tensor(1.5, **d)
    assert torch.autograd.gradcheck(ops.add_diagonal, (m, v))
    assert torch.autograd.gradcheck(ops.scale, (m, v))
    adj, xs, w, b = (
        torch.randn(5, 5, **d),
        torch.randn(5, 3, **d),
        torch.randn(3, 4, **d),
        torch.randn(4, **d),
    )
    assert torch.autograd.gradcheck(ops.graph_conv, (adj, xs, w, b))
    xi, wi = torch.randn(2, 2, 5, 5, **d), torch.randn(3, 2, 3, 3, **d)
    gamma, beta = torch.rand(3, **d), torch.randn(3, **d)
    assert torch.autograd.gradcheck(
        lambda *a: ops.fused_conv_bn2d(a[0], a[1], None, None, a[2], a[3], 1, 1),
        (xi, wi, gamma, beta),
    )


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_conv_bn2d_cuda_matches_cpu(dtype):
    torch.manual_seed(1)
    cpu = nn.FusedConvBN2d(3, 8, 3, stride=2, padding=1, dtype=dtype)
    with torch.no_grad():
        cpu.gamma.uniform_(0.5, 1.5), cpu.beta.uniform_(-1, 1)
    gpu = nn.FusedConvBN2d(3, 8, 3, stride=2, padding=1, dtype=dtype, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(5, 3, 17, 17, dtype=dtype) * 3 + 2
    grad = torch.randn(5, 8, 9, 9, dtype=dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for _ in range(2):
        xc, xg = x.clone().requires_grad_(), x.cuda().requires_grad_()
        out_c, out_g = cpu(xc), gpu(xg)
        d_c = torch.autograd.grad(out_c, [xc, cpu.weight, cpu.gamma, cpu.beta], grad)
        d_g = torch.autograd.grad(out_g, [xg, gpu.weight, gpu.gamma, gpu.beta], grad.cuda())
        for a, b in zip((out_g, *d_g), (out_c, *d_c)):
            torch.testing.assert_close(a.cpu(), b, **tol)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(gpu, name).cpu(), getattr(cpu, name), **tol)
    cpu.eval(), gpu.eval()
    torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_bn2d_half_types_against_float64(dtype):
    x = torch.randn(4, 3, 12, 12, dtype=F64)
    w = torch.randn(6, 3, 3, 3, dtype=F64) / 5
    want = reference.fused_conv_bn2d(x, w, padding=1)
    got = ops.fused_conv_bn2d(x.to("cuda", dtype), w.to("cuda", dtype), padding=1)
    assert got.dtype == dtype
    # outputs are normalised (order 1): an absolute tolerance of a few half ulps of 1..4
    assert (got.double().cpu() - want).abs().max().item() < 40 * HALF_TOLERANCE[dtype]


def test_axpby_and_scalar_kernels_match_cpu():
    x = torch.randn(3, 1, 5, dtype=F64)
    y = torch.randn(4, 5, dtype=F64)[:, ::1]
    yt = torch.randn(5, 4, dtype=F64).t()
    for a, b in ((x, y), (x, yt), (y, y), (torch.randn((), dtype=F64), y)):
        torch.testing.assert_close(
            ops.axpby(a.cuda(), b.cuda(), 2.0, -0.5).cpu(),
            reference.axpby(a, b, 2.0, -0.5),
            rtol=0,
            atol=1e-15,
        )
    for dtype in (torch.float16, torch.bfloat16):
        got = ops.axpby(x.to("cuda", dtype), y.to("cuda", dtype), 2.0, -0.5)
        torch.testing.assert_close(got.cpu(), reference.axpby(x, y, 2.0, -0.5).to(dtype))
    m = torch.randn(2, 4, 4, dtype=F64)
    torch.testing.assert_close(
        ops.add_diagonal(m.cuda(), 2.5).cpu(), ops.add_diagonal(m, 2.5), rtol=0, atol=0
    )
    torch.testing.assert_close(ops.scale(m.cuda(), 2.5).cpu(), ops.scale(m, 2.5), rtol=0, atol=0)
    ints = torch.arange(16).reshape(4, 4)
    torch.testing.assert_close(
        ops.add_diagonal(ints.cuda(), 3).cpu(), ints + 3 * torch.eye(4, dtype=torch.long)
    )
    d = ScalarTensor(4, 2.0, dtype=F64, device="cuda")
    torch.testing.assert_close((d @ m[0].cuda()).cpu(), 2.0 * m[0])


@pytest.mark.parametrize("layout", ["dense", "coo", "csr"])
def test_graph_conv_cuda_matches_cpu(layout):
    adj = (torch.rand(7, 7) < 0.4).double() * torch.rand(7, 7, dtype=F64)
    x, w, b = torch.randn(7, 3, dtype=F64), torch.randn(3, 5, dtype=F64), torch.randn(5, dtype=F64)
    a = adj.cuda()
    a = a.to_sparse() if layout == "coo" else a.to_sparse_csr() if layout == "csr" else a
    got = ops.graph_conv(a, x.cuda(), w.cuda(), b.cuda())
    torch.testing.assert_close(got.cpu(), reference.graph_conv(adj, x, w, b))


def test_argument_on_the_wrong_device_is_named():
    args = _lltm_args(2, 3, 4, device="cuda")
    args[3] = args[3].cpu()
    with pytest.raises(ValueError, match="'old_h' must be on the same device as 'input'"):
        ops.lltm(*args)
    with pytest.raises(ValueError, match="'y' must be on the same device as 'x'"):
        ops.axpby(torch.randn(3, device="cuda"), torch.randn(3), 1.0, 1.0)
    with pytest.raises(ValueError, match="'weight' must be on the same device as 'input'"):
        ops.fused_conv_bn2d(torch.randn(2, 1, 4, 4, device="cuda"), torch.randn(2, 1, 3, 3))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_argument_on_another_gpu_is_named():
    args = _lltm_args(2, 3, 4, device="cuda:0")
    args[1] = args[1].to("cuda:1")
    with pytest.raises(ValueError, match="'weights' must be on the same device as 'input'"):
        ops.lltm(*args)


def test_kernels_run_on_a_side_stream_and_current_device():
    args = _lltm_args(8, 4, 6, dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = ops.lltm(*args)
    stream.synchronize()
    for g, w in zip(got, reference.lltm(*args)):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_modules_on_cuda(backend):
    torch._dynamo.reset()
    cell = nn.LLTM(32, 64, device="cuda")
    x, h, c = (
        torch.randn(8, 32, device="cuda"),
        torch.randn(8, 64, device="cuda"),
        torch.randn(8, 64, device="cuda"),
    )
    compiled = torch.compile(cell, fullgraph=True, backend=backend)
    for a, b in zip(compiled(x, (h, c)), cell(x, (h, c))):
        torch.testing.assert_close(a, b)
    layer = nn.FusedConvBN2d(3, 4, 3, padding=1, device="cuda")
    twin = nn.FusedConvBN2d(3, 4, 3, padding=1, device="cuda")
    twin.load_state_dict(layer.state_dict())
    img = torch.randn(2, 3, 8, 8, device="cuda")
    torch.testing.assert_close(
        torch.compile(twin, fullgraph=True, backend=backend)(img), layer(img)
    )
