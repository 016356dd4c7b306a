"""nn.SyncFusedConvBN2d and nn.convert_sync_fused: batch statistics over every process.

Under gloo with 2 and 3 processes on this machine (one spawn per world size), DDP over
SyncFusedConvBN2d is compared with DDP over Conv2d(bias=False) + torch.nn.SyncBatchNorm and
with one process computing the full batch, on even and uneven shares of the batch (a rank
with no samples among them). torch.nn.SyncBatchNorm runs on CUDA only: the workers run
torch's own SyncBatchNorm autograd function on CPU, with CPU kernels (written here, in
plain torch) for the five batch-norm operators it calls that torch has for CUDA only.
The tests without processes cover the fallback (no process group) and convert_sync_fused.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from _support.spawned import assert_all_close, join_gloo_group, one_thread, spawn_reports
from torch.nn.parallel import DistributedDataParallel as DDP

from tensortools import nn

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available",
)

COLLECTIVE_TIMEOUT = timedelta(seconds=30)
JOIN_TIMEOUT_S = 90.0
# float64 throughout: the ranks' and the full batch's sums differ only in their order.
TOL = {"rtol": 1e-10, "atol": 1e-12}
IN_CH, OUT_CH, SIDE = 3, 4, 5
LR, ITERATIONS = 0.5, 2
# Per rank: samples of each share of the batch (its parts in rank order).
SHARES = {
    2: {"even": [3, 3], "uneven": [0, 5]},
    3: {"even": [2, 2, 2], "uneven": [4, 0, 1]},
}
# Sequential(conv, bn)'s names for FusedConvBN2d's parameters and buffers.
_SEQ_NAMES = {
    "weight": "0.weight",
    "gamma": "1.weight",
    "beta": "1.bias",
    "running_mean": "1.running_mean",
    "running_var": "1.running_var",
    "num_batches_tracked": "1.num_batches_tracked",
}


# -- torch.nn.SyncBatchNorm on CPU ------------------------------------------------------


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return (1, -1) + (1,) * (t.dim() - 2)


def _dims(t: torch.Tensor) -> list[int]:
    return [0, *range(2, t.dim())]


def _stats(input, eps):
    var, mean = torch.var_mean(input, _dims(input), correction=0)
    return mean, torch.rsqrt(var + eps)


def _gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).unsqueeze(1)
    total = counts.sum()
    global_mean = (counts * mean).sum(0) / total
    variances = invstd.pow(-2) - eps
    global_var = (counts * (variances + (mean - global_mean) ** 2)).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(global_mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(global_var * total / (total - 1), alpha=momentum)
    return global_mean, torch.rsqrt(global_var + eps)


def _elemt(input, weight, bias, mean, invstd, eps):
    out = (input - mean.view(_shape(input))) * invstd.view(_shape(input))
    if weight is not None:
        out = out * weight.view(_shape(input))
    return out if bias is None else out + bias.view(_shape(input))


def _backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    sum_dy = grad_out.sum(_dims(input))
    sum_dy_xmu = (grad_out * (input - mean.view(_shape(input)))).sum(_dims(input))
    return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy.clone()


def _backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    total = count.sum().to(mean.dtype)
    scale = invstd if weight is None else invstd * weight
    shape = _shape(input)
    xmu = input - mean.view(shape)
    slope = (invstd * invstd * sum_dy_xmu / total).view(shape)
    return (grad_out - (sum_dy / total).view(shape) - xmu * slope) * scale.view(shape)


_CPU_KERNELS = None


def _register_cpu_sync_bn_kernels() -> None:
    global _CPU_KERNELS
    if _CPU_KERNELS is None:
        _CPU_KERNELS = torch.library.Library("aten", "IMPL")
        for name, kernel in (
            ("batch_norm_stats", _stats),
            ("batch_norm_gather_stats_with_counts", _gather_stats),
            ("batch_norm_elemt", _elemt),
            ("batch_norm_backward_reduce", _backward_reduce),
            ("batch_norm_backward_elemt", _backward_elemt),
        ):
            _CPU_KERNELS.impl(name, kernel, "CPU")


class _SyncBatchNorm(torch.nn.BatchNorm2d):
    """What torch.nn.SyncBatchNorm's forward does in training under a process group of
    more than one process (running statistics tracked): call torch's SyncBatchNorm
    function. torch.nn.SyncBatchNorm itself refuses CPU tensors, and DDP refuses it on CPU."""

    process_group = None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(input)
        from torch.nn.modules._functions import SyncBatchNorm

        self.num_batches_tracked.add_(1)
        momentum = self.momentum
        if momentum is None:
            momentum = 1.0 / self.num_batches_tracked.item()
        group = self.process_group or dist.group.WORLD
        return SyncBatchNorm.apply(
            input,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            self.eps,
            momentum,
            group,
            dist.get_world_size(group),
        )


# -- models and data, built alike in the workers and in the test process ---------------


def _conv_bn() -> tuple[torch.nn.Conv2d, torch.nn.BatchNorm2d]:
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(IN_CH, OUT_CH, 3, padding=1, bias=False, dtype=torch.float64)
    bn = torch.nn.BatchNorm2d(OUT_CH, dtype=torch.float64)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
    return conv, bn


def _models(sync: bool) -> dict[str, torch.nn.Module]:
    """ "fused" and "seq" (Conv2d + batch norm), synchronised or not, from one pair."""
    conv, bn = _conv_bn()
    fused = nn.FusedConvBN2d.from_modules(conv, bn)
    if not sync:
        return {"fused": fused, "seq": torch.nn.Sequential(conv, bn)}
    sync_bn = _SyncBatchNorm(OUT_CH, dtype=torch.float64)
    sync_bn.load_state_dict(bn.state_dict())
    return {"fused": nn.convert_sync_fused(fused), "seq": torch.nn.Sequential(conv, sync_bn)}


def _data(total: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return (
        torch.randn(total, IN_CH, SIDE, SIDE, generator=g, dtype=torch.float64),
        torch.randn(total, OUT_CH, SIDE, SIDE, generator=g, dtype=torch.float64),
    )


def _loss(out: torch.Tensor, target: torch.Tensor, total: int, world: int) -> torch.Tensor:
    # DDP averages over ranks: world * (this rank's sum) / total makes that average the
    # gradient of the full batch's mean. Nonlinear, so that the conv matters.
    return (torch.tanh(out) * target).sum() * (world / total)


def _sgd_step(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
            p.grad = None


def _state(model: torch.nn.Module, fused: bool) -> dict[str, torch.Tensor]:
    """Parameters and buffers under Sequential's names."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {_SEQ_NAMES[k]: v for k, v in state.items()} if fused else state


