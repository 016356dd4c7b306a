"""torch.distributed with tensortools: DDP over nn.LLTM and nn.FusedConvBN2d, and
MetadataTensor through collectives (gloo, two processes on this machine).

One spawn serves the whole file: two workers share one process group, run every check and
save what they saw; the tests compare it with one process computing the same in full.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from _support.spawned import assert_all_close, join_gloo_group, one_thread, spawn_reports
from torch.nn.parallel import DistributedDataParallel as DDP

from tensortools import MetadataTensor, nn

pytestmark = [
    pytest.mark.slow,  # starts processes
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()),
        reason="torch.distributed with the gloo backend is not available",
    ),
]

WORLD_SIZE = 2
# A collective that waits this long fails in the worker; the join gives up a bit later.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
JOIN_TIMEOUT_S = 120.0
# float64 throughout: DDP's all-reduce and the full batch's sums differ only in the order
# of additions.
TOL = {"rtol": 1e-10, "atol": 1e-12}

BATCH, STEPS, FEATURES, STATE = 8, 3, 5, 6  # LLTM net: BATCH×STEPS×FEATURES in
IN_CH, OUT_CH, SIDE = 3, 4, 5  # conv-bn: BATCH×IN_CH×SIDE×SIDE in
LR, ITERATIONS = 0.5, 2


# -- models and data, built alike in the workers and in the test process ---------------


class _LLTMNet(torch.nn.Module):
    """An LLTM cell unrolled over the sequence, and a linear read-out of the last h."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LLTM(FEATURES, STATE, dtype=torch.float64)
        self.head = torch.nn.Linear(STATE, 1, dtype=torch.float64)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = c = torch.zeros(xs.shape[0], STATE, dtype=xs.dtype)
        for t in range(xs.shape[1]):
            h, c = self.cell(xs[:, t], (h, c))
        return self.head(h).squeeze(1)


def _lltm_net() -> _LLTMNet:
    torch.manual_seed(1)
    return _LLTMNet()


def _lltm_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return (
        torch.randn(BATCH, STEPS, FEATURES, generator=g, dtype=torch.float64),
        torch.randn(BATCH, generator=g, dtype=torch.float64),
    )


def _lltm_loss(model, xs, ys) -> torch.Tensor:
    return ((model(xs) - ys) ** 2).mean()  # a mean over the batch, as DDP averages


def _conv_bn_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """nn.Sequential(Conv2d(bias=False), BatchNorm2d) and the FusedConvBN2d made from it,
    with non-trivial affine parameters and running statistics."""
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(IN_CH, OUT_CH, 3, padding=1, bias=False, dtype=torch.float64)
    bn = torch.nn.BatchNorm2d(OUT_CH, dtype=torch.float64)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
    return torch.nn.Sequential(conv, bn), nn.FusedConvBN2d.from_modules(conv, bn)


def _conv_bn_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return (
        torch.randn(BATCH, IN_CH, SIDE, SIDE, generator=g, dtype=torch.float64),
        torch.randn(BATCH, OUT_CH, SIDE, SIDE, generator=g, dtype=torch.float64),
    )


def _conv_bn_loss(model, x, target) -> torch.Tensor:
    # Nonlinear: a linear function of batch-normalised values barely depends on the conv.
    return (torch.tanh(model(x)) * target).mean()


# Sequential(conv, bn)'s names for FusedConvBN2d's parameters and buffers.
_SEQ_NAMES = {
    "weight": "0.weight",
    "gamma": "1.weight",
    "beta": "1.bias",
    "running_mean": "1.running_mean",
    "running_var": "1.running_var",
    "num_batches_tracked": "1.num_batches_tracked",
}


def _sgd_step(model: torch.nn.Module) -> None:
    # By hand: torch.optim would import torch._dynamo (seconds) in the test process.
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
            p.grad = None


def _shard(t: torch.Tensor, rank: int) -> torch.Tensor:
    return t.chunk(WORLD_SIZE)[rank]


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def _plain(t: torch.Tensor) -> dict:
    """What a worker reports of a tensor: its type, its metadata and its plain values."""
    with torch._C.DisableTorchFunctionSubclass():
        values = t.as_subclass(torch.Tensor).detach().clone()
    return {
        "type": type(t).__name__,
        "metadata": getattr(t, "metadata", None),
        "batch_size": getattr(t, "batch_size", None),
        "values": values,
    }


# -- the workers ------------------------------------------------------------------------


