"""The LLTM cell's autograd route, measured: the lean path's Python ``autograd.Function``
(``LeanFunction.apply``) against a C++ ``torch::autograd::Function`` over the same
registered kernels, and where the time of a forward+backward step goes beyond the kernels.
This measurement chose the C++ Function: ``tensortools.ops.lltm`` now applies the
extension's own (``tensortools._C.lltm_cell_autograd``), so its rows here time that, through
the entry point (docs/performance.md, "The operators' plain path").

    python scripts/lltm_autograd_route.py [--rounds N] [--min-run-time S] [--build-dir DIR]

1. Builds (``torch.utils.cpp_extension.load_inline``, MAX_JOBS=2) a small C++ module:
   ``LltmCpp``, a ``torch::autograd::Function`` whose forward runs
   ``tensortools::lltm_forward`` below autograd and whose backward runs
   ``tensortools::lltm_backward``; ``lltm_cpp(input, weights, bias, old_h, old_cell)``
   applies it. Checks it in float64 against ``tensortools.reference.lltm`` and autograd.
2. Times one forward+backward step, ``torch.autograd.grad((h, c), params, (gh, gc))``
   over all five arguments (all require grad, as in ``tensortools/bench/lltm.py``; gh and
   gc random), for every variant, in interleaved rounds at 1 and 2 threads: wall time
   (``blocked_autorange``) and process CPU time (``time.process_time`` around a fixed
   number of calls). Ratios are medians of per-round ratios.
3. At 16/32/128 on one thread: the parts of a step timed alone on one input set (a hot
   cache) and their differences; 500 steps of ``ops.lltm`` under torch.profiler and
   cProfile, and of the C++ Function under torch.profiler.

Nothing here is a test: it prints tables and asserts only the numerical check.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import itertools
import os
import pstats
import statistics
import tempfile
import time

import torch
from torch.utils import benchmark, cpp_extension

import tensortools.ops  # noqa: F401  (registers the tensortools:: operators first)
from tensortools import ops, reference
from tensortools.bench.lltm import _products
from tensortools.ops import _checks

SIZES = ((16, 32, 128), (64, 1024, 128))
THREADS = (1, 2)
PROFILE_STEPS = 500
FORWARD = torch.ops.tensortools.lltm_forward.default
BACKWARD = torch.ops.tensortools.lltm_backward.default

CPP = r"""
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace {
using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using ForwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
using BackwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);

struct LltmCpp : public torch::autograd::Function<LltmCpp> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& weights,
                               const Tensor& bias, const Tensor& old_h, const Tensor& old_cell) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("tensortools::lltm_forward", "")
                         .typed<ForwardSig>();
    Tensor new_h, new_cell, gates, X;
    {
      at::AutoDispatchBelowADInplaceOrView below;  // the kernels, past the Autograd key
      std::tie(new_h, new_cell, gates, X) = op.call(input, weights, bias, old_h, old_cell);
    }
    ctx->save_for_backward({new_cell, gates, X, weights});
    ctx->mark_non_differentiable({gates, X});
    ctx->set_materialize_grads(false);
    return {new_h, new_cell, gates, X};
  }

  // (first order only: the backward kernel runs below autograd, as the lean path's does)
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("tensortools::lltm_backward", "")
                         .typed<BackwardSig>();
    const auto saved = ctx->get_saved_variables();
    const Tensor& new_cell = saved[0];
    const Tensor grad_h = grads[0].defined() ? grads[0] : at::zeros_like(new_cell);
    const Tensor grad_cell = grads[1].defined() ? grads[1] : at::zeros_like(new_cell);
    at::AutoDispatchBelowADInplaceOrView below;
    auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] =
        op.call(grad_h, grad_cell, new_cell, saved[1], saved[2], saved[3]);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
};
}  // namespace

