"""FSDP2 (torch.distributed.fsdp.fully_shard) over tensortools' modules: nn.LLTM,
nn.LLTMSequence, nn.GraphConv, nn.FusedConvBN2d (and nn.SyncFusedConvBN2d) and a model
made of them (gloo, two processes on this machine, float64).

One spawn serves the whole file: two workers share one process group, shard the models
with ``fully_shard``, train, save and call the operators, and save what they saw; the
tests compare it with one process computing the same on the full batch. The last test
runs examples/fsdp_train.py under torchrun.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from _support.spawned import assert_all_close, join_gloo_group, one_thread, spawn_reports
from torch.utils._python_dispatch import TorchDispatchMode

from tensortools import MetadataTensor, nn, ops

pytestmark = [
    pytest.mark.slow,  # starts processes
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()),
        reason="torch.distributed with the gloo backend is not available",
    ),
]

ROOT = Path(__file__).resolve().parent.parent
WORLD_SIZE = 2
# A collective that waits this long fails in the worker; the join gives up a bit later.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
JOIN_TIMEOUT_S = 120.0
# float64 throughout: FSDP's reduce-scatter and the full batch's sums differ only in the
# order of additions.
TOL = {"rtol": 1e-10, "atol": 1e-12}

BATCH, STEPS, FEATURES, STATE = 8, 3, 5, 6  # LLTM cell and sequence
IN_CH, OUT_CH, SIDE = 3, 4, 5  # conv-bn: BATCH×IN_CH×SIDE×SIDE in
GRAPHS, NODES, GRAPH_OUT = 4, 5, 3  # graph conv: a batch of GRAPHS graphs of NODES nodes
LR, ITERATIONS = 0.5, 2

# Each module alone, and _Net made of all of them. FusedConvBN2d in training mode
# normalises with each rank's batch statistics; every other case is batch-independent,
# or (SyncFusedConvBN2d) normalises with the statistics of the batches of every rank.
CASES = (
    "lltm",
    "lltm_sequence",
    "graph_conv",
    "conv_bn_eval",
    "conv_bn_train",
    "sync_conv_bn_train",  # SyncFusedConvBN2d: the statistics of every rank's batch
    "net",
)
PER_RANK_STATISTICS = {"conv_bn_train"}


# -- models and data, built alike in the workers and in the test process ---------------


def _conv_bn() -> nn.FusedConvBN2d:
    """A FusedConvBN2d with non-trivial affine parameters and running statistics."""
    module = nn.FusedConvBN2d(IN_CH, OUT_CH, 3, padding=1, dtype=torch.float64)
    with torch.no_grad():
        module.gamma.uniform_(0.5, 1.5)
        module.beta.uniform_(-0.5, 0.5)
        module.running_mean.uniform_(-0.2, 0.2)
        module.running_var.uniform_(0.5, 2.0)
    return module


def _chain(n: int) -> torch.Tensor:
    """The normalised adjacency (with self-loops) of a path of n nodes."""
    adj = torch.eye(n, dtype=torch.float64)
    adj += torch.diag(torch.ones(n - 1, dtype=torch.float64), 1)
    adj += torch.diag(torch.ones(n - 1, dtype=torch.float64), -1)
    return adj / adj.sum(1, keepdim=True)


class _Net(torch.nn.Module):
    """Images through FusedConvBN2d; their rows as a sequence through LLTMSequence; one
    more LLTM step; GraphConv over each image's rows (a path graph); a Linear read-out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = _conv_bn()
        self.seq = nn.LLTMSequence(OUT_CH * SIDE, STATE, dtype=torch.float64)
        self.cell = nn.LLTM(STATE, STATE, dtype=torch.float64)
        self.graph = nn.GraphConv(STATE, GRAPH_OUT, dtype=torch.float64)
        self.head = torch.nn.Linear(STATE + GRAPH_OUT, 1, dtype=torch.float64)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        rows = torch.tanh(self.conv(images)).permute(2, 0, 1, 3).flatten(2)  # T×B×(C·W)
        out, (h_n, c_n) = self.seq(rows)  # out T×B×S
        h, _ = self.cell(out.mean(0), (h_n, c_n))
        batch = images.shape[0]
        adj = torch.block_diag(*[_chain(SIDE)] * batch)  # one path graph per image
        nodes = self.graph(adj, out.transpose(0, 1).flatten(0, 1))  # (B·T)×GRAPH_OUT
        return self.head(torch.cat([h, nodes.view(batch, SIDE, GRAPH_OUT).mean(1)], 1))


