"""The synchronised fused conv-bn's autograd function (nn.SyncFusedConvBN2d): batch
normalisation of a convolution with the batch statistics of every rank of a process group,
the convolution recomputed in backward as the single-process operator does."""

from __future__ import annotations

import torch
from torch import Tensor
from torch import distributed as dist

from tensortools.ops._checks import check_tensors

__all__ = ["SyncConvBN2d", "sync_conv_bn2d"]


def _check_conv_bn_args(input, weight, gamma, beta, stride, padding, eps) -> None:
    """The fused operator's own checks of its arguments (they live in C++), run on meta
    copies. Its training rule "more than 1 value per channel" is left out: a rank's share of
    the batch may hold 1 value or none; the global count is checked after the exchange."""
    check_tensors("fused_conv_bn2d", ("input",), (input,))
    stats = torch.empty(weight.shape[0], dtype=input.dtype, device="meta")
    meta = [None if t is None else t.to("meta") for t in (input, weight, gamma, beta)]
    torch.ops.tensortools.conv_bn2d_eval.default(
        meta[0], meta[1], stats, stats, meta[2], meta[3], stride, padding, eps
    )


def _channels(t: Tensor) -> Tensor:
    return t.reshape(-1, 1, 1)


class SyncConvBN2d(torch.autograd.Function):
    """batch_norm(conv2d(input, weight)) with the statistics of the batch of every rank of
    ``group``. Forward: one all-gather of each rank's (mean, variance, count, failed) per
    channel, merged with Chan's formula (exact for uneven and empty shares, and no
    E[z²] - E[z]² cancellation). Backward: one all-reduce of sum(dy) and sum(dy * (z - mean)),
    as torch.nn.SyncBatchNorm does. Saved for backward: input, weight, gamma, mean and var,
    what the single-process operator saves; the convolution is computed again there.

    Written with ``setup_context`` so that ``torch.func.grad``/``vjp`` run it (with the
    running statistics untracked, as for torch's batch norm: an in-place update of a
    captured buffer is refused); ``forward`` returns the output and, not differentiable,
    the batch's mean and variance and the value count over every rank. ``vmap`` has no
    rule: the statistics of a batch are not per sample. :func:`sync_conv_bn2d` gives the
    output alone."""

    @staticmethod
    def forward(
        input,
        weight,
        gamma,
        beta,
        running_mean,
        running_var,
        stride,
        padding,
        eps,
        momentum,
        group,
    ):
        channels = weight.shape[0]
        share = torch.zeros(2 * channels + 2, dtype=torch.float64, device=weight.device)
        error = None
        try:
            _check_conv_bn_args(input, weight, gamma, beta, stride, padding, eps)
            z = torch.nn.functional.conv2d(input, weight, None, stride, padding)
            # Half types (autocast): statistics and normalisation in float32, as the fused
            # operator's and batch_norm's; the output in z's dtype.
            wide = z.to(torch.promote_types(z.dtype, torch.float32))
            count = z.numel() // channels
            if count:
                var, mean = torch.var_mean(wide, dim=(0, 2, 3), correction=0)
                share[:channels], share[channels:-2] = mean, var
            share[-2] = count
        except Exception as err:  # raised below, once every rank knows to raise
            error, share[-1] = err, 1
        world = dist.get_world_size(group)
        shares = share.new_empty(world, share.numel())
        dist.all_gather(list(shares.unbind(0)), share, group=group)  # every backend has it
        failed = shares[:, -1].nonzero().flatten().tolist()
        if error is not None:
            raise error
        if failed:
            raise RuntimeError(
                f"SyncFusedConvBN2d: the forward failed on rank(s) {failed} of the process "
                "group (their error is raised there), so it fails here too"
            )
        means, variances, counts = shares[:, :channels], shares[:, channels:-2], shares[:, -2:-1]
        total = counts.sum()
        if total <= 1:
            raise ValueError(
                "SyncFusedConvBN2d: training needs more than 1 value per channel over all "
                f"ranks, got {int(total)}"
            )
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        if running_mean is not None:  # as batch_norm: the unbiased variance, momentum
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            unbiased = var * (total / (total - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean, var = mean.to(wide.dtype), var.to(wide.dtype)
        scale = torch.rsqrt(var + eps)
        if gamma is not None:
            scale = scale * gamma
        shift = -mean * scale if beta is None else beta - mean * scale
        # as ATen's batch_norm: z * scale + shift, in one pass over z (ours)
        out = torch.addcmul(_channels(shift), wide, _channels(scale), out=wide).to(z.dtype)
        return out, mean, var, total

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, weight, gamma, _, _, _, stride, padding, eps, _, group = inputs
        out, mean, var, total = output
        ctx.mark_non_differentiable(mean, var, total)
        ctx.save_for_backward(input, weight, gamma, mean, var)
        ctx.conv = (stride, padding, out.dtype)
        ctx.norm = (eps, float(total), group)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output, _grad_mean, _grad_var, _grad_total):
        input, weight, gamma, mean, var = ctx.saved_tensors
        (stride, padding, dtype), (eps, total, group) = ctx.conv, ctx.norm
        need_input, need_weight, need_gamma, need_beta = ctx.needs_input_grad[:4]
        # Under autocast the forward's convolution ran in `dtype`; so does its recomputation.
        # the elementwise maths in the statistics' dtype (float32 for half types)
        x, w, dy = input.to(dtype), weight.to(dtype), grad_output.to(mean.dtype)
        xmu = torch.nn.functional.conv2d(x, w, None, stride, padding).to(mean.dtype)
        xmu.sub_(_channels(mean))
        invstd = torch.rsqrt(var + eps)
        dims = (0, 2, 3)
        sums = torch.stack([dy.sum(dims), (dy * xmu).sum(dims)])
        grad_gamma = sums[1] * invstd if need_gamma else None
        grad_beta = sums[0].clone() if need_beta else None
        grad_input = grad_weight = None
        if need_input or need_weight:
            dist.all_reduce(sums, group=group)  # a rank with no samples takes part too
            mean_dy, mean_dy_xmu = sums / total
            scale = invstd if gamma is None else invstd * gamma
            # grad_z = scale * (dy - mean(dy) - (z - mean) * invstd² * mean(dy * (z - mean))),
            # over z - mean (ours), in two passes
            slope = -scale * invstd * invstd * mean_dy_xmu
            grad_z = torch.addcmul(_channels(-scale * mean_dy), xmu, _channels(slope), out=xmu)
            grad_z = grad_z.addcmul_(dy, _channels(scale)).to(dtype)
            grad_input, grad_weight, _ = torch.ops.aten.convolution_backward(
                grad_z,
                x,
                w,
                None,
                stride,
                padding,
                [1, 1],
                False,
                [0, 0],
                1,
                [need_input, need_weight, False],
            )
            if need_input:
                grad_input = grad_input.to(input.dtype)
            if need_weight:
                grad_weight = grad_weight.to(weight.dtype)
        if grad_gamma is not None:
            grad_gamma = grad_gamma.to(gamma.dtype)
        if grad_beta is not None:
            grad_beta = grad_beta.to(gamma.dtype)
        return grad_input, grad_weight, grad_gamma, grad_beta, *([None] * 7)


def sync_conv_bn2d(
    input, weight, gamma, beta, running_mean, running_var, stride, padding, eps, momentum, group
) -> Tensor:
    """The output of :class:`SyncConvBN2d` (its other outputs are for backward)."""
    args = (input, weight, gamma, beta, running_mean, running_var)
    return SyncConvBN2d.apply(*args, stride, padding, eps, momentum, group)[0]