def _ddp_lltm(rank: int) -> dict:
    xs, ys = (_shard(t, rank) for t in _lltm_data())
    ddp = DDP(_lltm_net())
    grads = []
    for _ in range(ITERATIONS):
        _lltm_loss(ddp, xs, ys).backward()
        grads.append(_grads(ddp.module))
        _sgd_step(ddp.module)
    # A MetadataTensor batch through the same DDP model: each output row keeps its
    # sample's metadata, the averaged gradients are those of plain tensors.
    ids = [f"{rank}.{i}" for i in range(xs.shape[0])]
    out = ddp(MetadataTensor.wrap_batch(xs, {"id": ids}, xs.shape[0]))
    ((out - ys) ** 2).mean().backward()
    params = {n: p.detach().clone() for n, p in ddp.module.named_parameters()}
    return {
        "grads": grads,
        "params": params,
        "metadata_out": _plain(out),
        "metadata_rows": [row.metadata for row in out],
        "metadata_grads": _grads(ddp.module),
    }


def _ddp_conv_bn(rank: int) -> dict:
    x, target = (_shard(t, rank) for t in _conv_bn_data())
    report = {}
    for name, module in zip(("seq", "fused"), _conv_bn_pair()):
        ddp = DDP(module)
        for mode in ("eval", "train"):  # eval first: it leaves the running statistics be
            ddp.train(mode == "train")
            ddp.zero_grad()
            _conv_bn_loss(ddp, x, target).backward()
            report[name, mode] = _grads(module)
        report[name, "buffers"] = _buffers(module)
    return report


def _collectives(rank: int) -> dict:
    from tensortools.distributed import all_gather

    report = {}
    m = MetadataTensor(
        torch.arange(4, dtype=torch.float64) * (rank + 1), {"rank": rank, "tag": f"r{rank}"}
    )
    returned = dist.all_reduce(m)
    report["all_reduce"] = _plain(m) | {"returned": returned}

    b = MetadataTensor(torch.full((3,), float(rank)), {"rank": rank})
    dist.broadcast(b, src=1)
    report["broadcast"] = _plain(b)

    # What torch's own all_gather does: values only, into the caller's buffers.
    m = MetadataTensor(torch.arange(3, dtype=torch.float64) + 10 * rank, {"rank": rank})
    plain_out = [torch.empty(3, dtype=torch.float64) for _ in range(WORLD_SIZE)]
    dist.all_gather(plain_out, m)
    meta_out = [
        MetadataTensor(torch.empty(3, dtype=torch.float64), {"buffer": i})
        for i in range(WORLD_SIZE)
    ]
    dist.all_gather(meta_out, m)
    report["torch_all_gather"] = [_plain(t) for t in plain_out]
    report["torch_all_gather_into_metadata"] = [_plain(t) for t in meta_out]

    gathered = all_gather(m)
    report["all_gather"] = [_plain(t) for t in gathered]
    report["all_gather_owns_metadata"] = gathered[rank].metadata is not m.metadata
    plain = m.as_subclass(torch.Tensor)
    report["all_gather_plain"] = [_plain(t) for t in all_gather(plain)]
    # Some ranks with metadata, some without; a non-contiguous input.
    mixed = m if rank == 0 else torch.arange(6.0, dtype=torch.float64).view(3, 2).t()[0]
    report["all_gather_mixed"] = [_plain(t) for t in all_gather(mixed)]

    # A batch of this rank's samples: all_reduce keeps it, all_gather carries each rank's,
    # and torch.cat of the gathered batches is the batch of every rank's samples.
    samples = [
        MetadataTensor(torch.full((2,), 10.0 * rank + i), {"id": f"{rank}.{i}"}) for i in range(2)
    ]
    batch = torch.stack(samples)
    dist.all_reduce(batch)
    report["batch_all_reduce"] = _plain(batch)
    joined = torch.cat(all_gather(torch.stack(samples)))
    report["batch_all_gather"] = [_plain(t) for t in joined.unbind(0)] + [_plain(joined)]

    # Shapes that differ, and metadata that cannot be pickled, fail on every rank alike
    # (no hang), and the group still works afterwards.
    for key, bad in (
        ("shape_error", torch.zeros(2 + rank)),
        (
            "pickle_error",
            MetadataTensor(torch.zeros(2), {"f": lambda: rank})
            if rank == 1
            else MetadataTensor(torch.zeros(2), {}),
        ),
    ):
        try:
            all_gather(bad)
        except (TypeError, ValueError) as err:
            report[key] = (type(err).__name__, str(err))
    report["after_errors"] = [_plain(t) for t in all_gather(torch.tensor([float(rank)]))]
    return report