# The operators _Net runs forward (FusedConvBN2d in eval mode).
NET_OPERATORS = (
    "tensortools.conv_bn2d_eval.default",
    "tensortools.lltm_sequence_forward.default",
    "tensortools.lltm_forward.default",
    "tensortools.graph_conv.default",
)


def _make(case: str) -> torch.nn.Module:
    torch.manual_seed(1)
    if case == "lltm":
        return nn.LLTM(FEATURES, STATE, dtype=torch.float64)
    if case == "lltm_sequence":
        return nn.LLTMSequence(FEATURES, STATE, batch_first=True, dtype=torch.float64)
    if case == "graph_conv":
        return nn.GraphConv(FEATURES, GRAPH_OUT, dtype=torch.float64)
    if case.startswith("conv_bn"):
        return _conv_bn().train(case == "conv_bn_train")
    if case == "sync_conv_bn_train":
        return nn.convert_sync_fused(_conv_bn().train())
    net = _Net()
    net.conv.eval()  # running statistics: the model is batch-independent
    return net


def _data(case: str) -> tuple[torch.Tensor, ...]:
    """The full batch: the inputs, then the target; every tensor has the batch in dim 0."""
    g = torch.Generator().manual_seed(2)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    if case == "lltm":  # input, h, c, target (new_h and new_cell side by side)
        h, c = randn(BATCH, STATE), randn(BATCH, STATE)
        return randn(BATCH, FEATURES), h, c, randn(BATCH, 2 * STATE)
    if case == "lltm_sequence":
        return randn(BATCH, STEPS, FEATURES), randn(BATCH, STEPS, STATE)
    if case == "graph_conv":  # a batch of graphs: adjacency, node features, target
        adj = (torch.rand(GRAPHS, NODES, NODES, generator=g) < 0.4).double()
        adj = adj + adj.transpose(1, 2) + torch.eye(NODES, dtype=torch.float64)
        adj = adj / adj.sum(2, keepdim=True)
        return adj, randn(GRAPHS, NODES, FEATURES), randn(GRAPHS, NODES, GRAPH_OUT)
    images = randn(BATCH, IN_CH, SIDE, SIDE)
    if "conv_bn" in case:
        return images, randn(BATCH, OUT_CH, SIDE, SIDE)
    return images, randn(BATCH, 1)


def _output(case: str, model: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    if case == "lltm":
        x, h, c = inputs
        return torch.cat(model(x, (h, c)), 1)
    if case == "lltm_sequence":
        return model(*inputs)[0]
    if case == "graph_conv":  # the batch as one graph of disjoint parts
        adj, x = inputs
        return model(torch.block_diag(*adj), x.flatten(0, 1)).view(x.shape[0], NODES, -1)
    return model(*inputs)


def _loss(case: str, model: torch.nn.Module, data) -> torch.Tensor:
    *inputs, target = data
    # a mean over the batch, as FSDP averages the gradients over the ranks
    return ((_output(case, model, *inputs) - target) ** 2).mean()


def _shard(t: torch.Tensor, rank: int, parts: int = WORLD_SIZE) -> torch.Tensor:
    return t.chunk(parts)[rank]


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's global value (a collective: every rank calls it alike), or t itself."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().clone()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: _full(p.grad) for name, p in model.named_parameters()}


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: _full(p) for name, p in model.named_parameters()}


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def _sgd_step(model: torch.nn.Module) -> None:
    # By hand, so that the reference and the sharded model take the same step (on
    # DTensors under FSDP: each rank updates its shard).
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
            p.grad = None


def _plain(t: torch.Tensor) -> dict:
    """What a worker reports of a tensor: its type, its metadata and its plain values."""
    with torch._C.DisableTorchFunctionSubclass():
        values = t.as_subclass(torch.Tensor).detach().clone()
    return {"type": type(t).__name__, "metadata": getattr(t, "metadata", None), "values": values}