std::tuple<Tensor, Tensor> lltm_cpp(const Tensor& input, const Tensor& weights, const Tensor& bias,
                                    const Tensor& old_h, const Tensor& old_cell) {
  auto out = LltmCpp::apply(input, weights, bias, old_h, old_cell);
  return {out[0], out[1]};
}
"""


def build(directory: str):
    os.makedirs(directory, exist_ok=True)
    os.environ["MAX_JOBS"] = "2"
    return cpp_extension.load_inline(
        "tt_lltm_autograd_route",
        cpp_sources=[CPP],
        functions=["lltm_cpp"],
        build_directory=directory,
        extra_cflags=["-O2"],
        verbose=False,
    )


def lean_function():
    """The LeanFunction class that ops.lltm applies (held in register's closure)."""
    call = importlib.import_module("tensortools.ops.lltm")._lltm_forward
    cells = dict(zip(call.__code__.co_freevars, (c.cell_contents for c in call.__closure__)))
    return cells["lean"]


def check(lltm_cpp) -> None:
    """float64, several shapes; outputs and the gradients of all five arguments against
    the reference under autograd, for losses on (h, c), h alone and c alone (an undefined
    incoming gradient); then gradcheck."""
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 1, 1), (3, 5, 4), (2, 7, 3), (16, 32, 8), (5, 1, 9)]
    done = 0
    for B, F, S in shapes:
        params = [
            torch.randn(B, F, generator=g, dtype=torch.float64),
            torch.randn(3 * S, S + F, generator=g, dtype=torch.float64),
            torch.randn(3 * S, generator=g, dtype=torch.float64),
            torch.randn(B, S, generator=g, dtype=torch.float64),
            torch.randn(B, S, generator=g, dtype=torch.float64),
        ]
        gh, gc = (torch.randn(B, S, generator=g, dtype=torch.float64) for _ in range(2))
        for uses in ("both", "h", "c"):
            results = []
            for fn in (lltm_cpp, reference.lltm):
                p = [t.clone().requires_grad_() for t in params]
                h, c = fn(*p)
                loss = {"both": (h * gh).sum() + (c * gc).sum(), "h": (h * gh).sum()}.get(
                    uses, (c * gc).sum()
                )
                results.append((h, c, *torch.autograd.grad(loss, p)))
            for a, b in zip(*results):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
            done += 1
        p = [t.clone().requires_grad_() for t in params]
        assert torch.autograd.gradcheck(lltm_cpp, p)
    print(
        f"check: lltm_cpp == reference.lltm (outputs, 5 gradients; float64) in {done} cases "
        f"({len(shapes)} shapes x losses on (h, c), h alone, c alone) and gradcheck on "
        f"{len(shapes)} shapes: passed"
    )


def make_sets(size, count=8):
    """Input sets as tensortools/bench/lltm.py makes them (all five require grad), with
    the incoming gradients of h and c."""
    B, F, S = size
    sets = []
    for _ in range(count):
        weights = torch.randn(3 * S, S + F).div_((S + F) ** 0.5)
        params = [torch.randn(B, F), weights, torch.randn(3 * S), torch.randn(B, S)]
        params = [p.requires_grad_() for p in (*params, torch.randn(B, S))]
        sets.append((params, (torch.randn(B, S), torch.randn(B, S))))
    return sets


def variants(lltm_cpp):
    lean = lean_function()

    def through(fn):
        def step(params, grads):
            return torch.autograd.grad(fn(*params), params, grads)

        return step

    def kernels(params, grads):
        with torch._C._AutoDispatchBelowAutograd():
            _, new_cell, gates, X = FORWARD(*params)
            return BACKWARD(*grads, new_cell, gates, X, params[1])

    return {
        "eager reference": through(reference.lltm),
        "ops.lltm": through(ops.lltm),
        "LeanFunction.apply": through(lambda *p: lean.apply(*p)[:2]),
        "C++ Function": through(lltm_cpp),
        "kernels direct": kernels,
        "products alone": lambda params, grads: _products(params, True),
    }


def measure(steps, size, threads, rounds, min_run_time):
    """Per variant, per round: wall us (blocked_autorange median), CPU and wall us per call
    over a fixed count; and the load average at each round."""
    torch.set_num_threads(threads)
    sets = make_sets(size)
    callers = {}
    for name, step in steps.items():
        cycle = itertools.cycle(sets)
        callers[name] = lambda step=step, cycle=cycle: step(*next(cycle))
    counts = {}
    for name, call in callers.items():  # warm up and fix the CPU-time loop's count
        for _ in range(5):
            call()
        t0 = time.perf_counter()
        for _ in range(20):
            call()
        counts[name] = max(20, int(0.06 / ((time.perf_counter() - t0) / 20)))
    wall = {n: [] for n in steps}
    cpu = {n: [] for n in steps}
    loop_wall = {n: [] for n in steps}
    loads = []
    names = list(steps)
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call = callers[name]
            timer = benchmark.Timer("call()", globals={"call": call}, num_threads=threads)
            wall[name].append(timer.blocked_autorange(min_run_time=min_run_time).median * 1e6)
            n = counts[name]
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                call()
            cpu[name].append((time.process_time() - c0) / n * 1e6)
            loop_wall[name].append((time.perf_counter() - w0) / n * 1e6)
    return wall, cpu, loop_wall, loads


