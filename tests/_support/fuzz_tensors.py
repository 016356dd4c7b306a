"""Hypothesis strategies for hostile tensors: every dtype, odd memory layouts, special
values. Shared by the property tests of the operators and of ScalarTensor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTEGER = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
COMPLEX = (torch.complex64, torch.complex128)
ALL_DTYPES = FLOATING + INTEGER + (torch.bool,) + COMPLEX

# How a tensor's memory is laid out; the values are the same whatever the layout.
LAYOUTS = ("contiguous", "transposed", "strided", "expanded", "offset")


@dataclass(frozen=True)
class Kind:
    """How to make a fuzzed tensor: dtype, memory layout, whether special values
    (NaN, ±Inf, huge, tiny, subnormal, ±0, integer extremes) are mixed in, and a seed."""

    dtype: torch.dtype
    layout: str
    special: bool
    seed: int

    def make(self, *shape: int, device: str = "cpu") -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)
        if self.layout == "expanded" and shape and shape[0] > 1:
            return _on(_values((1, *shape[1:]), self.dtype, self.special, g), device).expand(shape)
        return _lay_out(_on(_values(shape, self.dtype, self.special, g), device), self.layout)


def _on(t: torch.Tensor, device: str) -> torch.Tensor:
    return torch.empty_like(t, device="meta") if device == "meta" else t.to(device)


def special_floats(dtype: torch.dtype) -> list[float]:
    """NaN, ±Inf, values whose products overflow, the smallest normal and a subnormal,
    signed zeros. A huge value times a huge value is Inf whatever the order of a sum,
    so references of the same dtype agree on where results overflow."""
    info = torch.finfo(dtype)
    huge = 2 * math.sqrt(info.max)
    return [math.nan, math.inf, -math.inf, huge, -huge, info.tiny, info.tiny / 4, 0.0, -0.0]


def _values(shape: tuple, dtype: torch.dtype, special: bool, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in INTEGER:
        info = torch.iinfo(dtype)
        t = torch.randint(max(info.min, -50), 51, shape, generator=g)
        if special:
            extremes = torch.tensor([info.min, info.max, 0], dtype=torch.int64)
            t = _sprinkle(t, extremes, g)
        return t.to(dtype)
    t = torch.randn(shape, generator=g, dtype=torch.float64) * 2
    if special:
        t = _sprinkle(t, torch.tensor(special_floats(_real_of(dtype)), dtype=torch.float64), g)
    if dtype in COMPLEX:
        imag = torch.randn(shape, generator=g, dtype=torch.float64)
        return torch.complex(t, imag).to(dtype)
    return t.to(dtype)


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def _sprinkle(t: torch.Tensor, pool: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """t with about a third of its elements replaced by elements of pool."""
    if t.numel() == 0:
        return t
    mask = torch.rand(t.shape, generator=g) < 1 / 3
    picks = pool[torch.randint(0, len(pool), t.shape, generator=g)]
    return torch.where(mask, picks, t)


def _lay_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided" and t.dim() >= 1:
        return torch.stack([t, torch.zeros_like(t)], dim=-1)[..., 0]
    if layout == "offset":
        buffer = torch.zeros(t.numel() + 3, dtype=t.dtype, device=t.device)
        buffer[3:] = t.reshape(-1)
        return buffer[3:].view(t.shape)
    return t


def kinds(
    dtypes=ALL_DTYPES, special: bool | None = None, prefer: tuple = ()
) -> st.SearchStrategy[Kind]:
    """Kinds of tensor; dtypes in `prefer` are drawn about half the time."""
    dtype = st.sampled_from(dtypes)
    if prefer:
        dtype = st.one_of(st.sampled_from(prefer), dtype)
    return st.builds(
        Kind,
        dtype,
        st.sampled_from(LAYOUTS),
        st.booleans() if special is None else st.just(special),
        st.integers(0, 2**31 - 1),
    )


# Python numbers, from ordinary to hostile.
numbers = st.one_of(
    st.integers(-5, 5),
    st.floats(-10, 10),
    st.booleans(),
    st.sampled_from(
        [math.nan, math.inf, -math.inf, 1e300, -1e300, 5e-324, -0.0, 2**63, -(2**63) - 1, 1 + 2j]
    ),
)