# -- the workers ------------------------------------------------------------------------


def _fully_shard(model: torch.nn.Module, mesh, reshard_after_forward: bool):
    from torch.distributed.fsdp import fully_shard

    # tensortools' modules each a unit of their own in a model, then the root
    for child in model.children():
        if isinstance(child, (nn.LLTM, nn.LLTMSequence, nn.GraphConv, nn.FusedConvBN2d)):
            fully_shard(child, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def _train(case: str, model: torch.nn.Module, rank: int, forward=None) -> dict:
    data = [_shard(t, rank) for t in _data(case)]
    forward = model if forward is None else forward
    losses, grads = [], []
    for _ in range(ITERATIONS):
        loss = _loss(case, forward, data)
        loss.backward()
        losses.append(loss.item())
        grads.append(_grads(model))
        _sgd_step(model)
    return {"losses": losses, "grads": grads, "params": _params(model), "buffers": _buffers(model)}


class _RecordOperators(TorchDispatchMode):
    """Records the types of the tensor arguments of every tensortools operator."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "tensortools":
            leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
            kinds = {type(a).__name__ for a in leaves if isinstance(a, torch.Tensor)}
            self.seen.setdefault(str(func), set()).update(kinds)
        return func(*args, **(kwargs or {}))


def _inside_forward(mesh, rank: int) -> dict:
    """What the operators and the modules' forward see while a sharded model runs."""
    model = _fully_shard(_make("net"), mesh, reshard_after_forward=True)
    model.conv.train()  # (in eval mode it runs ATen's conv2d, not an operator of its own)
    params, outside = {}, {}

    def recorder(name: str):
        def record(module, args) -> None:
            params[name] = {
                n: (type(p).__name__, tuple(p.shape)) for n, p in module.named_parameters()
            }

        return record

    for name in ("conv", "seq", "cell", "graph"):
        module = getattr(model, name)
        # after fully_shard's own pre-forward hook, which unshards the parameters
        module.register_forward_pre_hook(recorder(name))
        outside[name] = {
            n: (type(p).__name__, tuple(p.to_local().shape)) for n, p in module.named_parameters()
        }
    mode = _RecordOperators()
    with mode:
        _loss("net", model, [_shard(t, rank) for t in _data("net")]).backward()
    return {
        "operators": {op: sorted(kinds) for op, kinds in mode.seen.items()},
        "params_in_forward": params,
        "params_outside": outside,
    }


def _metadata_inputs(mesh, rank: int) -> dict:
    """A MetadataTensor batch through sharded models: one forward and backward each."""
    report = {}
    for case in ("lltm_sequence", "conv_bn_eval", "net"):
        model = _fully_shard(_make(case), mesh, reshard_after_forward=True)
        x, target = (_shard(t, rank) for t in _data(case))
        ids = [f"{rank}.{i}" for i in range(x.shape[0])]
        out = _output(case, model, MetadataTensor.wrap_batch(x, {"id": ids}, x.shape[0]))
        ((out - target) ** 2).mean().backward()
        report[case] = {
            "out": _plain(out),
            "rows": [row.metadata for row in out],
            "grads": _grads(model),
        }
    return report


def _in_place_on_output(mesh, rank: int) -> dict:
    """An in-place op on a sharded nn.LLTM's new_h, then a loss of new_h alone (on plain
    tensors ops.lltm's backward does not need new_h, so eager PyTorch allows it)."""
    report = {}
    x, h, c, _ = (_shard(t, rank) for t in _data("lltm"))
    for kind in ("plain", "metadata"):
        for reshard in (True, False):
            model = _fully_shard(_make("lltm"), mesh, reshard)
            input = MetadataTensor(x, {"rank": rank}) if kind == "metadata" else x
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                new_h, _ = model(input, (h, c))
            got = {
                "view": new_h._base is not None,
                "warned": any("returned a view tensor" in str(w.message) for w in caught),
            }
            new_h += 1
            try:
                (new_h**2).mean().backward()
            except RuntimeError as err:  # the same on every rank: no collective waits
                got["error"] = str(err)
            else:
                got["grad_types"] = sorted({type(p.grad).__name__ for p in model.parameters()})
                got["grads"] = _grads(model)
            report[kind, reshard] = got
    return report


def _state_dicts(mesh, rank: int, tmp: str) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    model = _fully_shard(_make("net"), mesh, reshard_after_forward=True)
    _train("net", model, rank)
    images, _ = _data("net")
    with torch.no_grad():
        outputs = model(images).detach().clone()  # every rank the full batch

    sharded = model.state_dict()
    kinds = {
        name: (
            type(v).__name__,
            str(tuple(v.placements)) if hasattr(v, "placements") else None,
            tuple(v.to_local().shape) if hasattr(v, "to_local") else tuple(v.shape),
        )
        for name, v in sharded.items()
    }
    gathered = {name: _full(v) for name, v in sharded.items()}
    dcp.save(sharded, checkpoint_id=f"{tmp}/checkpoint")

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=options)
    full_kinds = {name: type(v).__name__ for name, v in full.items()}

    # The full state dict back into a new sharded model, from rank 0 alone.
    fresh = _fully_shard(_Net(), mesh, reshard_after_forward=True)
    fresh.conv.eval()
    set_model_state_dict(
        fresh,
        dict(full) if rank == 0 else {},  # (it puts DTensors into the dict it is given)
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )
    with torch.no_grad():
        reloaded = fresh(images).detach().clone()
    return {
        "outputs": outputs,
        "kinds": kinds,
        "gathered": gathered,
        "full": full,
        "full_kinds": full_kinds,
        "reloaded_outputs": reloaded,
    }