def _worker(rank: int, tmp: str) -> None:
    join_gloo_group(tmp, rank, WORLD_SIZE, COLLECTIVE_TIMEOUT)
    try:
        report = {
            "lltm": _ddp_lltm(rank),
            "conv_bn": _ddp_conv_bn(rank),
            "collectives": _collectives(rank),
        }
        torch.save(report, f"{tmp}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    # Skip the interpreter's teardown: with the modules DDP imports it takes seconds.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> list[dict]:
    """Each rank's report, from one spawn of WORLD_SIZE workers."""
    tmp = tmp_path_factory.mktemp("distributed")
    return spawn_reports(_worker, (str(tmp),), WORLD_SIZE, tmp, JOIN_TIMEOUT_S)


# -- DDP against one process ------------------------------------------------------------


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _assert_grads_equal(got: dict, want: dict) -> None:
    assert_all_close(got, want, TOL)


def test_ddp_lltm_matches_full_batch(reports):
    model = _lltm_net()
    xs, ys = _lltm_data()
    for i in range(ITERATIONS):
        _lltm_loss(model, xs, ys).backward()
        for report in reports:
            _assert_grads_equal(report["lltm"]["grads"][i], _grads(model))
        _sgd_step(model)
    for report in reports:
        _assert_grads_equal(report["lltm"]["params"], dict(model.named_parameters()))


def test_ddp_lltm_with_metadata_input(reports):
    for rank, report in enumerate(reports):
        out = report["lltm"]["metadata_out"]
        ids = [f"{rank}.{i}" for i in range(BATCH // WORLD_SIZE)]
        assert out["type"] == "MetadataTensor" and out["metadata"] == {"id": ids}
        assert out["batch_size"] == len(ids)
        assert report["lltm"]["metadata_rows"] == [{"id": i} for i in ids]
    # The same model state (after ITERATIONS steps) on plain tensors, in full.
    model = _lltm_net()
    model.load_state_dict(reports[0]["lltm"]["params"])
    _lltm_loss(model, *_lltm_data()).backward()
    for report in reports:
        _assert_grads_equal(report["lltm"]["metadata_grads"], _grads(model))


@pytest.mark.parametrize("name", ["fused", "seq"])
def test_ddp_conv_bn_eval_matches_full_batch(reports, name):
    model = dict(zip(("seq", "fused"), _conv_bn_pair()))[name].eval()
    _conv_bn_loss(model, *_conv_bn_data()).backward()
    for report in reports:
        _assert_grads_equal(report["conv_bn"][name, "eval"], _grads(model))


@pytest.mark.parametrize("name", ["fused", "seq"])
def test_ddp_conv_bn_train_matches_mean_of_shards(reports, name):
    """Batch statistics are per process (no SyncBatchNorm): DDP's gradient is the mean
    of the gradients of each shard run alone, and each rank's running statistics are
    those of its own shard."""
    x, target = _conv_bn_data()
    shard_grads, shard_buffers = [], []
    for rank in range(WORLD_SIZE):
        model = dict(zip(("seq", "fused"), _conv_bn_pair()))[name].train()
        _conv_bn_loss(model, _shard(x, rank), _shard(target, rank)).backward()
        shard_grads.append(_grads(model))
        shard_buffers.append(_buffers(model))
    mean = {n: sum(g[n] for g in shard_grads) / WORLD_SIZE for n in shard_grads[0]}
    for rank, report in enumerate(reports):
        _assert_grads_equal(report["conv_bn"][name, "train"], mean)
        _assert_grads_equal(report["conv_bn"][name, "buffers"], shard_buffers[rank])
    # Not the full batch's gradient: the shards' statistics differ from the batch's.
    model = dict(zip(("seq", "fused"), _conv_bn_pair()))[name].train()
    _conv_bn_loss(model, x, target).backward()
    full = _grads(model)
    assert not any(torch.allclose(mean[n], full[n]) for n in full)


def test_ddp_fused_conv_bn_matches_sequential(reports):
    for report in reports:
        for key in ("eval", "train", "buffers"):
            fused, seq = report["conv_bn"]["fused", key], report["conv_bn"]["seq", key]
            _assert_grads_equal({_SEQ_NAMES[n]: v for n, v in fused.items()}, seq)


# -- MetadataTensor through collectives -------------------------------------------------


def _values(n: int, rank: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float64) + 10 * rank


def test_all_reduce_sums_in_place_and_keeps_local_metadata(reports):
    total = sum(torch.arange(4, dtype=torch.float64) * (r + 1) for r in range(WORLD_SIZE))
    for rank, report in enumerate(reports):
        got = report["collectives"]["all_reduce"]
        assert got["returned"] is None  # in place, like on plain tensors
        assert got["type"] == "MetadataTensor"
        assert got["metadata"] == {"rank": rank, "tag": f"r{rank}"}
        assert torch.equal(got["values"], total)


def test_broadcast_takes_values_and_keeps_local_metadata(reports):
    for rank, report in enumerate(reports):
        got = report["collectives"]["broadcast"]
        assert got["type"] == "MetadataTensor" and got["metadata"] == {"rank": rank}
        assert torch.equal(got["values"], torch.ones(3))


def test_torch_all_gather_loses_the_other_ranks_metadata(reports):
    """Why tensortools.distributed.all_gather exists: dist.all_gather fills the caller's
    buffers with values only."""
    for report in reports:
        plain = report["collectives"]["torch_all_gather"]
        into_meta = report["collectives"]["torch_all_gather_into_metadata"]
        for r in range(WORLD_SIZE):
            assert plain[r]["type"] == "Tensor"
            assert into_meta[r]["metadata"] == {"buffer": r}  # not rank r's
            assert torch.equal(plain[r]["values"], _values(3, r))
            assert torch.equal(into_meta[r]["values"], _values(3, r))


def test_all_gather_carries_each_ranks_metadata(reports):
    for report in reports:
        got = report["collectives"]["all_gather"]
        assert len(got) == WORLD_SIZE and report["collectives"]["all_gather_owns_metadata"]
        for r in range(WORLD_SIZE):
            assert got[r]["type"] == "MetadataTensor" and got[r]["metadata"] == {"rank": r}
            assert torch.equal(got[r]["values"], _values(3, r))


def test_collectives_keep_batches_and_all_gather_joins_the_ranks_samples(reports):
    for rank, report in enumerate(reports):
        reduced = report["collectives"]["batch_all_reduce"]
        assert reduced["batch_size"] == 2
        assert reduced["metadata"] == {"id": [f"{rank}.0", f"{rank}.1"]}
        *pieces, joined = report["collectives"]["batch_all_gather"]
        assert joined["batch_size"] == 2 * WORLD_SIZE
        ids = [f"{r}.{i}" for r in range(WORLD_SIZE) for i in range(2)]
        assert joined["metadata"] == {"id": ids}
        for piece, name in zip(pieces, ids):
            r, i = (int(v) for v in name.split("."))
            assert piece["metadata"] == {"id": name} and piece["batch_size"] is None
            assert torch.equal(piece["values"], torch.full((2,), 10.0 * r + i))


def test_all_gather_plain_and_mixed(reports):
    for report in reports:
        plain = report["collectives"]["all_gather_plain"]
        assert [t["type"] for t in plain] == ["Tensor"] * WORLD_SIZE
        for r in range(WORLD_SIZE):
            assert torch.equal(plain[r]["values"], _values(3, r))
        mixed = report["collectives"]["all_gather_mixed"]
        assert mixed[0]["type"] == "MetadataTensor" and mixed[0]["metadata"] == {"rank": 0}
        assert mixed[1]["type"] == "Tensor"
        assert torch.equal(mixed[0]["values"], _values(3, 0))
        assert torch.equal(mixed[1]["values"], torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64))


def test_all_gather_errors_are_raised_on_every_rank(reports):
    for report in reports:
        kind, message = report["collectives"]["shape_error"]
        assert kind == "ValueError" and "'tensor'" in message
        assert "rank 0: (2,)" in message and "rank 1: (3,)" in message
        kind, message = report["collectives"]["pickle_error"]
        assert kind == "TypeError" and "rank 1" in message and "pickled" in message
        after = report["collectives"]["after_errors"]
        assert [t["values"].item() for t in after] == [0.0, 1.0]


@pytest.mark.parametrize("bad", [3, [torch.zeros(2)], None])
def test_all_gather_refuses_non_tensors(bad):
    from tensortools.distributed import all_gather

    with pytest.raises(TypeError, match="'tensor' must be a torch.Tensor"):
        all_gather(bad)