def ratio(series, name, base):
    """Median, 1st and 3rd quartile of the per-round ratios name/base."""
    rs = sorted(a / b for a, b in zip(series[name], series[base]))
    q = statistics.quantiles(rs, n=4, method="inclusive") if len(rs) > 1 else rs * 3
    return statistics.median(rs), q[0], q[2]


def timing_tables(steps, rounds, min_run_time):
    verdicts, kept = [], {}
    for size, threads in itertools.product(SIZES, THREADS):
        wall, cpu, loop_wall, loads = measure(steps, size, threads, rounds, min_run_time)
        kept[size, threads] = wall, cpu
        where = f"{'/'.join(map(str, size))}, {threads} thread{'s' * (threads > 1)}"
        print(
            f"\n== {where}: fwd+bwd step, {rounds} rounds; load average (1 min) at each "
            f"round: {' '.join(f'{x:.2f}' for x in loads)} (2 CPUs; other engineers build "
            f"C++ now: the machine is loaded)"
        )
        print(
            f"{'variant':<20} {'wall us':>9} {'cpu us':>9} {'cpu/wall':>8} "
            f"{'wall/C++':>17} {'cpu/C++':>17} {'wall/eager':>10} {'wall/products':>13}"
        )
        for name in steps:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            lw = statistics.median(loop_wall[name])
            cells = []
            for series in (wall, cpu):
                m, q1, q3 = ratio(series, name, "C++ Function")
                cells.append(f"{m:.3f} [{q1:.3f},{q3:.3f}]")
            e, p = ratio(wall, name, "eager reference")[0], ratio(wall, name, "products alone")[0]
            print(
                f"{name:<20} {w:>9.1f} {c:>9.1f} {c / lw:>8.2f} {cells[0]:>17} {cells[1]:>17} "
                f"{e:>10.3f} {p:>13.2f}"
            )
        for clock, series in (("wall", wall), ("cpu", cpu)):
            for name in ("ops.lltm", "LeanFunction.apply"):
                m, q1, q3 = ratio(series, name, "C++ Function")
                within = "within 5%" if m <= 1.05 else f"NOT within 5% (+{(m - 1) * 100:.1f}%)"
                verdicts.append(
                    f"{where}, {clock}: {name} / C++ Function = {m:.3f} "
                    f"[IQR {q1:.3f}-{q3:.3f}]: {within}"
                )
    print("\n(wall/C++, cpu/C++: median [1st, 3rd quartile] of the per-round ratios; cpu us:")
    print(" process CPU time per call over a fixed count of calls; cpu/wall of that loop)")
    print("\nVerdict, the Python Function and ops.lltm (the C++ one through its entry point)")
    print("against the C++ autograd Function (fwd+bwd):")
    for line in verdicts:
        print("  " + line)
    return kept


def breakdown(kept):
    """Where a step's time goes: the median over rounds of each round's difference of two
    variants' times, in us per step."""
    layers = (
        (
            "entry point (overridden, check_tensors, routed, ...)",
            "ops.lltm",
            "C++ Function",
        ),
        ("Python Function over the C++ one", "LeanFunction.apply", "C++ Function"),
        ("autograd in C++ (node, saved tensors, engine, grad())", "C++ Function", "kernels direct"),
        ("kernels beyond the products (pointwise, alloc, ...)", "kernels direct", "products alone"),
        ("the three products alone (cat, addmm, 2 mm)", "products alone", None),
    )
    for (size, threads), (wall, cpu) in kept.items():
        print(f"\n== where the ops.lltm step goes, {'/'.join(map(str, size))}, {threads} thread(s)")
        print(
            f"{'layer (medians of per-round differences; noise can go < 0)':<56} "
            f"{'wall us':>9} {'cpu us':>9}"
        )
        for label, top, below in layers:
            cells = []
            for series in (wall, cpu):
                rows = zip(series[top], series[below] if below else [0.0] * len(series[top]))
                cells.append(statistics.median(a - b for a, b in rows))
            print(f"{label:<56} {cells[0]:>9.1f} {cells[1]:>9.1f}")


