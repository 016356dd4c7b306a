"""What every operator's tests share: the layouts and dtypes its samples come in, and the
checks every sample goes through, on every device.

Each ``tests/test_ops_<op>.py`` has ``SAMPLE_BUILDERS``, one builder per raw operator of
``torch.ops.tensortools`` it covers, ``(layout, dtype, device) -> [args, ...]``, and the
plain-PyTorch maths of each raw operator (``references``, from ``tensortools.reference``
where it has them). Its ``class TestSamples(OperatorTests)`` runs the checks below, and
``sample_inputs = TestSamples.sample_inputs`` is the operator's ``sample_inputs(device)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import pytest
import torch
from conftest import DEVICES

from _support import tiers
from _support.op_records import AutocastUnit, CompileCall, ErrorCall, Transform

T = torch.ops.tensortools
D = torch.float64
LAYOUTS = ["contiguous", "transposed", "channels_last", "expanded", "empty"]
#: The dtypes of a floating operator's kernels on each device type.
FLOATING = {
    "cpu": (torch.float64, torch.float32),
    "cuda": (torch.float64, torch.float32, torch.float16, torch.bfloat16),
}
#: max |half result - float64 reference| allowed, relative to the reference's scale
HALF_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
#: The same for every dtype a sample comes in (float64 against float64 maths: rounding).
TOLERANCE = {torch.float64: 1e-9, **HALF_TOLERANCE}


class Sample(NamedTuple):
    """One call of a raw operator: ``getattr(torch.ops.tensortools, op).default(*args)``."""

    op: str
    args: tuple
    layout: str
    dtype: torch.dtype


def laid_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t (or, for "expanded", a tensor of t's shape and first row) in the given layout;
    layouts that do not apply to t's rank leave it contiguous."""
    t = t.detach()
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "expanded" and t.dim() >= 1 and t.shape[0] > 1:
        return t[:1].expand(t.shape)
    return t.contiguous()


def make(shape, layout: str = "contiguous", dtype: torch.dtype = D, device="cpu", scale=1.0):
    """Random values of `shape` (standard normal times `scale`; integers for an integer
    dtype) in `dtype`, on `device`, laid out as `layout`."""
    t = torch.randn(shape, dtype=D, device=device) * scale
    return laid_out(t.to(dtype) if dtype.is_floating_point else (t * 10).to(dtype), layout)


def requiring_grad(*tensors):
    """The floating tensors among `tensors` set to require grad (in place)."""
    return [t.requires_grad_() if t.is_floating_point() else t for t in tensors]


def to_each(args, **kw):
    """Each of args converted with Tensor.to(**kw)."""
    return [a.to(**kw) for a in args]


def _results(op, args, outputs) -> tuple:
    """What a call produced: its outputs, then the arguments its schema says it writes."""
    outputs = () if outputs is None else outputs if isinstance(outputs, tuple) else (outputs,)
    written = [
        a for a, s in zip(args, op._schema.arguments) if s.alias_info and s.alias_info.is_write
    ]
    return (*outputs, *written)


def _as_reference(a):
    """A float64 copy of a floating tensor argument (the same values; integer and bool
    tensors keep their dtype, whose maths is exact), requiring grad where `a` does."""
    if not isinstance(a, torch.Tensor):
        return a
    copy = a.detach().to(D) if a.is_floating_point() else a.detach()
    return copy.clone().requires_grad_(a.requires_grad)


def assert_close_to_reference(got, want, dtype: torch.dtype, factor: float, what: str) -> None:
    """An operator's result against the float64 maths on the same values: within
    TOLERANCE[dtype] * factor, relative and of the result's scale (at least 1); integer and
    bool results exactly."""
    if got is None or want is None:
        assert got is None and want is None, what
        return
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if not got.is_floating_point():
        assert torch.equal(got, want.to(got.dtype)), what
        return
    want = want.detach().to(D)
    finite = want[want.isfinite()]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    tol = TOLERANCE[dtype] * factor
    torch.testing.assert_close(
        got.detach().to(D), want, rtol=tol, atol=tol * scale, equal_nan=True, msg=what
    )