def _dtensor_calls(mesh) -> dict:
    """tensortools' operators called with DTensor arguments: what each call does."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def d(t: torch.Tensor, placement=None) -> torch.Tensor:
        return distribute_tensor(t, mesh, [placement or Replicate()])

    g = torch.Generator().manual_seed(5)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    x, h = randn(4, FEATURES), randn(4, STATE)
    w, b = randn(3 * STATE, STATE + FEATURES), randn(3 * STATE)
    sharded = _fully_shard(_make("lltm"), mesh, reshard_after_forward=True)
    calls = {
        # a sharded module's parameters (DTensors outside forward) with plain inputs
        "lltm_fsdp_parameters": lambda: ops.lltm(x, sharded.weights, sharded.bias, h, h),
        "lltm_weights_only": lambda: ops.lltm(x, d(w, Shard(0)), b, h, h),
        "lltm_all_replicated": lambda: ops.lltm(d(x), d(w), d(b), d(h), d(h)),
        "lltm_forward_all_replicated": lambda: torch.ops.tensortools.lltm_forward(
            d(x), d(w), d(b), d(h), d(h)
        ),
        "lltm_sequence_all_replicated": lambda: ops.lltm_sequence(
            d(randn(STEPS, 4, FEATURES)), d(w), d(b), d(h), d(h)
        ),
        "graph_conv_weight_only": lambda: ops.graph_conv(
            randn(4, 4), randn(4, FEATURES), d(randn(FEATURES, 2)), randn(2)
        ),
        "fused_conv_bn2d_weight_only": lambda: ops.fused_conv_bn2d(
            randn(2, IN_CH, SIDE, SIDE), d(randn(OUT_CH, IN_CH, 3, 3)), None, None, None, None
        ),
        "axpby_all_replicated": lambda: ops.axpby(d(randn(4)), d(randn(4)), 2.0, 3.0),
    }
    report = {}
    for name, call in calls.items():
        try:
            out = call()
        except Exception as err:  # what the call raised is the finding
            report[name] = (type(err).__name__, str(err))
        else:
            first = out[0] if isinstance(out, tuple) else out
            report[name] = ("returned", type(first).__name__)
    return report


def _compiled(mesh, rank: int) -> dict:
    """torch.compile of a sharded model: training, and what the graphs hold."""
    import torch._dynamo

    torch._dynamo.reset()
    targets = []

    def backend(gm, example_inputs):
        targets.extend(
            str(n.target) for n in gm.graph.nodes if str(n.target).startswith("tensortools.")
        )
        return gm.forward

    model = _fully_shard(_make("net"), mesh, reshard_after_forward=True)
    report = _train("net", model, rank, forward=torch.compile(model, backend=backend))
    report["graph_ops"] = sorted(set(targets))
    return report


def _worker(rank: int, tmp: str) -> None:
    join_gloo_group(tmp, rank, WORLD_SIZE, COLLECTIVE_TIMEOUT)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        report = {
            "train": {
                (case, reshard): _train(case, _fully_shard(_make(case), mesh, reshard), rank)
                for case in CASES
                for reshard in (True, False)
            },
            "inside": _inside_forward(mesh, rank),
            "metadata": _metadata_inputs(mesh, rank),
            "state_dicts": _state_dicts(mesh, rank, tmp),
            "dtensor": _dtensor_calls(mesh),
            "compiled": _compiled(mesh, rank),
            # last: a failed backward may leave FSDP's state behind
            "in_place": _in_place_on_output(mesh, rank),
        }
        torch.save(report, f"{tmp}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    # Skip the interpreter's teardown: with the modules FSDP imports it takes seconds.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[list[dict], Path]:
    """Each rank's report, from one spawn of WORLD_SIZE workers, and their folder."""
    tmp = tmp_path_factory.mktemp("fsdp")
    return spawn_reports(_worker, (str(tmp),), WORLD_SIZE, tmp, JOIN_TIMEOUT_S), tmp


