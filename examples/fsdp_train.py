"""Training with FSDP2 (``torch.distributed.fsdp.fully_shard``) over tensortools' modules,
on CPU processes with the gloo backend.

The model reads small images: ``nn.FusedConvBN2d``, then the rows of its feature map as a
sequence through ``nn.LLTMSequence``, then a ``Linear`` head. ``nn.convert_sync_fused``
makes the conv-bn a ``nn.SyncFusedConvBN2d``, whose batch statistics are those of every
rank's images together (as ``torch.nn.SyncBatchNorm``'s), with the fused operator's memory
saving. Each of the two tensortools modules is a unit of its own (its parameters gathered
just before it runs and freed after), and the root holds the head. Each process trains on
its own shard of every batch; the gradients are averaged over the processes. Rank 0 prints
the mean loss over the ranks::

    torchrun --nproc-per-node 2 examples/fsdp_train.py --steps 5

The task: each image's upper and lower halves have brightness levels of their own, under
noise; the model regresses the upper level minus the lower (which it must tell apart over
the rows, through the recurrence).
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import tensortools


class Model(torch.nn.Module):
    """N×C×H×W images -> fused conv-bn -> the H rows as an LLTM sequence -> one number."""

    def __init__(self, channels: int, features: int, side: int, state: int) -> None:
        super().__init__()
        self.conv = tensortools.nn.FusedConvBN2d(channels, features, 3, padding=1)
        self.rnn = tensortools.nn.LLTMSequence(features * side, state)
        self.head = torch.nn.Linear(state, 1)

    def forward(self, images: Tensor) -> Tensor:  # N×C×H×W -> N×1
        rows = torch.relu(self.conv(images)).permute(2, 0, 1, 3).flatten(2)  # H×N×(F·W)
        _, (h_n, _) = self.rnn(rows)
        return self.head(h_n)


def batch(size: int, channels: int, side: int, generator: torch.Generator):
    """Images whose upper and lower halves have brightness levels of their own, under
    noise; the target is the upper level minus the lower."""
    levels = torch.rand(size, 2, generator=generator)
    rows = levels.repeat_interleave(torch.tensor([side // 2, side - side // 2]), dim=1)
    noise = torch.rand(size, channels, side, side, generator=generator)
    images = rows[:, None, :, None] + 0.5 * noise
    return images, (1 + levels[:, 0] - levels[:, 1]).unsqueeze(1)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    parser.add_argument("--batch", type=int, default=32, help="images per rank and step (32)")
    parser.add_argument("--side", type=int, default=8, help="image height and width (8)")
    parser.add_argument("--state", type=int, default=32, help="LLTM state size (32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate (1e-2)")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("run it under torchrun: torchrun --nproc-per-node 2 examples/fsdp_train.py")

    torch.set_num_threads(1)  # one core per process on a small machine
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every process on this machine
    # a collective that waits longer than this fails instead of hanging
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,))
        # The same initial model on every rank: fully_shard keeps each rank's own slice of
        # its own copy, it does not broadcast rank 0's.
        torch.manual_seed(0)
        model = Model(channels=3, features=4, side=args.side, state=args.state)
        # batch statistics over every rank's images (one all-gather in forward, one
        # all-reduce in backward)
        model = tensortools.nn.convert_sync_fused(model)
        fully_shard(model.conv, mesh=mesh)
        fully_shard(model.rnn, mesh=mesh)
        fully_shard(model, mesh=mesh)  # each rank now holds 1/world of every parameter
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

        generator = torch.Generator().manual_seed(1 + rank)  # each rank its own data
        losses = []
        for step in range(args.steps):
            images, target = batch(args.batch, 3, args.side, generator)
            loss = torch.nn.functional.mse_loss(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
            if rank == 0:
                print(f"step {step} loss {losses[-1]:.4f}", flush=True)
        return losses
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
