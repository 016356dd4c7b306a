"""The LLTM modules: the cell (:class:`LLTM`) and the layer over whole sequences
(:class:`LLTMSequence`), with one parameter layout."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from tensortools import ops
from tensortools.nn._checks import positive_int
from tensortools.ops.lltm import lltm_sequence_batch_first

__all__ = ["LLTM", "LLTMSequence"]


class _LLTMParameters(torch.nn.Module):
    """The LLTM's parameters, the same for the cell and the sequence layer (so that one's
    state dict loads into the other): ``weights`` 3S×(S+F) and ``bias`` 3S, initialised
    uniform in ±1/sqrt(state_size)."""

    def __init__(self, name: str, input_features: int, state_size: int, device, dtype) -> None:
        super().__init__()
        self.input_features = positive_int(name, "input_features", input_features)
        self.state_size = positive_int(name, "state_size", state_size)
        factory = {"device": device, "dtype": dtype}
        self.weights = torch.nn.Parameter(
            torch.empty(3 * state_size, state_size + input_features, **factory)
        )
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.state_size)
        for p in (self.weights, self.bias):
            torch.nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


class LLTM(_LLTMParameters):
    """The LLTM recurrent cell as a module, running the fused :func:`tensortools.ops.lltm`.

    ``weights`` is 3S×(S+F) and ``bias`` 3S (S = ``state_size``, F = ``input_features``),
    both initialised uniform in ±1/sqrt(state_size).
    ``forward(input, (h, c))`` takes input B×F and h, c B×S; returns ``(new_h, new_cell)``.
    """

    def __init__(self, input_features: int, state_size: int, *, device=None, dtype=None) -> None:
        super().__init__("LLTM", input_features, state_size, device, dtype)

    def forward(self, input: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        old_h, old_cell = _state_pair("LLTM", state, "(h, c) of tensors, each batch x state_size")
        return ops.lltm(input, self.weights, self.bias, old_h, old_cell)


def _state_pair(module: str, state: Any, pair: str) -> tuple[Any, Any]:
    """state as its two tensors, or a TypeError naming 'state' and what it got (one tensor
    would otherwise be unpacked along its first dim: "too many values to unpack")."""
    if isinstance(state, (tuple, list)) and len(state) == 2:
        return state[0], state[1]
    if isinstance(state, Tensor):
        got = f"one tensor of shape {list(state.shape)} (pass the hidden and cell states apart)"
    elif isinstance(state, (tuple, list)):
        got = f"a {type(state).__name__} of {len(state)}"
    else:
        got = type(state).__name__
    raise TypeError(f"{module}: 'state' must be a pair {pair}; got {got}")


class LLTMSequence(_LLTMParameters):
    """The LLTM over whole sequences, running :func:`tensortools.ops.lltm_sequence`.

    Parameters as :class:`LLTM` (``weights`` 3S×(S+F), ``bias`` 3S; a cell's state dict
    loads into this module and back). ``forward(input, state=None)`` takes input T×B×F
    (B×T×F with ``batch_first=True``) and ``state = (h0, c0)``, both B×S, zeros when
    omitted; returns ``(output, (h_n, c_n))`` as ``torch.nn.LSTM`` does: output T×B×S
    (B×T×S with ``batch_first``) holds every step's h, h_n and c_n the last step's h and
    cell. Every sequence of a batch has the same length (no padded or packed sequences).
    """

    def __init__(
        self,
        input_features: int,
        state_size: int,
        batch_first: bool = False,
        *,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__("LLTMSequence", input_features, state_size, device, dtype)
        if not isinstance(batch_first, bool):
            raise TypeError(
                f"LLTMSequence: 'batch_first' must be a bool, got {type(batch_first).__name__}"
            )
        self.batch_first = batch_first

    def forward(
        self, input: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not isinstance(input, Tensor):
            raise TypeError(
                f"LLTMSequence: 'input' must be a torch.Tensor, got {type(input).__name__}"
            )
        if input.dim() != 3:
            layout = "batch x time x features" if self.batch_first else "time x batch x features"
            raise ValueError(f"LLTMSequence: 'input' must be 3-D ({layout}), got {input.dim()}-D")
        if state is None:
            zeros = input.new_zeros(input.shape[0 if self.batch_first else 1], self.state_size)
            state = (zeros, zeros)
        else:
            state = _state_pair(
                "LLTMSequence", state, "(h0, c0) of tensors, each batch x state_size, or None"
            )
        # (batch first: one call with the samples at dim 0 of the input and of every
        # result, so that a type such as a MetadataTensor batch sees them there)
        run = lltm_sequence_batch_first if self.batch_first else ops.lltm_sequence
        output, h_n, c_n = run(input, self.weights, self.bias, *state)
        return output, (h_n, c_n)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", batch_first=True" if self.batch_first else "")