@pytest.fixture
def reports(run) -> list[dict]:
    return run[0]


# -- FSDP against one process -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _assert_equal(got: dict, want: dict) -> None:
    assert_all_close(got, want, TOL)


def _reference(case: str, parts: int) -> dict:
    """ITERATIONS SGD steps in one process, each with the mean of the gradients of the
    batch's `parts` equal shards (1: the full batch), every shard on a model of its own
    (its own running statistics) sharing the parameters."""
    models = [_make(case) for _ in range(parts)]
    data = _data(case)
    shards = [[_shard(t, r, parts) for t in data] for r in range(parts)]
    grads = []
    for _ in range(ITERATIONS):
        each = []
        for model, shard in zip(models, shards):
            _loss(case, model, shard).backward()
            each.append(_grads(model))
        mean = {n: sum(g[n] for g in each) / parts for n in each[0]}
        grads.append(mean)
        for model in models:
            for name, p in model.named_parameters():
                p.grad = mean[name].clone()
            _sgd_step(model)
    return {
        "grads": grads,
        "params": _params(models[0]),
        "buffers": [_buffers(m) for m in models],
    }


@pytest.mark.parametrize("reshard", [True, False], ids=["reshard", "no_reshard"])
@pytest.mark.parametrize("case", CASES)
def test_fully_shard_training_matches_one_process(reports, case, reshard):
    """Two SGD steps under fully_shard equal one process on the full batch; with
    FusedConvBN2d in training mode, the mean of each rank's shard run alone (batch
    statistics are per rank, as under DDP), and SyncFusedConvBN2d the full batch again."""
    per_rank = case in PER_RANK_STATISTICS
    want = _reference(case, WORLD_SIZE if per_rank else 1)
    for rank, report in enumerate(reports):
        got = report["train"][case, reshard]
        for i in range(ITERATIONS):
            _assert_equal(got["grads"][i], want["grads"][i])
        _assert_equal(got["params"], want["params"])
        _assert_equal(got["buffers"], want["buffers"][rank if per_rank else 0])
    if per_rank:  # not the full batch's gradient: the shards' statistics differ from it
        full = _reference(case, 1)["grads"][0]
        assert not torch.allclose(want["grads"][0]["weight"], full["weight"])
        assert not torch.equal(
            reports[0]["train"][case, reshard]["buffers"]["running_mean"],
            reports[1]["train"][case, reshard]["buffers"]["running_mean"],
        )


