"""``torch.nn`` modules over tensortools' fused operators."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch import distributed as dist

from tensortools import ops
from tensortools.ops._sync_conv_bn import sync_conv_bn2d
from tensortools.ops.lltm import lltm_sequence_batch_first

__all__ = [
    "FusedConvBN2d",
    "GraphConv",
    "LLTM",
    "LLTMSequence",
    "SyncFusedConvBN2d",
    "convert_sync_fused",
]


def _positive_int(module: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{module}: '{name}' must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{module}: '{name}' must be positive, got {value}")
    return value


def _positive_pair(module: str, name: str, value: object, minimum: int = 1) -> tuple[int, int]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"{module}: '{name}' must be an int or a pair of ints, got {value!r}")
    if min(values) < minimum:
        raise ValueError(f"{module}: '{name}' must be >= {minimum}, got {value!r}")
    return values


class _LLTMParameters(torch.nn.Module):
    """The LLTM's parameters, the same for the cell and the sequence layer (so that one's
    state dict loads into the other): ``weights`` 3S×(S+F) and ``bias`` 3S, initialised
    uniform in ±1/sqrt(state_size)."""

    def __init__(self, name: str, input_features: int, state_size: int, device, dtype) -> None:
        super().__init__()
        self.input_features = _positive_int(name, "input_features", input_features)
        self.state_size = _positive_int(name, "state_size", state_size)
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


class GraphConv(torch.nn.Module):
    """Graph convolution ``adj @ x @ weight + bias`` over :func:`tensortools.ops.graph_conv`.

    ``weight`` is in_features×out_features (Glorot-uniform), ``bias`` out_features
    (zeros) or absent. ``forward(adj, x)``: adj N×N (dense or sparse), x N×in_features.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.in_features = _positive_int("GraphConv", "in_features", in_features)
        self.out_features = _positive_int("GraphConv", "out_features", out_features)
        factory = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(in_features, out_features, **factory))
        self.bias = torch.nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, adj: Tensor, x: Tensor) -> Tensor:
        return ops.graph_conv(adj, x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class FusedConvBN2d(torch.nn.Module):
    """``Conv2d(bias=False)`` followed by ``BatchNorm2d``, over
    :func:`tensortools.ops.fused_conv_bn2d`.

    Behaves as ``nn.Sequential(nn.Conv2d(in_channels, out_channels, kernel_size, stride,
    padding, bias=False), nn.BatchNorm2d(out_channels, eps, momentum, affine,
    track_running_stats))`` in training and evaluation (momentum ``None`` is a cumulative
    average, as there), with parameters ``weight`` (the convolution's), ``gamma`` and
    ``beta`` (batch norm's weight and bias) and buffers ``running_mean``, ``running_var``,
    ``num_batches_tracked``. Training keeps less for backward: the convolution is recomputed
    there rather than stored. ``forward(input)``: N×in_channels×H×W. Under
    ``torch.autocast`` too the result has the pair's dtype (the autocast dtype), and the
    running statistics stay in theirs.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        *,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.in_channels = _positive_int(name, "in_channels", in_channels)
        self.out_channels = _positive_int(name, "out_channels", out_channels)
        self.kernel_size = _positive_pair(name, "kernel_size", kernel_size)
        self.stride = _positive_pair(name, "stride", stride)
        self.padding = _positive_pair(name, "padding", padding, minimum=0)
        self.eps, self.momentum = eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        factory = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(
            torch.empty(out_channels, in_channels, *self.kernel_size, **factory)
        )
        if affine:
            self.gamma = torch.nn.Parameter(torch.empty(out_channels, **factory))
            self.beta = torch.nn.Parameter(torch.empty(out_channels, **factory))
        else:
            self.register_parameter("gamma", None)
            self.register_parameter("beta", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(out_channels, **factory))
            self.register_buffer("running_var", torch.ones(out_channels, **factory))
            self.register_buffer(
                "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
            )
        else:
            for buffer in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(buffer, None)
        self.reset_parameters()

    @classmethod
    def from_modules(cls, conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> FusedConvBN2d:
        """A module computing ``bn(conv(x))``, with copies of their parameters and buffers.
        ``conv`` must have no bias, dilation 1, one group and zero padding mode."""
        if (
            conv.bias is not None
            or conv.dilation != (1, 1)
            or conv.groups != 1
            or conv.padding_mode != "zeros"
            or isinstance(conv.padding, str)
        ):
            raise ValueError(
                "FusedConvBN2d.from_modules: 'conv' must have bias=False, "
                "dilation 1, groups 1 and numeric zero padding"
            )
        if bn.num_features != conv.out_channels:
            raise ValueError(
                f"FusedConvBN2d.from_modules: 'bn' has {bn.num_features} "
                f"features but 'conv' has {conv.out_channels} out_channels"
            )
        fused = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            bn.eps,
            bn.momentum,
            bn.affine,
            bn.track_running_stats,
            device=conv.weight.device,
            dtype=conv.weight.dtype,
        )
        state = {"weight": conv.weight}
        state.update(
            {{"weight": "gamma", "bias": "beta"}.get(k, k): v for k, v in bn.state_dict().items()}
        )
        fused.load_state_dict(state)
        fused.train(bn.training)
        return fused

    def reset_parameters(self) -> None:
        # Conv2d's and BatchNorm2d's initialisation
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.affine:
            torch.nn.init.ones_(self.gamma)
            torch.nn.init.zeros_(self.beta)
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def _momentum(self) -> float:
        """The weight of this batch's statistics in the running ones."""
        if self.training and self.track_running_stats and self.momentum is None:
            return 1.0 / (float(self.num_batches_tracked) + 1)  # a cumulative average
        return 0.0 if self.momentum is None else self.momentum

    def forward(self, input: Tensor) -> Tensor:
        counting = self.training and self.track_running_stats
        momentum = self._momentum()
        # Batch statistics in training, and always when no running ones are kept.
        use_batch = self.training or self.running_mean is None
        keep_stats = not self.training or self.track_running_stats
        out = ops.fused_conv_bn2d(
            input,
            self.weight,
            self.running_mean if keep_stats else None,
            self.running_var if keep_stats else None,
            self.gamma,
            self.beta,
            stride=self.stride,
            padding=self.padding,
            training=use_batch,
            momentum=momentum,
            eps=self.eps,
        )
        if counting:  # only a batch the forward accepted counts
            self.num_batches_tracked.add_(1)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, eps={self.eps}, "
            f"momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class SyncFusedConvBN2d(FusedConvBN2d):
    """:class:`FusedConvBN2d` whose training statistics are those of the batch of every
    process of ``process_group`` (the default group when ``None``), as
    ``torch.nn.SyncBatchNorm`` computes them.

    Same constructor, parameters and buffers as :class:`FusedConvBN2d`, plus
    ``process_group``. In training under an initialised process group of more than one
    process, each forward exchanges each rank's per-channel statistics once (every rank must
    call it, also a rank with an empty batch), and each backward all-reduces two per-channel
    sums once; the running statistics, the same on every rank, take the unbiased variance
    over the global count. Backward keeps what :class:`FusedConvBN2d` keeps (input, weight,
    per-channel statistics) and computes the convolution again. An input that fails the
    checks on one rank makes the forward raise on every rank, rather than leave the others
    waiting. In evaluation, or without a process group of more than one process, it is
    :class:`FusedConvBN2d`: no communication. ``forward(input)``: N×in_channels×H×W, N may
    differ between ranks and be 0.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: dist.ProcessGroup | None = None,
        *,
        device=None,
        dtype=None,
    ) -> None:
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(
                "SyncFusedConvBN2d: 'process_group' must be a torch.distributed.ProcessGroup "
                f"or None, got {type(process_group).__name__}"
            )
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            eps,
            momentum,
            affine,
            track_running_stats,
            device=device,
            dtype=dtype,
        )
        self.process_group = process_group

    def _sync_group(self) -> dist.ProcessGroup | None:
        """The group to take statistics over, or None where there is nobody to ask."""
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return None
        group = self.process_group or dist.group.WORLD
        return group if dist.get_world_size(group) > 1 else None

    def forward(self, input: Tensor) -> Tensor:
        group = self._sync_group()
        if group is None:
            return super().forward(input)
        out = sync_conv_bn2d(
            input,
            self.weight,
            self.gamma,
            self.beta,
            self.running_mean,  # None unless tracked
            self.running_var,
            self.stride,
            self.padding,
            self.eps,
            self._momentum(),
            group,
        )
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
        return out


def convert_sync_fused(
    module: torch.nn.Module, process_group: dist.ProcessGroup | None = None
) -> torch.nn.Module:
    """``module`` with every :class:`FusedConvBN2d` in it (itself included) replaced by a
    :class:`SyncFusedConvBN2d` holding the same parameters and buffers (the same tensors,
    not copies), training flag and ``requires_grad``, as
    ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` does for batch norms. Children are
    replaced in place; the module returned is ``module`` itself unless ``module`` is a
    :class:`FusedConvBN2d`."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"convert_sync_fused: 'module' must be a torch.nn.Module, got {type(module).__name__}"
        )
    converted = module
    if isinstance(module, FusedConvBN2d) and not isinstance(module, SyncFusedConvBN2d):
        converted = SyncFusedConvBN2d(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            module.stride,
            module.padding,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            process_group,
            device=module.weight.device,
            dtype=module.weight.dtype,
        )
        for name, tensor in (*module._parameters.items(), *module._buffers.items()):
            setattr(converted, name, tensor)
        converted.training = module.training
    for name, child in module.named_children():
        converted.add_module(name, convert_sync_fused(child, process_group))
    return converted