def profile(variant="ops.lltm", rounds_steps=PROFILE_STEPS, top=24, python=True):
    torch.set_num_threads(1)
    sets = make_sets((16, 32, 128))
    cycle = itertools.cycle(sets)
    step = variants_cache[variant]

    def run(n):
        for _ in range(n):
            step(*next(cycle))

    run(50)
    t0 = time.perf_counter()
    run(rounds_steps)
    plain = (time.perf_counter() - t0) / rounds_steps * 1e6
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(rounds_steps)
    events = prof.key_averages()
    n = rounds_steps
    print(
        f"\n== torch.profiler: {n} steps of {variant} fwd+bwd, 16/32/128, 1 thread "
        f"(unprofiled: {plain:.1f} us/step; load average {os.getloadavg()[0]:.2f})"
    )
    print(f"{'event':<66} {'calls/step':>10} {'self us/step':>12} {'total us/step':>13}")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
        print(
            f"{e.key[:66]:<66} {e.count / n:>10.1f} {e.self_cpu_time_total / n:>12.2f} "
            f"{e.cpu_time_total / n:>13.2f}"
        )
    by = {e.key: e for e in events}
    for kernel in ("tensortools::lltm_forward", "tensortools::lltm_backward"):
        if kernel in by:
            e = by[kernel]
            print(
                f"{kernel}: total {e.cpu_time_total / n:.2f} us/step, of which its own code "
                f"(checks and the pointwise pass; not an aten op) {e.self_cpu_time_total / n:.2f}, "
                f"aten ops inside it {(e.cpu_time_total - e.self_cpu_time_total) / n:.2f}"
            )
    if not python:
        return
    pr = cProfile.Profile()
    pr.enable()
    run(n)
    pr.disable()
    out = io.StringIO()
    stats = pstats.Stats(pr, stream=out)
    print(f"\n== cProfile: {n} steps of ops.lltm fwd+bwd, 16/32/128, 1 thread (us per step)")
    print(f"{'function':<70} {'calls/step':>10} {'tottime':>9} {'cumtime':>9}")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:22]
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in rows:
        where = f"{os.path.basename(file)}:{line}({func})"
        print(
            f"{where[-70:]:<70} {ncalls / n:>10.1f} {tottime / n * 1e6:>9.2f} "
            f"{cumtime / n * 1e6:>9.2f}"
        )