def test_operators_see_plain_tensors_inside_the_sharded_forward(reports):
    net = _Net()
    for rank, report in enumerate(reports):
        inside = report["inside"]
        # every operator, forward and backward, gets plain tensors only
        ops_seen = inside["operators"]
        assert {
            f"tensortools.{name}.default"
            for name in (
                "conv_bn2d_forward",
                "conv_bn2d_backward",
                "lltm_sequence_forward",
                "lltm_sequence_backward",
                "lltm_forward",
                "lltm_backward",
                "graph_conv",
            )
        } <= ops_seen.keys(), sorted(ops_seen)
        # (a Parameter is a plain Tensor: FSDP's unsharded parameters are Parameters)
        assert all(set(kinds) <= {"Tensor", "Parameter"} for kinds in ops_seen.values()), ops_seen
        # in forward, the parameters are the full, unsharded ones; outside, DTensor shards
        for name in ("conv", "seq", "cell", "graph"):
            module = getattr(net, name)
            full = {n: ("Parameter", tuple(p.shape)) for n, p in module.named_parameters()}
            assert inside["params_in_forward"][name] == full
            outside = inside["params_outside"][name]
            assert {n: kind for n, (kind, _) in outside.items()} == dict.fromkeys(full, "DTensor")
            assert {n: shape for n, (_, shape) in outside.items()} == {
                n: _local_shape(shape, rank) for n, (_, shape) in full.items()
            }


