"""tensortools.ops.fused_conv_bn2d and nn.FusedConvBN2d against Conv2d + BatchNorm2d."""

from functools import partial

import pytest
import torch
from _support.op_records import AutocastUnit, CompileCall, ErrorCall, Transform
from _support.op_samples import (
    FLOATING,
    HALF_TOLERANCE,
    D,
    OperatorTests,
    T,
    laid_out,
    make,
    requiring_grad,
)

from tensortools import (
    LoggingTensor,
    MetadataTensor,
    ScalarTensor,
    capture_logs,
    nn,
    ops,
    reference,
)

# in, out, kernel, stride, padding, batch, height, width
GEOMETRIES = [
    (3, 5, 3, 1, 1, 4, 8, 8),
    (1, 1, 2, 2, 0, 1, 5, 5),  # batch 1, channels 1, stride 2
    (2, 4, (3, 2), (2, 1), (1, 0), 3, 7, 6),
    (4, 2, 1, 1, 0, 2, 1, 3),
    (2, 3, 5, 1, 2, 1, 4, 4),  # kernel larger than the input, covered by padding
]
IDS = ["3x3-pad1", "batch1-channels1-stride2", "rect", "1x1", "big-kernel"]


def _pair_of_modules(cin, cout, k, s, p, dtype=torch.float64, **bn_kwargs):
    conv = torch.nn.Conv2d(cin, cout, k, s, p, bias=False, dtype=dtype)
    bn = torch.nn.BatchNorm2d(cout, dtype=dtype, **bn_kwargs)
    if bn.affine:
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-1, 1)
    return torch.nn.Sequential(conv, bn), nn.FusedConvBN2d.from_modules(conv, bn)


def _params(module):
    if isinstance(module, torch.nn.Sequential):
        conv, bn = module
        return [conv.weight] + ([bn.weight, bn.bias] if bn.affine else [])
    return [module.weight] + ([module.gamma, module.beta] if module.affine else [])


def _step(module, x, grad):
    """Output and gradients (input, then parameters) of one forward/backward."""
    x = x.detach().clone().requires_grad_()
    out = module(x)
    return [out, *torch.autograd.grad(out, [x, *_params(module)], grad)]