class OperatorTests:
    """The checks every operator's samples go through, on every device: the results and
    (float64) gradients against the plain-PyTorch maths, ``torch.autograd.gradcheck``,
    ``torch.library.opcheck``, the meta kernel against the real one, and a meta argument
    among real ones refused. A test module subclasses it as ``TestSamples`` (pytest
    collects the tests there) and sets:

    - ``builders``: raw operator name -> ``(layout, dtype, device) -> [args, ...]``;
    - ``references``: raw operator name -> its maths in plain PyTorch, taking the same
      arguments (float64 copies) and returning every output; one that writes an argument
      in place writes its copy the same way;
    - ``dtypes``: raw operator name -> {device type: dtypes}, where not FLOATING;
    - ``numbers``: raw operator name -> positions of 0-d tensors it reads as numbers;
    - ``tolerance``: the factor on TOLERANCE for its results (errors grow with depth);
    - ``nondet_tol``: device type -> gradcheck's tolerance between two backward calls,
      where a library the kernels call does not sum in a fixed order (default 0);
    - ``no_derivative``: raw operator name -> the error (a regex, naming the operator)
      differentiating it raises, in reverse and forward mode, for the operators no sample
      differentiates (backward kernels, in-place updates, inference-only forms).

    and, for the sweeps over every operator (``_support/op_records.py``), its cases:

    - ``error_calls``: case name (the public entry point, ``(form)`` after it where it has
      several) -> :class:`ErrorCall`, its hostile arguments (tests/test_ops_errors.py);
    - ``raw_accepts``: raw operator name -> argument -> the hostile variants it takes;
    - ``autocast``: case name -> :class:`AutocastUnit`, against the plain pair under
      autocast (tests/test_ops_autocast.py); or ``autocast_elsewhere``: public entry point
      -> (the test file that covers it, what that file calls);
    - ``compile_calls``: public entry point -> :class:`CompileCall`, over a MetadataTensor
      under torch.compile (tests/test_compile.py);
    - ``transforms``: case name -> :class:`Transform`, torch.func and forward-mode AD
      against the reference (tests/test_ops_func.py).
    """

    builders: dict[str, Callable] = {}
    references: dict[str, Callable] = {}
    dtypes: dict[str, dict[str, tuple]] = {}
    numbers: dict[str, tuple[int, ...]] = {}
    tolerance: float = 4.0
    nondet_tol: dict[str, float] = {}
    no_derivative: dict[str, str] = {}
    error_calls: dict[str, ErrorCall] = {}
    raw_accepts: dict[str, dict[str, frozenset[str]]] = {}
    autocast: dict[str, AutocastUnit] = {}
    autocast_elsewhere: dict[str, tuple[str, str]] = {}
    compile_calls: dict[str, CompileCall] = {}
    transforms: dict[str, Transform] = {}

    @classmethod
    def sample_inputs(
        cls, device, layouts: Iterable[str] = LAYOUTS, dtypes: Iterable | None = None
    ) -> Iterator[Sample]:
        """Every sample of the operators on `device`: each layout of `layouts`, each dtype
        the operator's kernels take there (or those of `dtypes` among them)."""
        kind = torch.device(device).type
        for layout in layouts:
            for name, build in cls.builders.items():
                for dtype in cls.dtypes.get(name, FLOATING)[kind]:
                    if dtypes is None or dtype in dtypes:
                        for args in build(layout, dtype, device):
                            yield Sample(name, tuple(args), layout, dtype)

    def pytest_generate_tests(self, metafunc):
        if "name" in metafunc.fixturenames:
            metafunc.parametrize("name", sorted(self.builders))

    def test_every_operator_has_a_reference(self):
        assert sorted(self.references) == sorted(self.builders)

    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_matches_reference(self, device, layout):
        for s in self.sample_inputs(device, [layout]):
            op = getattr(T, s.op).default
            want_args = [_as_reference(a) for a in s.args]  # before the call writes any
            with torch.no_grad():
                got = _results(op, s.args, op(*s.args))
                want = _results(op, want_args, self.references[s.op](*want_args))
            assert len(got) == len(want), s.op
            for i, (g, w) in enumerate(zip(got, want)):
                what = f"{s.op} ({s.layout}, {s.dtype}) result {i}"
                assert_close_to_reference(g, w, s.dtype, self.tolerance, what)

    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_gradients_match_reference(self, device, layout):
        """Every differentiable output's gradient, given in the sample's layout (an
        expanded one, as .sum() gives), for every argument that requires grad."""
        for s in self.sample_inputs(device, [layout], [D]):
            wrt = [
                i for i, a in enumerate(s.args) if isinstance(a, torch.Tensor) and a.requires_grad
            ]
            if not wrt:
                continue
            op = getattr(T, s.op).default
            want_args = [_as_reference(a) for a in s.args]
            outs = _results(op, s.args, op(*s.args))
            want_outs = _results(op, want_args, self.references[s.op](*want_args))
            diff = [
                i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad
            ]
            grads = [laid_out(torch.randn_like(outs[i]), layout) for i in diff]

            def grad(outputs, args):
                # (an empty output the maths makes anew, as for no steps, has no graph)
                pairs = [(outputs[i], g) for i, g in zip(diff, grads) if outputs[i].requires_grad]
                if not pairs:
                    return [torch.zeros_like(args[i]) for i in wrt]
                outputs, grad_outputs = zip(*pairs)
                return torch.autograd.grad(
                    outputs,
                    [args[i] for i in wrt],
                    grad_outputs,
                    allow_unused=True,
                    materialize_grads=True,
                )

            for i, g, w in zip(wrt, grad(outs, s.args), grad(want_outs, want_args)):
                what = f"{s.op} ({s.layout}) gradient of argument {i}"
                assert_close_to_reference(g, w, D, self.tolerance, what)

    def _differentiated(self, device, layouts):
        """The float64 samples with an argument requiring grad, each with a function of
        its arguments giving its differentiable outputs (gradcheck differentiates every
        output)."""
        for s in self.sample_inputs(device, layouts, [D]):
            if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in s.args):
                continue
            op = getattr(T, s.op).default
            outs = _results(op, s.args, op(*s.args))
            diff = [
                i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad
            ]

            def differentiable_outputs(*args, op=op, diff=diff):
                outs = _results(op, args, op(*args))
                return tuple(outs[i] for i in diff)

            yield s, differentiable_outputs

    @pytest.mark.slow
    @pytest.mark.parametrize("device", DEVICES)
    def test_gradcheck(self, device):
        """gradcheck in full on contiguous samples, in its fast mode (one random
        projection) on the other layouts it can perturb (an expanded tensor's elements
        share memory)."""
        layouts = [layout for layout in LAYOUTS if layout != "expanded"]
        tol = self.nondet_tol.get(torch.device(device).type, 0.0)
        for s, fn in self._differentiated(device, layouts):
            fast = s.layout != "contiguous"
            assert torch.autograd.gradcheck(fn, s.args, fast_mode=fast, nondet_tol=tol), s

    @pytest.mark.slow
    @pytest.mark.parametrize("layout", [layout for layout in LAYOUTS if layout != "expanded"])
    @pytest.mark.parametrize("device", DEVICES)
    def test_gradcheck_forward_and_batched(self, device, layout):
        """gradcheck as torch checks its own operators: the tangents (forward-mode AD)
        against finite differences, and the backward and the tangents under vmap
        (torch.func's batching rules) against a loop. In fast mode by default; the full
        tier checks contiguous samples' whole Jacobians (seconds per sample for the
        conv-bn)."""
        tol = self.nondet_tol.get(torch.device(device).type, 0.0)
        for s, fn in self._differentiated(device, [layout]):
            assert torch.autograd.gradcheck(
                fn,
                s.args,
                fast_mode=layout != "contiguous" or not tiers.full(),
                nondet_tol=tol,
                check_forward_ad=True,
                check_batched_grad=True,
                check_batched_forward_grad=True,
            ), s

    def test_derivative_checked_or_refused(self, name):
        """Every operator is either differentiated by some float64 sample (the gradchecks
        above) or refuses a derivative with an error naming it, in reverse and in forward
        mode: none is left unchecked, and none gives a silent zero (as torch's autograd
        fallback does for an in-place operator)."""
        samples = [s for s in self.sample_inputs("cpu", ["contiguous"], [D]) if s.op == name]
        differentiated = any(
            isinstance(a, torch.Tensor) and a.requires_grad for s in samples for a in s.args
        )
        assert differentiated != (name in self.no_derivative), (
            f"{name}: differentiated by a sample and listed in no_derivative"
            if differentiated
            else f"{name}: no sample differentiates it; list the error it raises in no_derivative"
        )
        if differentiated:
            return
        op = getattr(T, name).default
        # Every floating argument it only reads requires grad (a written one cannot: it
        # would be a leaf modified in place).
        args = [
            a.detach().clone().requires_grad_(not (arg.alias_info and arg.alias_info.is_write))
            if isinstance(a, torch.Tensor) and a.is_floating_point()
            else a
            for a, arg in zip(samples[0].args, op._schema.arguments)
        ]

        def floating_results(*args):
            outs = _results(op, args, op(*args))
            return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

        for mode in ({}, {"check_backward_ad": False, "check_forward_ad": True}):
            with pytest.raises((RuntimeError, NotImplementedError), match=self.no_derivative[name]):
                torch.autograd.gradcheck(floating_results, args, fast_mode=True, **mode)

    @pytest.mark.slow
    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_opcheck(self, device, layout):
        """Schema, autograd registration, fake tensors against the real kernel including
        strides, AOT dispatch with dynamic shapes."""
        for s in self.sample_inputs(device, [layout]):
            torch.library.opcheck(getattr(T, s.op).default, s.args)

    @pytest.mark.slow
    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_meta_kernel_describes_the_real_result(self, device, layout):
        """Shapes, dtypes and the strides of every non-trivial dimension agree; the meta
        kernel never computes (its outputs are meta tensors)."""
        for s in self.sample_inputs(device, [layout]):
            op = getattr(T, s.op).default
            real = op(*s.args)
            meta = op(
                *[a.detach().to("meta") if isinstance(a, torch.Tensor) else a for a in s.args]
            )
            real = real if isinstance(real, tuple) else (real,)
            meta = meta if isinstance(meta, tuple) else (meta,)
            assert len(real) == len(meta), s.op
            for r, m in zip(real, meta):
                if r is None:
                    assert m is None, s.op
                    continue
                assert m.is_meta, s.op
                assert (m.shape, m.dtype) == (r.shape, r.dtype), s
                assert [st for n, st in zip(m.shape, m.stride()) if n > 1] == [
                    st for n, st in zip(r.shape, r.stride()) if n > 1
                ], s

    def test_one_argument_on_meta_is_refused(self, name):
        """A meta tensor among CPU ones dispatches to the meta kernel, which must refuse
        the mix (never hand back uninitialised memory as a result). The 0-d tensors an
        operator reads as numbers (`numbers`) are not a tensor's device."""
        sample = next(s for s in self.sample_inputs("cpu", ["contiguous"], [D]) if s.op == name)
        op = getattr(T, name).default
        args = [a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args]
        if sum(isinstance(a, torch.Tensor) for a in args) < 2:
            pytest.skip(f"{name} takes one tensor: there is no mix of devices to refuse")
        for index, a in enumerate(args):
            if not isinstance(a, torch.Tensor) or index in self.numbers.get(name, ()):
                continue
            mixed = [x.to("meta") if i == index else x for i, x in enumerate(args)]
            with pytest.raises(ValueError, match="must be on the same device"):
                op(*mixed)