def _grads(model: torch.nn.Module, fused: bool) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return {_SEQ_NAMES[n]: g for n, g in grads.items()} if fused else grads


def _train(model, xs, targets, total, world) -> dict:
    """ITERATIONS SGD steps; what each step saw, and the state after them."""
    steps = []
    for x, target in zip(xs, targets):
        x = x.clone().requires_grad_()
        out = model(x)
        _loss(out, target, total, world).backward()
        inner = getattr(model, "module", model)
        fused = isinstance(inner, nn.FusedConvBN2d)
        # torch's SyncBatchNorm leaves the input gradient of a rank with no samples None
        grad = torch.zeros_like(x) if x.grad is None else x.grad
        steps.append({"out": out.detach(), "input": grad, "grads": _grads(inner, fused)})
        _sgd_step(inner)
    return {"steps": steps, "state": _state(inner, fused)}


def _batches(total: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """ITERATIONS batches of `total` samples (the second one shifted and scaled)."""
    x, target = _data(total)
    return [x, 2 * x + 0.5][:ITERATIONS], [target, -target][:ITERATIONS]


def _part(t: torch.Tensor, shares: list[int], rank: int) -> torch.Tensor:
    return t.split(shares)[rank]


def _saved(model: torch.nn.Module, x: torch.Tensor) -> list[tuple]:
    """(shape, dtype) of every tensor autograd saves in a training forward of `model`."""
    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.train()(x.clone().requires_grad_())
    return saved


# -- the workers ------------------------------------------------------------------------


def _check_ranks(rank: int, world: int) -> dict:
    report = {}
    for name, shares in SHARES[world].items():
        total = sum(shares)
        xs, targets = _batches(total)
        xs = [_part(x, shares, rank) for x in xs]
        targets = [_part(t, shares, rank) for t in targets]
        for key, model in _models(sync=True).items():
            report[name, key] = _train(DDP(model), xs, targets, total, world)
    # Evaluation: the running statistics, no communication (rank 1 alone evaluates).
    fused = _models(sync=True)["fused"]
    x = _data(4)[0]
    if rank == 1:
        report["eval"] = (fused.eval()(x), _models(sync=False)["fused"].eval()(x))
    # One rank's input fails the checks: every rank raises, and the group still works.
    fused.train()
    bad = x[:, :2] if rank == 1 else x
    try:
        fused(bad)
    except (RuntimeError, ValueError) as err:
        report["error"] = (type(err).__name__, str(err))
    report["after_error"] = fused(x).detach()
    # torch.func.grad through the synchronised function (running statistics untracked, as
    # torch's batch norm needs under torch.func) equals autograd's; vmap is refused.
    torch.manual_seed(6)
    model = nn.SyncFusedConvBN2d(IN_CH, OUT_CH, 3, padding=1, track_running_stats=False).double()
    params = dict(model.named_parameters())
    target = _data(4)[1]

    def loss(p):
        return (torch.tanh(torch.func.functional_call(model, p, (x,))) * target).sum()

    want = torch.autograd.grad(loss(params), list(params.values()))
    got = torch.func.grad(loss)(params)
    report["func"] = ([got[n] for n in params], list(want))
    try:
        torch.func.vmap(lambda xi: model(xi.unsqueeze(0)).sum())(x)
        report["vmap"] = ""
    except Exception as err:  # (each rank refuses before any collective)
        report["vmap"] = f"{type(err).__name__}: {err}"
    # Under autocast: the convolution in bfloat16, the statistics in float32.
    report["autocast"] = {}
    for amp in (False, True):
        torch.manual_seed(5)
        model = nn.SyncFusedConvBN2d(IN_CH, OUT_CH, 3, padding=1)
        x32 = x.float().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = model(x32)
        out.float().sin().sum().backward()
        grads = [x32.grad, model.weight.grad, model.gamma.grad, model.beta.grad]
        report["autocast"][amp] = [out.detach(), *grads, model.running_var.clone()]
    # Backward keeps what the single-process operator keeps, not the conv's output.
    sync_bn = _models(sync=True)["seq"]
    report["saved"] = {
        "sync_fused": _saved(fused, x),
        "fused": _saved(_models(sync=False)["fused"], x),
        "sync_seq": _saved(sync_bn, x),
    }
    return report


def _worker(rank: int, world: int, tmp: str) -> None:
    _register_cpu_sync_bn_kernels()
    join_gloo_group(tmp, rank, world, COLLECTIVE_TIMEOUT)
    try:
        torch.save(_check_ranks(rank, world), f"{tmp}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the teardown of the modules DDP imports


@pytest.fixture(scope="module", params=sorted(SHARES), ids=lambda w: f"world{w}")
def reports(request, tmp_path_factory) -> tuple[int, list[dict]]:
    """The world size, and each rank's report from one spawn of that many workers."""
    world = request.param
    tmp = tmp_path_factory.mktemp(f"sync_conv_bn{world}")
    return world, spawn_reports(_worker, (world, str(tmp)), world, tmp, JOIN_TIMEOUT_S)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert torch.allclose(got, want, **TOL), (
        f"{what}: largest difference {(got - want).abs().max().item():.3g}"
    )


def _assert_runs_equal(got: dict, want: dict, what: str) -> None:
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        for key in ("out", "input"):
            _assert_close(g[key], w[key], f"{what}, step {i}: {key}")
        assert g["grads"].keys() == w["grads"].keys()
        for name in w["grads"]:
            _assert_close(g["grads"][name], w["grads"][name], f"{what}, step {i}: {name}")
    assert got["state"].keys() == want["state"].keys()
    for name in want["state"]:
        _assert_close(got["state"][name], want["state"][name], f"{what}: {name}")


def _full_batch(world: int, shares: list[int], rank: int, key: str) -> dict:
    """One process on the full batch (no synchronisation), cut to `rank`'s share."""
    total = sum(shares)
    xs, targets = _batches(total)
    run = _train(_models(sync=False)[key], xs, targets, total, 1)  # the mean
    for step in run["steps"]:
        step["out"] = _part(step["out"], shares, rank)
        # A rank's input gradient is that of the sum of the ranks' losses, not their mean.
        step["input"] = world * _part(step["input"], shares, rank)
    return run


# -- over processes ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("share", ["even", "uneven"])
def test_sync_fused_matches_conv_and_sync_batch_norm(reports, share):
    world, ranks = reports
    for rank, report in enumerate(ranks):
        _assert_runs_equal(report[share, "fused"], report[share, "seq"], f"rank {rank}")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["fused", "seq"])
@pytest.mark.parametrize("share", ["even", "uneven"])
def test_sync_matches_one_process_on_the_full_batch(reports, share, key):
    world, ranks = reports
    shares = SHARES[world][share]
    for rank, report in enumerate(ranks):
        want = _full_batch(world, shares, rank, key)
        _assert_runs_equal(report[share, key], want, f"rank {rank} of {shares}")


@pytest.mark.slow
def test_sync_fused_eval_uses_running_statistics(reports):
    _, ranks = reports
    got, want = ranks[1]["eval"]
    assert torch.equal(got, want)


@pytest.mark.slow
def test_sync_fused_under_autocast(reports):
    _, ranks = reports
    for report in ranks:
        full, low = report["autocast"][False], report["autocast"][True]
        assert low[0].dtype == torch.bfloat16 and low[-1].dtype == torch.float32
        for name, got, want in zip(("out", "input", "weight", "gamma", "beta", "var"), low, full):
            scale = want.abs().max().item()
            assert (got.float() - want).abs().max().item() <= 2e-2 * scale, name


@pytest.mark.slow
def test_sync_fused_under_torch_func_grad_equals_autograd(reports):
    _, per_rank = reports
    for report in per_rank:
        got, want = report["func"]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_close(g, w, f"torch.func.grad, parameter {i}")
        assert "vmap" in report["vmap"] and "SyncConvBN2d" in report["vmap"], report["vmap"]


def test_a_rank_that_fails_the_checks_makes_every_rank_raise(reports):
    world, ranks = reports
    for rank, report in enumerate(ranks):
        kind, message = report["error"]
        if rank == 1:
            assert kind == "ValueError" and "'input'" in message and "in_channels" in message
        else:
            assert kind == "RuntimeError" and "rank(s) [1]" in message
    outs = [report["after_error"] for report in ranks]
    assert all(torch.equal(out, outs[0]) for out in outs)  # the same batch on every rank


@pytest.mark.slow
def test_sync_fused_saves_what_the_fused_operator_saves(reports):
    _, ranks = reports
    batch = (4, OUT_CH, SIDE, SIDE)  # the convolution's output
    for report in ranks:
        saved = report["saved"]
        assert saved["sync_fused"] == saved["fused"]
        assert batch not in [shape for shape, _ in saved["sync_fused"]]
        assert batch in [shape for shape, _ in saved["sync_seq"]]


# -- without processes ------------------------------------------------------------------


def _fallback_run(momentum) -> dict[str, dict]:
    runs = {}
    for name, cls in (("fused", nn.FusedConvBN2d), ("sync", nn.SyncFusedConvBN2d)):
        conv, bn = _conv_bn()
        bn.momentum = momentum
        runs[name] = _train(cls.from_modules(conv, bn), *_batches(6), 6, 1)
    return runs


def _assert_runs_identical(got: dict, want: dict) -> None:
    for g, w in zip(got["steps"], want["steps"], strict=True):
        assert torch.equal(g["out"], w["out"]) and torch.equal(g["input"], w["input"])
        assert all(torch.equal(g["grads"][n], w["grads"][n]) for n in w["grads"])
    assert all(torch.equal(got["state"][n], want["state"][n]) for n in want["state"])


@pytest.mark.parametrize("momentum", [0.1, None])
def test_without_a_process_group_it_is_fused_conv_bn(momentum):
    assert not dist.is_initialized()
    runs = _fallback_run(momentum)
    _assert_runs_identical(runs["sync"], runs["fused"])


def test_a_process_group_of_one_is_fused_conv_bn():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            runs = _fallback_run(0.1)
        finally:
            dist.destroy_process_group()
    _assert_runs_identical(runs["sync"], runs["fused"])


def test_eval_is_fused_conv_bn():
    conv, bn = _conv_bn()
    x = _data(3)[0]
    got = nn.SyncFusedConvBN2d.from_modules(conv, bn).eval()(x)
    assert torch.equal(got, nn.FusedConvBN2d.from_modules(conv, bn).eval()(x))


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"in_channels": 0}, ValueError, "SyncFusedConvBN2d: 'in_channels' must be positive"),
        ({"stride": 0}, ValueError, "SyncFusedConvBN2d: 'stride' must be >= 1"),
        ({"process_group": "world"}, TypeError, "'process_group' must be a torch.distributed"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, words):
    args = {"in_channels": 3, "out_channels": 4, "kernel_size": 3} | kwargs
    with pytest.raises(error, match=words):
        nn.SyncFusedConvBN2d(**args)