def _assert_stats_equal(ref, fused):
    bn = ref[1]
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        want = getattr(bn, name)
        got = getattr(fused, name)
        assert (want is None) == (got is None), name
        if want is not None:
            torch.testing.assert_close(got, want, msg=name)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_training_matches_unfused_modules_float64(geometry):
    cin, cout, k, s, p, n, h, w = geometry
    ref, fused = _pair_of_modules(cin, cout, k, s, p)
    for _ in range(3):  # running statistics over several steps
        x = torch.randn(n, cin, h, w, dtype=torch.float64) * 3 + 2
        grad = torch.randn_like(ref[0](x))
        for a, b in zip(_step(fused, x, grad), _step(ref, x, grad)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    _assert_stats_equal(ref, fused)
    ref.eval(), fused.eval()
    x = torch.randn(n, cin, h, w, dtype=torch.float64)
    grad = torch.randn_like(ref[0](x))
    for a, b in zip(_step(fused, x, grad), _step(ref, x, grad)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("geometry", GEOMETRIES[:3], ids=IDS[:3])
def test_float32_close_to_float64(geometry):
    cin, cout, k, s, p, n, h, w = geometry
    ref64, _ = _pair_of_modules(cin, cout, k, s, p)
    fused = nn.FusedConvBN2d.from_modules(
        *[m.float() for m in _pair_of_modules(cin, cout, k, s, p)[0]]
    )
    fused.load_state_dict(
        {
            "weight": ref64[0].weight,
            "gamma": ref64[1].weight,
            "beta": ref64[1].bias,
            **{
                k2: v
                for k2, v in ref64[1].state_dict().items()
                if k2.startswith(("running", "num"))
            },
        }
    )
    x = torch.randn(n, cin, h, w, dtype=torch.float64) * 3 + 2
    grad = torch.randn_like(ref64[0](x))
    got = _step(fused, x.float(), grad.float())
    want = _step(ref64, x, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(fused.running_var.double(), ref64[1].running_var)


def test_statistics_stay_accurate_with_large_mean():
    # A channel of mean 1e4 and standard deviation 1: E[z^2] - E[z]^2 in float32 would lose
    # every digit of the variance.
    weight = torch.ones(1, 1, 1, 1)
    x = 1e4 + torch.randn(64, 1, 16, 16, dtype=torch.float64)
    got = ops.fused_conv_bn2d(x.float(), weight)
    want = reference.fused_conv_bn2d(x, weight.double())
    torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"affine": False},
        {"track_running_stats": False},
        {"momentum": None},
        {"affine": False, "track_running_stats": False},
        {"eps": 1e-2, "momentum": 0.5},
    ],
    ids=["no-affine", "no-running-stats", "cumulative", "neither", "eps-momentum"],
)
def test_batch_norm_options_match(kwargs):
    ref, fused = _pair_of_modules(3, 4, 3, 1, 1, **kwargs)
    for mode in ("train", "train", "train", "eval"):
        ref.train(mode == "train"), fused.train(mode == "train")
        x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
        grad = torch.randn(2, 4, 6, 6, dtype=torch.float64)
        for a, b in zip(_step(fused, x, grad), _step(ref, x, grad)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    _assert_stats_equal(ref, fused)


def test_functional_matches_reference_and_updates_running_stats():
    x = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    w = torch.randn(4, 2, 3, 3, dtype=torch.float64)
    gamma, beta = torch.rand(4, dtype=torch.float64) + 0.5, torch.randn(4, dtype=torch.float64)
    stats = [torch.randn(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64) + 1]
    ref_stats = [t.clone() for t in stats]
    for training in (True, False):
        got = ops.fused_conv_bn2d(
            x,
            w,
            *stats,
            gamma,
            beta,
            stride=2,
            padding=1,
            training=training,
            momentum=0.3,
            eps=1e-3,
        )
        want = reference.fused_conv_bn2d(
            x,
            w,
            *ref_stats,
            gamma,
            beta,
            stride=2,
            padding=1,
            training=training,
            momentum=0.3,
            eps=1e-3,
        )
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(stats, ref_stats, rtol=1e-12, atol=1e-12)
    # training without running statistics
    torch.testing.assert_close(ops.fused_conv_bn2d(x, w), reference.fused_conv_bn2d(x, w))


def test_empty_batch_like_batch_norm():
    ref, fused = _pair_of_modules(2, 3, 3, 1, 1)
    x = torch.randn(0, 2, 5, 5, dtype=torch.float64)
    grad = torch.randn(0, 3, 5, 5, dtype=torch.float64)
    got, want = _step(fused, x, grad), _step(ref, x, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    _assert_stats_equal(ref, fused)


def test_non_contiguous_inputs_and_expanded_gradients():
    ref, fused = _pair_of_modules(3, 4, 3, 1, 1)
    base = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    for x in (
        base.to(memory_format=torch.channels_last),
        base.transpose(2, 3),
        torch.randn(2, 3, 6, 12, dtype=torch.float64)[..., ::2],
    ):
        grad = torch.ones(1, 1, 1, 1, dtype=torch.float64).expand(2, 4, 6, 6)  # from .sum()
        for a, b in zip(_step(fused, x, grad), _step(ref, x, grad)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("affine", [True, False])
def test_gradcheck(affine):
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    gamma = (torch.rand(3, dtype=torch.float64) + 0.5).requires_grad_()
    beta = torch.randn(3, dtype=torch.float64, requires_grad=True)
    stats = [torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)]
    if affine:

        def f(*a):
            return ops.fused_conv_bn2d(a[0], a[1], None, None, a[2], a[3], 2, 1)

        assert torch.autograd.gradcheck(f, (x, w, gamma, beta))

        def f_eval(*a):
            return ops.fused_conv_bn2d(a[0], a[1], *stats, a[2], a[3], 1, 1, training=False)

        assert torch.autograd.gradcheck(f_eval, (x, w, gamma, beta))
    else:
        assert torch.autograd.gradcheck(lambda a, b: ops.fused_conv_bn2d(a, b, padding=1), (x, w))


def test_double_backward_is_refused():
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(ops.fused_conv_bn2d(x, w).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        gx.sum().backward()


def test_saves_no_tensor_of_the_output_size():
    x = torch.randn(8, 3, 10, 10, requires_grad=True)
    w = torch.randn(16, 3, 3, 3, requires_grad=True)
    gamma, beta = torch.ones(16, requires_grad=True), torch.zeros(16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ops.fused_conv_bn2d(x, w, None, None, gamma, beta, padding=1)
    assert sorted(t.numel() for t in saved) == sorted([x.numel(), w.numel(), 16, 16, 16])


@pytest.mark.parametrize(
    "mask", [(True, True, True), (False, True, False), (True, False, True), (False, False, True)]
)
def test_backward_op_honours_output_mask(mask):
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    gamma = torch.rand(3, dtype=torch.float64) + 0.5
    _, mean, var = torch.ops.tensortools.conv_bn2d_forward(x, w, gamma, None, [1, 1], [0, 0], 1e-5)
    grad = torch.randn(2, 3, 3, 3, dtype=torch.float64)
    got = torch.ops.tensortools.conv_bn2d_backward(
        grad, x, w, gamma, mean, var, [1, 1], [0, 0], 1e-5, list(mask)
    )
    args = [t.clone().requires_grad_() for t in (x, w, gamma)]
    beta = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(
        reference.fused_conv_bn2d(args[0], args[1], None, None, args[2], beta), [*args, beta], grad
    )
    wanted = [mask[0], mask[1], mask[2], mask[2]]
    for g, r, on in zip(got, want, wanted):
        if on:
            torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)
        else:
            assert g is None


@pytest.mark.parametrize("geometry", [(2, 2, 3, 1, 1, 3, 5, 5), (1, 1, 2, 2, 0, 1, 4, 4)])
@pytest.mark.slow
def test_opcheck(geometry):
    cin, cout, k, s, p, n, h, w = geometry
    x = torch.randn(n, cin, h, w, requires_grad=True)
    weight = torch.randn(cout, cin, k, k, requires_grad=True)
    gamma = torch.rand(cout, requires_grad=True)
    beta = torch.randn(cout, requires_grad=True)
    fwd = torch.ops.tensortools.conv_bn2d_forward.default
    torch.library.opcheck(fwd, (x, weight, gamma, beta, [s, s], [p, p], 1e-5))
    torch.library.opcheck(fwd, (x, weight, None, None, [s, s], [p, p], 1e-5))
    out, mean, var = fwd(
        x.detach(), weight.detach(), gamma.detach(), beta.detach(), [s, s], [p, p], 1e-5
    )
    grad = torch.randn_like(out)
    bwd = torch.ops.tensortools.conv_bn2d_backward.default
    for mask in ([True, True, True], [False, True, False]):
        torch.library.opcheck(
            bwd,
            (
                grad,
                x.detach(),
                weight.detach(),
                gamma.detach(),
                mean,
                var,
                [s, s],
                [p, p],
                1e-5,
                mask,
            ),
        )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_training_and_eval(backend):
    torch._dynamo.reset()
    eager = nn.FusedConvBN2d(3, 8, 3, stride=2, padding=1)
    compiled_module = nn.FusedConvBN2d(3, 8, 3, stride=2, padding=1)
    compiled_module.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_module, fullgraph=True, backend=backend)
    x = torch.randn(4, 3, 9, 9)
    grad = torch.randn(4, 8, 5, 5)
    for a, b in zip(_step(compiled, x, grad), _step(eager, x, grad)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(compiled_module.state_dict(), eager.state_dict())
    compiled_module.eval(), eager.eval()
    torch.testing.assert_close(compiled(x), eager(x))


def _bad(**changes):
    args = {
        "input": torch.randn(2, 3, 5, 5),
        "weight": torch.randn(4, 3, 3, 3),
        "running_mean": torch.zeros(4),
        "running_var": torch.ones(4),
        "gamma": torch.ones(4),
        "beta": torch.zeros(4),
    }
    args.update(changes)
    options = {
        k: args.pop(k) for k in ("stride", "padding", "training", "momentum", "eps") if k in args
    }
    return ops.fused_conv_bn2d(**args, **options)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize(
    "changes,error,words",
    [
        ({"input": torch.randn(3, 5, 5)}, ValueError, "'input' must be 4-D"),
        ({"weight": torch.randn(4, 2, 3, 3)}, ValueError, "'weight' has in_channels 2 but 'input'"),
        ({"gamma": torch.ones(3)}, ValueError, r"'gamma' must have shape \[4\]"),
        ({"beta": torch.ones(4, 1)}, ValueError, r"'beta' must have shape \[4\]"),
        ({"running_var": torch.ones(5)}, ValueError, r"'running_var' must have shape \[4\]"),
        (
            {"weight": torch.randn(4, 3, 3, 3, dtype=torch.float64)},
            TypeError,
            "'weight' must have the same dtype as 'input'",
        ),
        (
            {
                "input": torch.ones(2, 3, 5, 5, dtype=torch.long),
                "weight": torch.ones(4, 3, 3, 3, dtype=torch.long),
            },
            TypeError,
            "'input' must have",
        ),
        ({"weight": torch.randn(4, 3, 7, 7)}, ValueError, "smaller than the kernel"),
        ({"stride": 0}, ValueError, "'stride' must be in \\[1, "),
        ({"padding": (1, -1)}, ValueError, "'padding' must be in \\[0, "),
        ({"stride": 1.5}, TypeError, "'stride' must be an int or a pair"),
        ({"padding": (1, 2, 3)}, TypeError, "'padding' must be an int or a pair"),
        ({"momentum": "0.1"}, TypeError, "'momentum' must be a real number"),
        ({"running_var": None}, ValueError, "both 'running_mean' and 'running_var'"),
        ({"gamma": [1.0] * 4}, TypeError, "'gamma' must be a torch.Tensor"),
        ({"input": torch.randn(2, 3, 5, 5).to_sparse()}, TypeError, "dense"),
    ],
)
def test_bad_input_names_the_argument(changes, error, words, training):
    with pytest.raises(error, match=words):
        _bad(training=training, **changes)


def test_training_needs_more_than_one_value_per_channel():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        _bad(input=torch.randn(1, 3, 3, 3))
    _bad(input=torch.randn(1, 3, 3, 3), training=False)  # fine with running statistics
    with pytest.raises(ValueError, match="required when not training"):
        _bad(running_mean=None, running_var=None, training=False)


def test_fake_kernel_checks_like_the_kernel():
    with torch.device("meta"):
        with pytest.raises(ValueError, match="'weight' has in_channels 2 but 'input'"):
            _bad(weight=torch.randn(4, 2, 3, 3))
        out = _bad(running_mean=None, running_var=None, stride=2, padding=1)
    assert out.shape == (2, 4, 3, 3) and out.device.type == "meta"


@pytest.mark.parametrize(
    "args,error,words",
    [
        ((0, 4, 3), ValueError, "'in_channels' must be positive"),
        ((3, 4, 0), ValueError, "'kernel_size' must be >= 1"),
        ((3, 4, 3.0), TypeError, "'kernel_size' must be an int or a pair"),
        ((3, 4, 3, 1, -1), ValueError, "'padding' must be >= 0"),
    ],
)
def test_module_bad_constructor_arguments(args, error, words):
    with pytest.raises(error, match=words):
        nn.FusedConvBN2d(*args)


def test_module_init_and_from_modules():
    fused = nn.FusedConvBN2d(3, 4, (3, 2), stride=2, padding=(1, 0))
    assert fused.weight.shape == (4, 3, 3, 2)
    assert torch.equal(fused.gamma, torch.ones(4)) and torch.equal(fused.beta, torch.zeros(4))
    assert torch.equal(fused.running_var, torch.ones(4)) and fused.num_batches_tracked == 0
    bound = 1 / (3 * 3 * 2) ** 0.5  # Conv2d's default initialisation bound
    assert fused.weight.abs().max() <= bound
    assert "kernel_size=(3, 2), stride=(2, 2), padding=(1, 0)" in repr(fused)
    with pytest.raises(ValueError, match="bias=False"):
        nn.FusedConvBN2d.from_modules(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    with pytest.raises(ValueError, match="'bn' has 5 features"):
        nn.FusedConvBN2d.from_modules(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(5))


# --- tensor types -----------------------------------------------------------------------


def test_with_metadata_tensor_input():
    ref, fused = _pair_of_modules(2, 3, 3, 1, 1)
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    out = fused(MetadataTensor(x, {"batch": 7}))
    assert isinstance(out, MetadataTensor) and out.metadata == {"batch": 7}
    torch.testing.assert_close(out.as_subclass(torch.Tensor), ref(x), rtol=1e-10, atol=1e-10)
    _assert_stats_equal(ref, fused)  # the running statistics were updated in place


def test_with_logging_tensor_input():
    ref, fused = _pair_of_modules(2, 3, 3, 1, 1)
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    with capture_logs() as logs:
        out = fused(LoggingTensor(x))
    assert isinstance(out, LoggingTensor)
    assert [r.function for r in logs] == ["tensortools.ops.fused_conv_bn2d"]
    torch.testing.assert_close(out.as_subclass(torch.Tensor), ref(x), rtol=1e-10, atol=1e-10)


def test_scalar_tensor_argument_is_refused_clearly():
    # A ScalarTensor is an N x N matrix: there is no structured convolution of it, and as a
    # dense 2-D tensor it is not a valid input either.
    with pytest.raises((TypeError, ValueError), match="input|fused_conv_bn2d"):
        ops.fused_conv_bn2d(ScalarTensor(3, 2.0), torch.randn(4, 3, 3, 3))


def test_module_counts_only_batches_it_accepted():
    fused = nn.FusedConvBN2d(3, 4, 3, momentum=None)
    stats = {k: v.clone() for k, v in fused.state_dict().items()}
    for bad in (torch.randn(2, 5, 6, 6), torch.randn(1, 3, 3, 3)):  # wrong channels; 1 value
        with pytest.raises(ValueError):
            fused(bad)
    for k, v in fused.state_dict().items():
        assert torch.equal(v, stats[k]), k  # nothing counted, nothing updated
    ref = torch.nn.BatchNorm2d(4, momentum=None)  # the cumulative average, batch by batch
    conv = torch.nn.Conv2d(3, 4, 3, bias=False)
    conv.weight.data.copy_(fused.weight.data)
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6)
        fused(x)
        ref(conv(x))
    assert int(fused.num_batches_tracked) == 3
    torch.testing.assert_close(fused.running_mean, ref.running_mean)
    torch.testing.assert_close(fused.running_var, ref.running_var)


def test_eval_refuses_negative_eps():
    fused = nn.FusedConvBN2d(3, 4, 3, eps=-1e-3).eval()
    with pytest.raises(ValueError, match="'eps' must be >= 0"):
        fused(torch.randn(2, 3, 6, 6))


# --- samples of the raw operators, and the checks every operator's samples go through ---


def _stats_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _conv_samples(layout, dtype, device):
    n = 0 if layout == "empty" else 2
    return (
        make((n, 3, 6, 6), layout, dtype, device),
        make((4, 3, 3, 3), layout, dtype, device),
        (torch.rand(4, dtype=D, device=device) + 0.5).to(dtype),
        make((4,), "contiguous", dtype, device),
    )


def _conv_bn2d_forward_samples(layout, dtype, device):
    if layout == "empty":  # no batch, no statistics: refused (tested below)
        layout = "contiguous"
    inp, weight, gamma, beta = _conv_samples(layout, dtype, device)
    return [
        (*requiring_grad(inp, weight, gamma, beta), [1, 1], [1, 1], 1e-5),
        (*requiring_grad(inp.detach(), weight.detach()), None, None, [2, 1], [0, 2], 0.0),
    ]


def _conv_bn2d_backward_samples(layout, dtype, device):
    inp, weight, gamma, beta = _conv_samples("contiguous", dtype, device)
    out, mean, var = T.conv_bn2d_forward(inp, weight, gamma, beta, [1, 1], [1, 1], 1e-5)
    grad = make(out.shape, layout, dtype, device)
    return [
        (
            grad,
            laid_out(inp, layout),
            laid_out(weight, layout),
            gamma,
            mean,
            var,
            [1, 1],
            [1, 1],
            1e-5,
            mask,
        )
        for mask in ([True, True, True], [True, False, True], [False, True, False])
    ]


def _conv_bn2d_eval_samples(layout, dtype, device):
    inp, weight, gamma, beta = _conv_samples(layout, dtype, device)
    stats = make((4,), "contiguous", dtype, device), make((4,), "contiguous", dtype, device).abs()
    return [
        (*requiring_grad(inp, weight), *stats, *requiring_grad(gamma, beta), [1, 1], [1, 1], 1e-5),
        (*requiring_grad(inp.detach(), weight.detach()), *stats, None, None, [2, 2], [0, 0], 0.0),
    ]


def _conv_bn2d_update_stats_samples(layout, dtype, device):
    # half types keep their statistics in float
    n, stats = (0 if layout == "empty" else 2), _stats_dtype(dtype)
    running = (
        torch.zeros(4, dtype=dtype, device=device),
        torch.ones(4, dtype=dtype, device=device),
    )
    output = make((n, 4, 3, 3), layout, dtype, device)
    mean = make((4,), layout, stats, device)
    var = laid_out(torch.rand(4, dtype=stats, device=device), layout)
    return [(*running, output, mean, var, 0.1)]


def _conv_bn2d_forward_reference(input, weight, gamma, beta, stride, padding, eps):
    """(output, mean, biased variance of the convolution per channel): batch norm's
    training step, written out (torch's batch_norm refuses an eps of 0 in training)."""
    channel = (1, -1, 1, 1)
    z = torch.nn.functional.conv2d(input, weight, None, stride, padding)
    mean, var = z.mean((0, 2, 3)), z.var((0, 2, 3), correction=0)
    out = (z - mean.reshape(channel)) * torch.rsqrt(var + eps).reshape(channel)
    if gamma is not None:
        out = out * gamma.reshape(channel)
    if beta is not None:
        out = out + beta.reshape(channel)
    return out, mean, var


def _conv_bn2d_backward_reference(
    grad_output, input, weight, gamma, mean, var, stride, padding, eps, output_mask
):
    """(grad_input, grad_weight, grad_gamma, grad_beta) of batch norm's training step over
    the recomputed convolution, for the given statistics; those output_mask leaves out
    are None."""
    channel = (1, -1, 1, 1)
    dims = (0, 2, 3)
    with torch.enable_grad():
        input, weight = input.detach().requires_grad_(), weight.detach().requires_grad_()
        z = torch.nn.functional.conv2d(input, weight, None, stride, padding)
    invstd = torch.rsqrt(var + eps).reshape(channel)
    xhat = (z.detach() - mean.reshape(channel)) * invstd
    g = grad_output
    scale = invstd if gamma is None else invstd * gamma.reshape(channel)
    grad_z = scale * (g - g.mean(dims, keepdim=True) - xhat * (g * xhat).mean(dims, keepdim=True))
    grad_input, grad_weight = torch.autograd.grad(z, (input, weight), grad_z)
    grad_gamma, grad_beta = (g * xhat).sum(dims), g.sum(dims)
    mask = (*output_mask, output_mask[2])
    return tuple(
        r if m else None for r, m in zip((grad_input, grad_weight, grad_gamma, grad_beta), mask)
    )


def _conv_bn2d_eval_reference(input, weight, mean, var, gamma, beta, stride, padding, eps):
    """Batch norm's eval step over the convolution, written out (torch's batch_norm
    refuses an eps of 0 also in eval before torch 2.13)."""
    channel = (1, -1, 1, 1)
    z = torch.nn.functional.conv2d(input, weight, None, stride, padding)
    out = (z - mean.reshape(channel)) * torch.rsqrt(var + eps).reshape(channel)
    if gamma is not None:
        out = out * gamma.reshape(channel)
    if beta is not None:
        out = out + beta.reshape(channel)
    return out


def _conv_bn2d_update_stats_reference(running_mean, running_var, output, mean, var, momentum):
    """batch_norm's update of the running statistics (the unbiased variance), in place."""
    count = output.numel() // output.shape[1]
    if count:
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * count / (count - 1) * var)


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
SAMPLE_BUILDERS = {
    "conv_bn2d_forward": _conv_bn2d_forward_samples,
    "conv_bn2d_backward": _conv_bn2d_backward_samples,
    "conv_bn2d_eval": _conv_bn2d_eval_samples,
    "conv_bn2d_update_stats": _conv_bn2d_update_stats_samples,
}


# --- its cases of the sweeps over every operator (_support/op_records.py) ---


def _conv_bn_args():
    return dict(
        input=make((2, 3, 5, 5)),
        weight=make((4, 3, 3, 3)),
        running_mean=make((4,)),
        running_var=make((4,)).abs() + 0.5,
        gamma=make((4,)),
        beta=make((4,)),
    )


def autocast_modules(device, training, **bn):
    """(FusedConvBN2d, Sequential(Conv2d, BatchNorm2d(**bn))) of the same parameters and
    running statistics (away from the defaults) in float32, in training or eval mode."""
    pair = torch.nn.Sequential(
        torch.nn.Conv2d(3, 5, 3, stride=1, padding=1, bias=False),
        torch.nn.BatchNorm2d(5, **bn),
    ).to(device)
    with torch.no_grad():  # running statistics and affine parameters away from the defaults
        if pair[1].affine:
            pair[1].weight.uniform_(0.5, 1.5)
            pair[1].bias.uniform_(-0.5, 0.5)
        if pair[1].track_running_stats:
            pair[1].running_mean.uniform_(-0.2, 0.2)
            pair[1].running_var.uniform_(0.5, 1.5)
    fused = nn.FusedConvBN2d.from_modules(pair[0], pair[1])
    return fused.train(training), pair.train(training)


def _image(device):
    return [torch.randn(4, 3, 6, 6, device=device).requires_grad_()]


_KERNEL = torch.randn(4, 3, 3, 3, dtype=D)
_RM, _RV = torch.rand(2, dtype=D), torch.rand(2, dtype=D) + 0.5


def _conv_bn_train(op):
    return lambda x, w, g, b: op(x, w, None, None, g, b, padding=1)


def _conv_bn_eval(op):
    return lambda x, w, g, b: op(x, w, _RM, _RV, g, b, padding=1, training=False)


def _batch_norm_by_hand(x, w, g, b):
    # torch's batch_norm differentiates its own tangent wrongly in training (reverse over
    # forward mode treats the batch statistics as constants: checked against finite
    # differences), so the conv-bn's second derivatives are held to the maths written out.
    z = torch.nn.functional.conv2d(x, w, None, 1, 1)
    var, mean = torch.var_mean(z, (0, 2, 3), correction=0, keepdim=True)
    return (z - mean) * torch.rsqrt(var + 1e-5) * g.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)


#: over a second each in tests/test_ops_func.py (jacobians of jacobians, gradcheck)
_SLOW_TRANSFORMS = frozenset({"second_order", "gradcheck"})
_TRANSFORM_SHAPES = [(2, 1, 3, 3), (2, 1, 2, 2), (2,), (2,)]


class TestSamples(OperatorTests):
    """The conv-bn operators against batch_norm(conv2d(...)) in plain PyTorch, gradients,
    opcheck and meta kernels; fused_conv_bn2d's cases of the sweeps over every operator."""

    builders = SAMPLE_BUILDERS
    references = {
        "conv_bn2d_forward": _conv_bn2d_forward_reference,
        "conv_bn2d_backward": _conv_bn2d_backward_reference,
        "conv_bn2d_eval": _conv_bn2d_eval_reference,
        "conv_bn2d_update_stats": _conv_bn2d_update_stats_reference,
    }
    # the running statistics' update is made of ATen calls: every floating dtype anywhere
    dtypes = {"conv_bn2d_update_stats": dict.fromkeys(("cpu", "cuda"), FLOATING["cuda"])}
    # outputs are normalised (order 1): a few half ulps of 1..4
    tolerance = 40.0
    # cuDNN's backward of a convolution may add its terms in another order on each call
    nondet_tol = {"cuda": 1e-10}
    no_derivative = {
        "conv_bn2d_backward": r"tensortools\.ops\.fused_conv_bn2d does not support double backward",
        "conv_bn2d_update_stats": r"conv_bn2d_update_stats updates the running statistics in place",
    }
    error_calls = {
        f"fused_conv_bn2d({mode})": ErrorCall(
            partial(ops.fused_conv_bn2d, training=training, padding=1),
            _conv_bn_args,
            partial(reference.fused_conv_bn2d, training=training, padding=1),
        )
        for mode, training in (("training", True), ("eval", False))
    }
    autocast = {
        f"FusedConvBN2d{name}": AutocastUnit(
            lambda m, x: m(x),
            lambda m, x: m(x),
            _image,
            lambda device, training, bn=bn: autocast_modules(device, training, **bn),
            operator="fused_conv_bn2d",
        )
        for name, bn in {
            "": {},
            "(affine=False)": {"affine": False},
            "(track_running_stats=False)": {"track_running_stats": False},
        }.items()
    }
    compile_calls = {
        "fused_conv_bn2d": CompileCall(
            lambda x: ops.fused_conv_bn2d(x, _KERNEL, padding=1),
            lambda: (MetadataTensor(torch.randn(2, 3, 5, 5, dtype=D), metadata={"k": 3}),),
        )
    }
    transforms = {
        "conv_bn2d_train": Transform(
            _conv_bn_train(ops.fused_conv_bn2d),
            _conv_bn_train(reference.fused_conv_bn2d),
            _TRANSFORM_SHAPES,
            (0, None, None, None),
            "fused_conv_bn2d",
            no_double_backward=True,
            second_order_reference=_batch_norm_by_hand,
            slow=_SLOW_TRANSFORMS,
        ),
        "conv_bn2d_eval": Transform(
            _conv_bn_eval(ops.fused_conv_bn2d),
            _conv_bn_eval(reference.fused_conv_bn2d),
            _TRANSFORM_SHAPES,
            (0, None, None, None),
            "fused_conv_bn2d",
            slow=_SLOW_TRANSFORMS,
        ),
    }


sample_inputs = TestSamples.sample_inputs


# --- more devices and refusals -------------------------------------------------------


def test_conv_bn_refuses_what_it_cannot_normalise():
    inp, weight = torch.randn(2, 0, 5, 5), torch.randn(3, 0, 3, 3)
    for device in ("cpu", "meta"):
        with pytest.raises(ValueError, match="'input' must have at least one channel"):
            ops.fused_conv_bn2d(inp.to(device), weight.to(device))
        with pytest.raises(ValueError, match="'input' must have at least one channel"):
            ops.fused_conv_bn2d(
                inp.to(device),
                weight.to(device),
                torch.zeros(3, device=device),
                torch.ones(3, device=device),
                training=False,
            )
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            ops.fused_conv_bn2d(
                torch.randn(1, 2, 3, 3, device=device), torch.randn(4, 2, 3, 3, device=device)
            )
        with pytest.raises(ValueError, match="'eps' must be >= 0"):
            ops.fused_conv_bn2d(
                torch.randn(2, 2, 3, 3, device=device),
                torch.randn(4, 2, 3, 3, device=device),
                torch.zeros(4),
                torch.ones(4),
                training=False,
                eps=-1e-3,
            )


@pytest.mark.parametrize("weight_shape", [(0, 2, 3, 3), (4, 2, 0, 3), (4, 2, 3, 0)])
def test_conv_bn_refuses_an_empty_weight_on_every_device(weight_shape):
    for device in ("cpu", "meta"):
        inp, weight = (
            torch.randn(2, 2, 5, 5, device=device),
            torch.randn(weight_shape, device=device),
        )
        with pytest.raises(ValueError, match="'weight' must have at least one output channel"):
            T.conv_bn2d_forward(inp, weight, None, None, [1, 1], [0, 0], 1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, D])
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


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_bn2d_half_types_against_float64(dtype):
    x = torch.randn(4, 3, 12, 12, dtype=D)
    w = torch.randn(6, 3, 3, 3, dtype=D) / 5
    want = reference.fused_conv_bn2d(x, w, padding=1)
    got = ops.fused_conv_bn2d(x.to("cuda", dtype), w.to("cuda", dtype), padding=1)
    assert got.dtype == dtype
    # outputs are normalised (order 1): an absolute tolerance of a few half ulps of 1..4
    assert (got.double().cpu() - want).abs().max().item() < 40 * HALF_TOLERANCE[dtype]


@pytest.mark.cuda
def test_argument_on_the_wrong_device_is_named():
    with pytest.raises(ValueError, match="'weight' must be on the same device as 'input'"):
        ops.fused_conv_bn2d(torch.randn(2, 1, 4, 4, device="cuda"), torch.randn(2, 1, 3, 3))
