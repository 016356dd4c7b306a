"""The fused convolution and batch norm module whose training statistics are those of
every process of a group (:class:`SyncFusedConvBN2d`), and the conversion of a model's
:class:`~tensortools.nn.FusedConvBN2d` modules to it (:func:`convert_sync_fused`)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch import distributed as dist

from tensortools.nn.conv_bn2d import FusedConvBN2d
from tensortools.ops._sync_conv_bn import sync_conv_bn2d

__all__ = ["SyncFusedConvBN2d", "convert_sync_fused"]


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