def test_convert_sync_fused_replaces_every_fused_conv_bn():
    inner = nn.FusedConvBN2d(3, 4, 3, padding=1, momentum=None)
    frozen = nn.FusedConvBN2d(4, 5, (3, 1), stride=2, affine=False).eval()
    frozen.weight.requires_grad_(False)
    model = torch.nn.Sequential(torch.nn.Sequential(inner, torch.nn.ReLU()), frozen)
    tensors = {n: t for n, t in [*model.named_parameters(), *model.named_buffers()]}
    before = {n: t.clone() for n, t in model.state_dict().items()}

    converted = nn.convert_sync_fused(model)
    assert converted is model and converted[0][1].__class__ is torch.nn.ReLU
    for old, new in ((inner, converted[0][0]), (frozen, converted[1])):
        assert type(new) is nn.SyncFusedConvBN2d and new.process_group is None
        assert new.training == old.training and repr(new).replace("Sync", "") == repr(old)
        assert [p.requires_grad for p in new.parameters()] == [
            p.requires_grad for p in old.parameters()
        ]
    assert converted[1].gamma is None and not converted[1].training
    # the same tensors, not copies
    after = {n: t for n, t in [*converted.named_parameters(), *converted.named_buffers()]}
    assert after.keys() == tensors.keys() and all(after[n] is tensors[n] for n in tensors)
    assert all(torch.equal(converted.state_dict()[n], before[n]) for n in before)