def pieces(lltm_cpp, steps, rounds=7):
    """Parts of the step timed alone (1 thread, 16/32/128, one input set: a hot cache),
    in interleaved rounds; medians over the rounds, and the layers as their differences."""
    torch.set_num_threads(1)
    params, grads = make_sets((16, 32, 128), 1)[0]
    input, weights, bias, old_h, old_cell = params
    S = old_h.shape[1]
    lean = lean_function()
    with torch.no_grad():
        _, new_cell, gates, X = FORWARD(*params)
        x = torch.cat([old_h, input], 1)
        d_gates = torch.randn_like(gates)

    def below(fn):
        def call():
            with torch._C._AutoDispatchBelowAutograd():
                return fn()

        return call

    def no_grad(fn):
        def call():
            with torch.no_grad():
                return fn()

        return call

    names = ("input", "weights", "bias", "old_h", "old_cell")
    parts = {
        "overridden(args)": lambda: _checks.overridden(tuple(params)),
        "check_tensors(...)": lambda: _checks.check_tensors("lltm", names, tuple(params)),
        "fwd: ops.lltm": lambda: ops.lltm(*params),
        "fwd: LeanFunction.apply": lambda: lean.apply(*params),
        "fwd: C++ Function": lambda: lltm_cpp(*params),
        "fwd: kernel direct": below(lambda: FORWARD(*params)),
        "fwd: cat + addmm": no_grad(
            lambda: torch.addmm(bias, torch.cat([old_h, input], 1), weights.t())
        ),
        "bwd: kernel direct": below(lambda: BACKWARD(*grads, new_cell, gates, X, weights)),
        "bwd: 3 mm + sum (as the kernel)": no_grad(
            lambda: (
                d_gates.t().mm(x),
                d_gates.sum(0),
                d_gates.mm(weights[:, :S]),
                d_gates.mm(weights[:, S:]),
            )
        ),
        "torch.empty(16, 128)": lambda: torch.empty(16, 128),
        "weights.narrow x2 (no grad)": no_grad(
            lambda: (weights.narrow(1, 0, S), weights.narrow(1, S, weights.shape[1] - S))
        ),
    }
    a, b = torch.randn(16, 128, requires_grad=True), torch.randn(16, 128, requires_grad=True)
    g = torch.randn(16, 128)
    parts["a + b (16x128), no grad"] = no_grad(lambda: a + b)
    parts["autograd.grad(a + b, (a, b), g)"] = lambda: torch.autograd.grad(a + b, (a, b), g)
    for name, step in steps.items():
        parts[f"fwd+bwd: {name}"] = lambda step=step: step(params, grads)
    times = {name: [] for name in parts}
    for r in range(rounds):
        names_r = list(parts)[r % len(parts) :] + list(parts)[: r % len(parts)]
        for name in names_r:
            t = benchmark.Timer("fn()", globals={"fn": parts[name]}, num_threads=1)
            times[name].append(t.blocked_autorange(min_run_time=0.05).median * 1e6)
    us = {name: statistics.median(v) for name, v in times.items()}
    print(
        f"\n== parts timed alone (16/32/128, 1 thread, one input set: hot cache; median of "
        f"{rounds} interleaved rounds of blocked_autorange, us; load average "
        f"{os.getloadavg()[0]:.2f})"
    )
    for name, value in us.items():
        print(f"  {name:<36} {value:>8.2f}")
    step = "fwd+bwd: "
    layers = (
        (
            "entry point, fwd+bwd (ops.lltm - C++ Function)",
            step + "ops.lltm",
            step + "C++ Function",
        ),
        (
            "Python Function over C++ Function, fwd+bwd",
            step + "LeanFunction.apply",
            step + "C++ Function",
        ),
        ("  of which forward", "fwd: LeanFunction.apply", "fwd: C++ Function"),
        ("C++ autograd over the kernels, fwd+bwd", step + "C++ Function", step + "kernels direct"),
        (
            "  of which forward (Function apply, node, saving)",
            "fwd: C++ Function",
            "fwd: kernel direct",
        ),
        (
            "  autograd.grad floor: one add node, 2 leaves, over its add",
            "autograd.grad(a + b, (a, b), g)",
            "a + b (16x128), no grad",
        ),
        ("kernels over products alone, fwd+bwd", step + "kernels direct", step + "products alone"),
        ("  forward kernel over its cat + addmm", "fwd: kernel direct", "fwd: cat + addmm"),
        (
            "  backward kernel over its 3 mm + sum",
            "bwd: kernel direct",
            "bwd: 3 mm + sum (as the kernel)",
        ),
    )
    print("  -- layers (differences of the medians above, us per step):")
    for label, top, base in layers:
        print(f"  {label:<56} {us[top] - us[base]:>8.2f}")
    ops_step, products = us[step + "ops.lltm"], us[step + "products alone"]
    print(
        f"  ops.lltm fwd+bwd / eager: {ops_step / us[step + 'eager reference']:.3f}; "
        f"/ products alone: {ops_step / products:.2f}; kernels direct / products alone: "
        f"{us[step + 'kernels direct'] / products:.2f}; C++ Function / products alone: "
        f"{us[step + 'C++ Function'] / products:.2f}"
    )


variants_cache: dict = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--min-run-time", type=float, default=0.15)
    parser.add_argument(
        "--build-dir", default=os.path.join(tempfile.gettempdir(), "tt_lltm_autograd_route")
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    start = time.perf_counter()
    ext = build(args.build_dir)
    print(f"built the C++ Function in {time.perf_counter() - start:.0f} s ({args.build_dir})")
    check(ext.lltm_cpp)
    variants_cache.update(variants(ext.lltm_cpp))
    print(
        "\nStep timed: h, c = f(*params); torch.autograd.grad((h, c), params, (gh, gc)) over "
        "all five arguments (float32). 'kernels direct': lltm_forward then lltm_backward "
        "below autograd; 'products alone': tensortools.bench.lltm._products (cat, addmm, "
        "2 mm). torch " + torch.__version__
    )
    breakdown(timing_tables(variants_cache, args.rounds, args.min_run_time))
    pieces(ext.lltm_cpp, variants_cache)
    profile()
    profile("C++ Function", top=16, python=False)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
