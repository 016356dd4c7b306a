"""What every operator's tests share: the layouts its samples come in, and the checks
each operator's samples go through (``torch.library.opcheck``, the meta kernel against
the real one, a meta argument among real ones refused). Each ``tests/test_ops_<op>.py``
defines its ``sample_inputs(device, layout)`` and runs these checks over them on every
device; ``OPERATORS`` there names the ``torch.ops.tensortools`` operators it covers."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch
from conftest import DEVICES

T = torch.ops.tensortools
D = torch.float64
LAYOUTS = ["contiguous", "transposed", "channels_last", "expanded", "empty"]
#: max |half result - float64 reference| allowed, relative to the reference's scale
HALF_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}


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


def requiring_grad(*tensors):
    """The floating tensors among `tensors` set to require grad (in place)."""
    return [t.requires_grad_() if t.is_floating_point() else t for t in tensors]


def check_opcheck(samples: Iterable[tuple[str, tuple]]) -> None:
    """torch.library.opcheck on each (operator name, args): schema, autograd registration,
    fake tensors against the real kernel including strides, AOT dispatch."""
    for name, args in samples:
        torch.library.opcheck(getattr(T, name).default, args)


def check_meta_describes_the_real_result(samples: Iterable[tuple[str, tuple]]) -> None:
    """Shapes, dtypes and the strides of every non-trivial dimension agree; the meta
    kernel never computes (its outputs are meta tensors)."""
    for name, args in samples:
        op = getattr(T, name).default
        real = op(*args)
        meta = op(*[a.detach().to("meta") if isinstance(a, torch.Tensor) else a for a in args])
        real = real if isinstance(real, tuple) else (real,)
        meta = meta if isinstance(meta, tuple) else (meta,)
        assert len(real) == len(meta), name
        for r, m in zip(real, meta):
            if r is None:
                assert m is None, name
                continue
            assert m.is_meta, name
            assert (m.shape, m.dtype) == (r.shape, r.dtype), name
            assert [s for n, s in zip(m.shape, m.stride()) if n > 1] == [
                s for n, s in zip(r.shape, r.stride()) if n > 1
            ], name


def check_one_argument_on_meta_is_refused(name: str, args: tuple, numbers=()) -> None:
    """A meta tensor among CPU ones dispatches to the meta kernel, which must refuse the
    mix (never hand back uninitialised memory as a result). `numbers`: the positions of
    0-d tensors the operator reads as numbers (their device is not a tensor's device)."""
    op = getattr(T, name).default
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    if sum(isinstance(a, torch.Tensor) for a in args) < 2:
        pytest.skip(f"{name} takes one tensor: there is no mix of devices to refuse")
    for index, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or index in numbers:
            continue
        mixed = [x.detach().to("meta") if i == index else x for i, x in enumerate(args)]
        with pytest.raises(ValueError, match="must be on the same device"):
            op(*mixed)


def lltm_args(batch, features, state, dtype=D, device="cpu"):
    g = {"dtype": dtype, "device": device}
    weights = torch.randn(3 * state, state + features, **g) / (state + features) ** 0.5
    return [
        torch.randn(batch, features, **g),
        weights,
        torch.randn(3 * state, **g),
        torch.randn(batch, state, **g),
        torch.randn(batch, state, **g),
    ]


def sequence_args(steps, batch, features, state, dtype=D, device="cpu"):
    cell = lltm_args(batch, features, state, dtype, device)
    return [torch.randn(steps, batch, features, dtype=dtype, device=device), *cell[1:]]


def to_each(args, **kw):
    """Each of args converted with Tensor.to(**kw)."""
    return [a.to(**kw) for a in args]


def operator_checks(builders: dict, numbers: dict | None = None) -> tuple:
    """For a test module whose SAMPLE_BUILDERS map each operator it covers to a builder
    ``(layout, device) -> [args, ...]``: its ``sample_inputs(device, layout)`` and the
    three tests every operator's samples go through, to be assigned at the module's top
    level (pytest collects them there). `numbers`: operator -> positions of 0-d tensors
    it reads as numbers."""

    def sample_inputs(device, layout="contiguous"):
        """(operator name, args) for each operator, its arguments made on `device` in
        `layout` (one of LAYOUTS)."""
        for name, build in builders.items():
            for args in build(layout, device):
                yield name, args

    @pytest.mark.slow
    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_opcheck_over_layouts(device, layout):
        check_opcheck(sample_inputs(device, layout))

    @pytest.mark.slow
    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("device", DEVICES)
    def test_meta_kernel_describes_the_real_result(device, layout):
        check_meta_describes_the_real_result(sample_inputs(device, layout))

    @pytest.mark.parametrize("name", tuple(builders))
    def test_one_argument_on_meta_is_refused(name):
        args = next(a for n, a in sample_inputs("cpu") if n == name)
        check_one_argument_on_meta_is_refused(name, args, (numbers or {}).get(name, ()))

    return (
        sample_inputs,
        test_opcheck_over_layouts,
        test_meta_kernel_describes_the_real_result,
        test_one_argument_on_meta_is_refused,
    )