def test_convert_sync_fused_of_a_fused_conv_bn_and_of_nothing_to_convert():
    fused = nn.FusedConvBN2d(2, 3, 1)
    group = dist.ProcessGroup(0, 1)  # not initialised: only carried along here
    converted = nn.convert_sync_fused(fused, group)
    assert type(converted) is nn.SyncFusedConvBN2d and converted.process_group is group
    assert converted.weight is fused.weight and converted.running_var is fused.running_var
    # already synchronised, or nothing to convert: the module itself, unchanged
    assert nn.convert_sync_fused(converted) is converted and converted.process_group is group
    plain = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))
    children = list(plain)
    assert nn.convert_sync_fused(plain) is plain and list(plain) == children
    with pytest.raises(TypeError, match="'module' must be a torch.nn.Module"):
        nn.convert_sync_fused("model")


# -- the synchronised path in one process (NCCL on a GPU, gloo here) --------------------


def _one_rank_worker(rank: int, backend: str, device: str, tmp: str) -> None:
    """Runs the synchronised autograd function itself (a module takes it only with more
    than one rank) in a group of one, beside FusedConvBN2d on the same batch."""
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(
        backend, init_method=f"file://{tmp}/store", rank=0, world_size=1, timeout=COLLECTIVE_TIMEOUT
    )
    try:
        from tensortools.ops._sync_conv_bn import sync_conv_bn2d

        torch.manual_seed(0)
        plain = nn.FusedConvBN2d(IN_CH, OUT_CH, 3, padding=1, dtype=torch.float64).to(device)
        with torch.no_grad():
            plain.gamma.uniform_(0.5, 1.5)
            plain.beta.uniform_(-0.5, 0.5)
        synced = nn.convert_sync_fused(copy.deepcopy(plain))
        x = torch.randn(4, IN_CH, SIDE, SIDE, dtype=torch.float64, device=device)
        target = torch.randn(4, OUT_CH, SIDE, SIDE, dtype=torch.float64, device=device)
        report = {}
        for name, module in (("plain", plain), ("synced", synced)):
            leaf = x.clone().requires_grad_()
            if name == "plain":
                out = module(leaf)
            else:
                out = sync_conv_bn2d(
                    leaf, module.weight, module.gamma, module.beta, module.running_mean,
                    module.running_var, module.stride, module.padding, module.eps,
                    module._momentum(), dist.group.WORLD,
                )  # fmt: skip
            (out * target).sum().backward()
            report[name] = {
                "out": out.detach().cpu(),
                "input": leaf.grad.cpu(),
                **{n: p.grad.cpu() for n, p in module.named_parameters()},
                "running_mean": module.running_mean.cpu(),
                "running_var": module.running_var.cpu(),
            }
        torch.save(report, f"{tmp}/rank0.pt")
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.mark.parametrize(
    "backend,device",
    [
        ("gloo", "cpu"),
        pytest.param(
            "nccl",
            "cuda",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(
                    not dist.is_nccl_available(), reason="torch.distributed has no NCCL"
                ),
            ],
        ),
    ],
)
def test_the_synchronised_function_in_a_group_of_one_is_the_fused_layer(backend, device, tmp_path):
    """Its collectives run (all-gather forward, all-reduce backward, on the device's
    tensors: NCCL's path on a GPU) and, with one rank, give the single-process layer."""
    (report,) = spawn_reports(_one_rank_worker, (backend, device, str(tmp_path)), 1, tmp_path,
                              JOIN_TIMEOUT_S)  # fmt: skip
    assert_all_close(report["synced"], report["plain"], TOL)
