"""The fused convolution and batch norm module (:class:`FusedConvBN2d`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tensortools import ops
from tensortools.nn._checks import positive_int, positive_pair

__all__ = ["FusedConvBN2d"]


def _under_vmap() -> bool:
    """Whether a torch.func.vmap is running (at any level of functorch's transforms)."""
    stack = torch._C._functorch.get_interpreter_stack()
    return bool(stack) and any(i.key() == _VMAP for i in stack)


_VMAP = torch._C._functorch.TransformType.Vmap


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

    Under ``torch.func.vmap`` it runs in evaluation mode and without running statistics
    (``track_running_stats=False``); training with running statistics, which would write
    every mapped call's statistics into the shared buffers, raises a ``RuntimeError`` that
    says so.
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
        self.in_channels = positive_int(name, "in_channels", in_channels)
        self.out_channels = positive_int(name, "out_channels", out_channels)
        self.kernel_size = positive_pair(name, "kernel_size", kernel_size)
        self.stride = positive_pair(name, "stride", stride)
        self.padding = positive_pair(name, "padding", padding, minimum=0)
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
        if counting and not torch.compiler.is_compiling() and _under_vmap():
            raise RuntimeError(
                f"{type(self).__name__}: cannot update its running statistics under "
                "torch.func.vmap (every mapped call would write its own statistics into "
                "the one running_mean and running_var); call .eval() to normalise with the "
                "running statistics, or build it with track_running_stats=False to "
                "normalise each call with its own batch statistics"
            )
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
