"""The LLTM sequence's two CUDA paths: the persistent kernels (one cooperative launch per
direction) and the per-step loop, each against the float64 reference loop, against each
other, and under the conditions where a persistent kernel could hang or read stale data."""

import subprocess
import sys
import textwrap

import pytest
import torch
from _support.lltm_cases import (
    SEQUENCE_NAMES,
    compare_sequence,
    make_sequence_args,
    run_sequence,
    sequence_grads,
)

from tensortools import ops, reference

pytestmark = pytest.mark.cuda

MODE = "TENSORTOOLS_LLTM_SEQUENCE"
PATHS = ["loop", "persistent"]

# (steps, batch, features, state): one of everything; no features; state 1; more columns
# than multiprocessors, so blocks own several (unevenly: 133 and 700 over 132 or fewer;
# 700 is about the widest state whose float64 backward fits a block's shared memory);
# the tutorial cell over 32 steps.
SIZES = [
    (1, 1, 1, 1),
    (6, 1, 7, 5),
    (5, 3, 0, 4),
    (7, 2, 3, 1),
    (9, 5, 6, 133),
    (4, 3, 8, 300),
    (3, 2, 5, 700),
    (32, 16, 32, 128),
]


def _poison_free_memory():
    """Fill memory the caching allocator will hand out next with NaN, so an output element
    that a kernel leaves unwritten shows up as NaN instead of an old, plausible value."""
    torch.full((1 << 24,), float("nan"), device="cuda")
    torch.cuda.synchronize()


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double().cpu()
    return ((got.double().cpu() - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("size", SIZES, ids=str)
def test_each_path_matches_the_reference_loop_float64(size, path, monkeypatch):
    monkeypatch.setenv(MODE, path)
    args = make_sequence_args(*size, device="cuda")
    grads = sequence_grads(size[0], size[1], size[3], device="cuda")
    _poison_free_memory()
    compare_sequence(args, grads, rtol=1e-10, atol=1e-12)


# The benchmark's sizes (batch, features, state), 32 steps; a transposed weight and
# expanded output gradients (as .sum() gives them) on one of them.
BENCH_SIZES = [(16, 32, 128, False), (64, 1024, 128, True), (32, 256, 512, False)]
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("case", BENCH_SIZES, ids=str)
def test_both_paths_close_to_float64_and_to_each_other(case, dtype, monkeypatch):
    batch, features, state, strided = case
    steps = 32
    args = make_sequence_args(steps, batch, features, state)
    grads = sequence_grads(steps, batch, state)
    want_out, want_grads = run_sequence(reference.lltm_sequence, args, grads)
    low = [a.to("cuda", dtype) for a in args]
    low_grads = [g.to("cuda", dtype) for g in grads]
    if strided:
        low[1] = low[1].t().contiguous().t()
        low_grads[0] = low_grads[0][:1].expand_as(low_grads[0])
        want_out, want_grads = run_sequence(
            reference.lltm_sequence, args, [low_grads[0].double().cpu(), *grads[1:]]
        )
    errors = {}
    for path in PATHS:
        monkeypatch.setenv(MODE, path)
        _poison_free_memory()
        out, arg_grads = run_sequence(ops.lltm_sequence, low, low_grads)
        names = ("output", "h_n", "c_n", *(f"grad {n}" for n in SEQUENCE_NAMES))
        for name, got, want in zip(names, (*out, *arg_grads), (*want_out, *want_grads)):
            assert got.dtype == dtype
            errors[path, name] = _rel_err(got, want)
    for (path, name), err in errors.items():
        assert err <= TOLERANCE[dtype], (path, name, err)
        # The persistent kernels sum in float and round less often: never much worse.
        loop = errors["loop", name]
        assert err <= 2 * loop + TOLERANCE[dtype] / 10, (path, name, err, loop)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_inference_equals_the_training_forward_bit_for_bit(dtype, monkeypatch):
    monkeypatch.setenv(MODE, "persistent")
    args = make_sequence_args(32, 64, 1024, 128, dtype=dtype, device="cuda")
    training = torch.ops.tensortools.lltm_sequence_forward(*args)[:3]
    inference = torch.ops.tensortools.lltm_sequence_inference(*args)
    for a, b in zip(training, inference):
        assert torch.equal(a, b)


def test_a_state_too_large_falls_back_to_the_loop_or_is_refused_when_forced(monkeypatch):
    # 64 rows of a 2048-wide state need more shared memory than any current GPU's block.
    args = make_sequence_args(2, 64, 4, 2048, dtype=torch.float32, device="cuda")
    want = reference.lltm_sequence(*[a.double() for a in args])
    monkeypatch.setenv(MODE, "auto")
    for got, w in zip(ops.lltm_sequence(*args), want):
        assert _rel_err(got, w) < 1e-5
    monkeypatch.setenv(MODE, "persistent")
    with pytest.raises(RuntimeError, match="shared memory"):
        ops.lltm_sequence(*args)


def test_an_unknown_path_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv(MODE, "fast")
    args = make_sequence_args(2, 3, 4, 5, device="cuda")
    with pytest.raises(RuntimeError, match="TENSORTOOLS_LLTM_SEQUENCE"):
        ops.lltm_sequence(*args)


@pytest.mark.parametrize("path", PATHS)
def test_kernels_launched_per_step(path, monkeypatch):
    """Persistent: as many kernels for 32 steps as for 8, forward and backward (give or
    take the one or two that cuBLAS's choice for the whole-sequence products adds). Loop:
    at least two more kernels per step."""
    from tensortools.bench import kernel_count

    monkeypatch.setenv(MODE, path)

    def training(steps):
        args = make_sequence_args(steps, 16, 32, 128, dtype=torch.float32, device="cuda")
        args = [a.requires_grad_() for a in args]

        def call():
            output, h_n, c_n = ops.lltm_sequence(*args)
            torch.autograd.grad((output.sum() + h_n.sum() + c_n.sum()), args)

        return kernel_count(call, "cuda")

    short, long = training(8), training(32)
    if path == "persistent":
        assert abs(long - short) <= 2, (short, long)
    else:
        assert long - short >= 2 * 24, (short, long)


_CONCURRENT = textwrap.dedent(
    """
    import threading, torch
    from tensortools import ops
    torch.manual_seed(0)
    B, F, S, T = 32, 256, 512, 16
    args = [torch.randn(T, B, F, device="cuda"), torch.randn(3 * S, S + F, device="cuda") / 30,
            torch.randn(3 * S, device="cuda"), torch.randn(B, S, device="cuda"),
            torch.randn(B, S, device="cuda")]
    args = [a.requires_grad_() for a in args]

    def once():
        out, h_n, c_n = ops.lltm_sequence(*args)
        return [out, *torch.autograd.grad(out.sum() + c_n.sum(), args)]

    want = [t.clone() for t in once()]
    torch.cuda.synchronize()
    bad = []

    def worker():
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(20):
                got = once()
            stream.synchronize()
        bad.extend(i for i, (g, w) in enumerate(zip(got, want)) if not torch.equal(g, w))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad
    print("ok")
    """
)


def test_launches_from_threads_on_their_own_streams_neither_hang_nor_mix(monkeypatch):
    """Three threads launch full-grid persistent kernels on three streams at once; they must
    not wait on each other forever (a grid barrier whose blocks are not all resident) and
    each must get the one-thread result bit for bit. In a subprocess: a hang is a timeout."""
    monkeypatch.setenv(MODE, "persistent")
    done = subprocess.run(
        [sys.executable, "-c", _CONCURRENT], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