@pytest.mark.parametrize(
    "case",
    [
        "lltm_sequence",
        "conv_bn_eval",
        "net",
    ],
)
def test_metadata_tensor_inputs(reports, case):
    """A MetadataTensor batch: each rank's output keeps its samples' metadata, and the
    gradients are the full batch's."""
    for rank, report in enumerate(reports):
        got = report["metadata"][case]
        ids = [f"{rank}.{i}" for i in range(BATCH // WORLD_SIZE)]
        assert got["out"]["type"] == "MetadataTensor"
        assert got["out"]["metadata"] == {"id": ids}
        if case != "net":  # (_Net moves the batch out of dim 0 on the way)
            assert got["rows"] == [{"id": i} for i in ids]
        _assert_equal(got["grads"], _reference(case, 1)["grads"][0])


def _local_shape(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """The shape of a rank's shard of a parameter: fully_shard splits dim 0 as
    torch.chunk does, and a rank past the last chunk holds none of it."""
    chunks = torch.empty(shape).chunk(WORLD_SIZE)
    return tuple(chunks[rank].shape) if rank < len(chunks) else (0, *shape[1:])


def _net_outputs(state: dict) -> torch.Tensor:
    model = _Net()
    model.conv.eval()
    model.load_state_dict(state)
    with torch.no_grad():
        return model(_data("net")[0])


def test_sharded_state_dict_holds_dtensor_shards_and_loads_unsharded(run):
    reports, tmp = run
    net = _Net()
    want = reports[0]["state_dicts"]["outputs"]
    for rank, report in enumerate(reports):
        got = report["state_dicts"]
        assert torch.allclose(got["outputs"], want, **TOL)  # every rank the same model
        for name, p in net.named_parameters():
            kind, placements, local = got["kinds"][name]
            assert (kind, placements) == ("DTensor", "(Shard(dim=0),)"), name
            assert local == _local_shape(tuple(p.shape), rank), name
        for name, b in net.named_buffers():
            assert got["kinds"][name] == ("Tensor", None, tuple(b.shape)), name
        # the shards gathered: a state dict an unsharded module loads
        assert torch.allclose(_net_outputs(got["gathered"]), want, **TOL)


def test_distributed_checkpoint_loads_into_an_unsharded_module(run):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    reports, tmp = run
    dcp_to_torch_save(tmp / "checkpoint", tmp / "checkpoint.pt")
    state = torch.load(tmp / "checkpoint.pt", weights_only=True)
    assert torch.allclose(_net_outputs(state), reports[0]["state_dicts"]["outputs"], **TOL)


def test_full_state_dict_on_rank_0_loads_unsharded_and_sharded(reports):
    full = reports[0]["state_dicts"]["full"]
    assert set(reports[0]["state_dicts"]["full_kinds"].values()) == {"Tensor"}
    assert full.keys() == _Net().state_dict().keys()
    assert all(v.device.type == "cpu" for v in full.values())
    assert reports[1]["state_dicts"]["full"] == {}  # cpu_offload: rank 0 only
    want = reports[0]["state_dicts"]["outputs"]
    assert torch.allclose(_net_outputs(full), want, **TOL)
    # set_model_state_dict(broadcast_from_rank0=True) into a new sharded model
    for report in reports:
        assert torch.allclose(report["state_dicts"]["reloaded_outputs"], want, **TOL)


def test_dtensor_arguments_are_refused(reports):
    """A DTensor given to an operator directly (outside FSDP's unsharded forward) raises;
    no call computes on the local shards."""
    for report in reports:
        calls = report["dtensor"]
        for name, (kind, message) in calls.items():
            assert kind != "returned", f"{name} returned a {message}"
            if name == "lltm_forward_all_replicated":  # the raw operator: no sharding rule
                assert kind == "NotImplementedError", (name, kind, message)
                assert "does not have a sharding strategy registered" in message, name
            else:  # tensortools.ops: the first DTensor argument is named
                assert kind == "TypeError" and "is a DTensor" in message, (name, message)
            assert "tensortools." in message, name


def test_dtensor_argument_errors_name_the_argument(reports):
    want = {
        "lltm_fsdp_parameters": "'weights'",
        "lltm_weights_only": "'weights'",
        "lltm_all_replicated": "'input'",
        "graph_conv_weight_only": "'weight'",
        "fused_conv_bn2d_weight_only": "'weight'",
    }
    for report in reports:
        for name, argument in want.items():
            kind, message = report["dtensor"][name]
            assert kind == "TypeError" and argument in message and "DTensor" in message, (
                name,
                message,
            )


def test_compiled_sharded_model_trains_as_one_process(reports):
    want = _reference("net", 1)
    for report in reports:
        got = report["compiled"]
        for i in range(ITERATIONS):
            _assert_equal(got["grads"][i], want["grads"][i])
        _assert_equal(got["params"], want["params"])
        # the operators run inside the compiled graphs (FSDP's hooks run between them)
        assert set(NET_OPERATORS) <= set(got["graph_ops"]), got["graph_ops"]


def _in_place_reference() -> dict[str, torch.Tensor]:
    model = _make("lltm")
    x, h, c, _ = _data("lltm")
    new_h, _ = model(x, (h, c))
    ((new_h + 1) ** 2).mean().backward()
    return _grads(model)


@pytest.mark.parametrize("reshard", [True, False], ids=["reshard", "no_reshard"])
def test_in_place_op_on_a_sharded_lltm_output(reports, reshard):
    """Plain inputs: an in-place op on new_h before the loss is as in one process."""
    want = _in_place_reference()
    for report in reports:
        got = report["in_place"]["plain", reshard]
        assert not got["view"] and not got["warned"] and "error" not in got
        assert got["grad_types"] == ["DTensor"]
        _assert_equal(got["grads"], want)


@pytest.mark.parametrize("reshard", [True, False], ids=["reshard", "no_reshard"])
def test_in_place_op_on_a_sharded_lltm_output_with_metadata_input(reports, reshard):
    want = _in_place_reference()
    for report in reports:
        got = report["in_place"]["metadata", reshard]
        assert "error" not in got, got["error"]
        assert got["grad_types"] == ["DTensor"], got["grad_types"]
        _assert_equal(got["grads"], want)
        assert not got["view"] and not got["warned"]


# -- the example ------------------------------------------------------------------------


# A rank of torchrun aborting in its teardown, after the training finished (seen once in
# seven runs on the 2-core machine, 2026-11-27, not reproduced alone): retried once, and
# said in the run's notes. Any other failure, or this one twice, fails the test.
_TEARDOWN_ABORT = "terminate called without an active exception"


def test_fsdp_train_example_under_torchrun(tmp_path, summary_note):
    steps = 5
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a free port on this machine
        "--nproc-per-node",
        str(WORLD_SIZE),
        str(ROOT / "examples" / "fsdp_train.py"),
        "--steps",
        str(steps),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    for attempt in range(2):
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=JOIN_TIMEOUT_S
        )
        finished = len(re.findall(r"^step \d+ loss ", done.stdout, re.M)) == steps
        if done.returncode == 0 or attempt == 1 or not finished:
            break
        if _TEARDOWN_ABORT not in done.stdout + done.stderr:
            break
        summary_note(f"test_fsdp: a torchrun rank aborted in teardown ({_TEARDOWN_ABORT}); retried")
    assert done.returncode == 0, done.stdout + done.stderr
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", done.stdout, re.M)]
    assert len(losses) == steps, done.stdout  # rank 0 alone prints
    assert losses[-1] < 0.8 * losses[0], losses
