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


@pytest.fixture
def use_mode():
    """Sets the LLTM sequence's mode (and max_blocks) for the test; restored after it."""
    previous = ops.lltm_sequence_options()
    yield lambda mode, max_blocks=None: ops.set_lltm_sequence_options(
        mode=mode, max_blocks=max_blocks
    )
    ops.set_lltm_sequence_options(**previous._asdict())


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
def test_each_path_matches_the_reference_loop_float64(size, path, use_mode):
    use_mode(path)
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
def test_both_paths_close_to_float64_and_to_each_other(case, dtype, use_mode):
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
        use_mode(path)
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
def test_inference_equals_the_training_forward_bit_for_bit(dtype, use_mode):
    use_mode("persistent")
    args = make_sequence_args(32, 64, 1024, 128, dtype=dtype, device="cuda")
    training = torch.ops.tensortools.lltm_sequence_forward(*args)[:3]
    inference = torch.ops.tensortools.lltm_sequence_inference(*args)
    for a, b in zip(training, inference):
        assert torch.equal(a, b)


def test_a_state_too_large_falls_back_to_the_loop_or_is_refused_when_forced(use_mode):
    # 64 rows of a 2048-wide state need more shared memory than any current GPU's block.
    args = make_sequence_args(2, 64, 4, 2048, dtype=torch.float32, device="cuda")
    want = reference.lltm_sequence(*[a.double() for a in args])
    use_mode("auto")
    for got, w in zip(ops.lltm_sequence(*args), want):
        assert _rel_err(got, w) < 1e-5
    use_mode("persistent")
    with pytest.raises(RuntimeError, match="shared memory"):
        ops.lltm_sequence(*args)


# Per grid cap, a state whose float64 kernels need more than the 48 KiB of shared memory a
# kernel gets without asking (so its plan raises the kernel's limit) and still fit one
# block: (steps, batch, features, state).
LARGE = {None: (3, 2, 5, 700), 1: (3, 3, 2, 64), 3: (3, 2, 5, 150), 1000: (3, 2, 5, 700)}


@pytest.mark.parametrize("max_blocks", list(LARGE), ids=str)
def test_cached_plans_serve_every_shape_and_cap_in_any_order(max_blocks, use_mode):
    """The launch plans are made once per kernel and shape and looked up after: a small
    state after a large one (whose plan raised the kernel's shared memory limit), and a
    large one after a small one, must both still run, and match the reference."""
    use_mode("persistent", max_blocks)
    small, medium, large = (3, 2, 4, 5), (4, 3, 2, 16), LARGE[max_blocks]
    for size in [small, large, medium, large, small, medium]:
        args = make_sequence_args(*size, device="cuda")
        grads = sequence_grads(size[0], size[1], size[3], device="cuda")
        _poison_free_memory()
        compare_sequence(args, grads, rtol=1e-10, atol=1e-12)


def test_an_option_set_between_calls_holds_for_the_next_call(use_mode):
    # the same shape under each mode in turn: a cached plan does not keep the old mode
    from tensortools.bench import kernel_count

    args = make_sequence_args(16, 4, 8, 32, dtype=torch.float32, device="cuda")
    counts = {}
    for mode in ["persistent", "loop", "persistent", "loop"]:
        use_mode(mode)
        counts.setdefault(mode, []).append(kernel_count(lambda: ops.lltm_sequence(*args), "cuda"))
    assert len(set(counts["loop"])) == 1 and len(set(counts["persistent"])) == 1, counts
    assert counts["loop"][0] >= counts["persistent"][0] + 16, counts


@pytest.mark.parametrize("path", PATHS)
def test_kernels_launched_per_step(path, use_mode):
    """Persistent: as many kernels for 32 steps as for 8, forward and backward (give or
    take the one or two that cuBLAS's choice for the whole-sequence products adds). Loop:
    at least two more kernels per step."""
    from tensortools.bench import kernel_count

    use_mode(path)

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
    each must get the one-thread result bit for bit. In a subprocess (which reads the mode
    from its environment at import): a hang is a timeout."""
    monkeypatch.setenv(MODE, "persistent")
    done = subprocess.run(
        [sys.executable, "-c", _CONCURRENT], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
