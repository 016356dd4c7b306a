"""torch.func over MetadataTensor batches (tensortools/types/metadata/collation.py, "vmap"):
``torch.func.vmap`` over dim 0 of a batch gives results mapped out at dim 0 labelled row by
row with their samples, with the values of a per-sample loop on plain tensors (float64);
other in_dims/out_dims give what torch gives; per-sample gradients (``vmap(grad(loss))``
through ``functional_call``) are labelled with their samples; ``grad``/``jacrev`` give
plain tensors (docs/metadata-tensor.md, "torch.func"); FusedConvBN2d says how to run
under vmap where it cannot."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacfwd, jacrev, vmap
from torch.utils.data import DataLoader, default_collate

from tensortools import MetadataTensor
from tensortools.nn import FusedConvBN2d

F64 = torch.float64


def sample_metadata(i: int) -> dict:
    """Sample i's labels: an id, a tuple, a nested dict, a tensor (stacked in a batch)."""
    return {
        "id": f"s{i}",
        "spacing": (1.0, 0.5 * i),
        "nested": {"tag": [i]},
        "affine": torch.eye(2, dtype=F64) * (i + 1),
    }


def make_data(n: int, shape=(3, 4)) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return [torch.randn(shape, generator=g, dtype=F64) for _ in range(n)]


def collated(data: list[torch.Tensor]) -> MetadataTensor:
    return default_collate([MetadataTensor(d, sample_metadata(i)) for i, d in enumerate(data)])


def check_rows(result, data, order, fn):
    """Row r of `result` is labelled sample order[r] and equals fn(that sample's plain data)."""
    assert type(result) is MetadataTensor and result.batch_size == len(order)
    assert result.shape[0] == len(order)
    for r, s in enumerate(order):
        row = result[r]
        want = sample_metadata(s)
        assert row.metadata.keys() == want.keys()
        assert row.metadata["id"] == want["id"] and row.metadata["spacing"] == want["spacing"]
        assert row.metadata["nested"] == want["nested"]
        assert torch.equal(row.metadata["affine"], want["affine"])
        expected = fn(data[s])
        torch.testing.assert_close(row.as_subclass(torch.Tensor), expected, rtol=1e-12, atol=1e-12)


W = torch.linspace(-1, 1, 20, dtype=F64).reshape(4, 5)
PER_SAMPLE = {  # f of one sample (3 x 4) -> a tensor
    "elementwise": lambda x: torch.sin(x) * 2 + x,
    "reduce_to_scalar": lambda x: (x**2).sum(),
    "row_reduce": lambda x: x.mean(1),
    "matmul": lambda x: x @ W,
    "reshape_and_norm": lambda x: torch.nn.functional.normalize(x.flatten(), dim=0),
    "outer_sample_stat": lambda x: x / x.norm(),
    "identity": lambda x: x,
}
SIZES = [1, 3, 5]
ORDERS = ["collated", "permuted", "chunked"]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", sorted(PER_SAMPLE))
def test_vmap_over_a_batch_labels_each_row_with_its_sample(name, order, n):
    fn = PER_SAMPLE[name]
    data = make_data(n)
    batch = collated(data)
    perm = list(range(n))
    kwargs = {}
    if order == "permuted":
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(7)).tolist()
        batch = batch[torch.tensor(perm)]
    elif order == "chunked":
        kwargs = {"chunk_size": 2}
    result = vmap(fn, **kwargs)(batch)
    check_rows(result, data, perm, fn)
    # the input keeps its own metadata, untouched
    assert batch.metadata["id"] == [f"s{s}" for s in perm]


def test_vmap_over_a_batch_from_a_dataloader_and_torch_vmap_alike():
    data = make_data(4)
    samples = [MetadataTensor(d, sample_metadata(i)) for i, d in enumerate(data)]
    fn = PER_SAMPLE["matmul"]
    for batch in DataLoader(samples, batch_size=2):
        ids = [int(s[1:]) for s in batch.metadata["id"]]
        check_rows(torch.vmap(fn)(batch), data, ids, fn)
        check_rows(vmap(vmap(lambda r: r.exp()))(batch), data, ids, torch.exp)


def test_vmap_over_an_empty_batch_gives_an_empty_batch():
    # (where torch's vmap runs over 0 plain samples; where it raises, it raises alike)
    batch = collated(make_data(3))[:0]
    ran = 0
    for name, fn in sorted(PER_SAMPLE.items()):
        try:
            want = vmap(fn)(plain(batch))
        except Exception as err:
            with pytest.raises(type(err)):
                vmap(fn)(batch)
            continue
        result = vmap(fn)(batch)
        assert type(result) is MetadataTensor and result.batch_size == 0, name
        assert result.shape == want.shape, name
        assert result.metadata["id"] == [] and result.metadata["affine"].shape == (0, 2, 2)
        ran += 1
    assert ran >= 5  # (6 of the 7 in torch 2.13: x / x.norm() raises over 0 samples)


def plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


# (in_dims, out_dims, f, arguments from (batch, plain data, another batch), labelled?)
def _cases(batch, data, other):
    x = torch.stack(data)
    two = lambda a, b: (a * b.sum(), a.sum(0))  # noqa: E731
    return {
        "in0_out0": (0, 0, torch.cos, (batch,), [True]),
        "in_neg_out_neg": (-3, -3, lambda r: r.T, (batch,), [True]),
        "in1_not_samples": (1, 0, torch.cos, (batch,), [False]),
        "out1": (0, 1, torch.cos, (batch,), [False]),
        "tuple_out_0_1": (0, (0, 1), two, (batch, batch), [True, False]),
        "tuple_out_0_none": (0, (0, None), lambda a: (a + 1, W), (batch,), [True, False]),
        "plain_weight_unmapped": ((0, None), 0, lambda a, w: a @ w, (batch, W), [True]),
        "plain_mapped_too": ((0, 0), 0, lambda a, b: a * b, (batch, x), [True]),
        "same_samples_twice": ((0, 0), 0, lambda a, b: a - b, (batch, batch * 2), [True]),
        "other_samples": ((0, 0), 0, lambda a, b: a - b, (batch, other), [False]),
        "batch_passed_whole": ((0, None), 0, lambda a, b: a + b.sum(0), (batch, batch), [False]),
        "batch_over_dim_2": ((0, 2), 0, lambda a, b: a @ b, (batch, batch), [False]),
    }


CASES = [
    "in0_out0",
    "in_neg_out_neg",
    "in1_not_samples",
    "out1",
    "tuple_out_0_1",
    "tuple_out_0_none",
    "plain_weight_unmapped",
    "plain_mapped_too",
    "same_samples_twice",
    "other_samples",
    "batch_passed_whole",
    "batch_over_dim_2",
]


@pytest.mark.parametrize("case", CASES)
def test_other_in_dims_and_out_dims_give_what_torch_gives(case):
    data = make_data(4)
    batch = collated(data)
    other = batch.flip(0)  # the same data, other samples in the rows
    cases = _cases(batch, data, other)
    assert sorted(cases) == sorted(CASES)
    in_dims, out_dims, fn, args, labelled = cases[case]
    got = vmap(fn, in_dims=in_dims, out_dims=out_dims)(*args)
    want = vmap(fn, in_dims=in_dims, out_dims=out_dims)(*[plain(a) for a in args])
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == len(labelled)
    for g, w, keeps in zip(got, want, labelled):
        torch.testing.assert_close(plain(g), w, rtol=0, atol=0)
        if keeps:
            assert type(g) is MetadataTensor and g.batch_size == 4
            for r in range(4):
                assert g[r].metadata["id"] == f"s{r}"
        else:
            assert type(g) is torch.Tensor or g is W


def test_vmap_with_tracking_off_gives_plain_tensors():
    batch = collated(make_data(3))
    with MetadataTensor.using_tracking(False):
        result = vmap(torch.sin)(batch)
    assert type(result) is torch.Tensor
    torch.testing.assert_close(result, torch.sin(plain(batch)))


# -- per-sample gradients -------------------------------------------------------------


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    conv = FusedConvBN2d(1, 2, 3, padding=1, dtype=F64).eval()
    with torch.no_grad():
        conv.running_mean.uniform_(-0.5, 0.5)
        conv.running_var.uniform_(0.5, 1.5)
    return torch.nn.Sequential(
        conv, torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(2 * 3 * 4, 2, dtype=F64)
    )


def loss_of(model):
    def loss(params, x, y):
        out = functional_call(model, params, (x.unsqueeze(0),))
        return torch.nn.functional.mse_loss(out, y.unsqueeze(0))

    return loss


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("order", ["collated", "permuted"])
@pytest.mark.parametrize("targets", ["plain", "batch"])
def test_per_sample_gradients_are_labelled_with_their_samples(n, order, targets):
    model = small_model()
    params = {k: v.detach() for k, v in model.named_parameters()}
    data = [d.unsqueeze(0) for d in make_data(n)]  # 1 x 3 x 4 images
    ys = [torch.tensor([float(i), -1.0], dtype=F64) for i in range(n)]
    batch = default_collate([MetadataTensor(d, sample_metadata(i)) for i, d in enumerate(data)])
    y = torch.stack(ys)
    if targets == "batch":
        y = default_collate([MetadataTensor(t, sample_metadata(i)) for i, t in enumerate(ys)])
    perm = list(range(n))
    if order == "permuted":
        perm = perm[::-1]
        batch, y = batch[torch.tensor(perm)], y[torch.tensor(perm)]
    grads = vmap(grad(loss_of(model)), in_dims=(None, 0, 0))(params, batch, y)
    assert grads.keys() == params.keys()
    for r, s in enumerate(perm):
        # the loop: torch.autograd on the plain sample, parameters leaves of their own
        leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
        out = functional_call(model, leaves, (data[s].unsqueeze(0),))
        loss = torch.nn.functional.mse_loss(out, ys[s].unsqueeze(0))
        want = torch.autograd.grad(loss, list(leaves.values()))
        for (name, g), w in zip(grads.items(), want):
            assert type(g) is MetadataTensor and g.batch_size == n, name
            assert g[r].metadata["id"] == f"s{s}", name
            torch.testing.assert_close(plain(g[r]), w, rtol=1e-10, atol=1e-12)
    assert not model[0].training  # (eval mode: the running statistics only read)


# -- grad and jacrev: plain tensors, as the docs say --------------------------------------

SCALAR_FNS = {
    "sum_of_squares": lambda x: (x**2).sum(),
    "sin_mean": lambda x: torch.sin(x).mean(),
    "matmul_norm": lambda x: (x @ W).norm(),
}


@pytest.mark.parametrize("name", sorted(SCALAR_FNS))
@pytest.mark.parametrize("kind", ["sample", "batch"])
def test_grad_and_jacobians_of_a_metadata_tensor_are_plain_tensors_of_the_values(name, kind):
    fn = SCALAR_FNS[name]
    data = make_data(3)
    x = MetadataTensor(data[0], sample_metadata(0)) if kind == "sample" else collated(data)
    vector_fn = lambda t: torch.sin(t) * fn(t)  # noqa: E731
    for transform, f in ((grad, fn), (jacrev, vector_fn), (jacfwd, vector_fn)):
        got = transform(f)(x)
        want = transform(f)(plain(x))
        assert type(got) is torch.Tensor, transform.__name__
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the input is left as it was
    assert isinstance(x, MetadataTensor) and x.metadata["id"] == (
        "s0" if kind == "sample" else ["s0", "s1", "s2"]
    )


# -- FusedConvBN2d under vmap ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["train", "eval", "train_no_running_stats"])
def test_fused_conv_bn_under_vmap_runs_or_says_how(mode):
    torch.manual_seed(0)
    module = FusedConvBN2d(2, 3, 3, padding=1, track_running_stats=mode != "train_no_running_stats")
    module = module.to(F64).train(mode != "eval")
    data = [d.reshape(2, 3, 2) for d in make_data(4)]
    batch = collated(data)
    per_sample = lambda x: module(x.unsqueeze(0)).squeeze(0)  # noqa: E731
    before = {k: v.clone() for k, v in module.named_buffers()}
    if mode == "train":
        with pytest.raises(
            RuntimeError, match=r"FusedConvBN2d.*vmap.*\.eval\(\).*track_running_stats=False"
        ):
            vmap(per_sample)(batch)
    else:
        result = vmap(per_sample)(batch)
        with torch.no_grad():
            check_rows(result.detach(), data, range(4), per_sample)
    for k, v in module.named_buffers():  # the refusal, and eval, leave the statistics
        assert torch.equal(v, before[k]), k


@pytest.mark.slow  # (a compile: 4-8 s)
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_vmap_over_a_batch_compiles_with_the_labels(backend):
    from torch._dynamo.testing import CompileCounterWithBackend

    fn = PER_SAMPLE["elementwise"]
    data = make_data(3)
    counter = CompileCounterWithBackend(backend)
    torch._dynamo.reset()
    compiled = torch.compile(lambda b: vmap(fn)(b), backend=counter, fullgraph=True)
    check_rows(compiled(collated(data)), data, range(3), fn)
    assert counter.frame_count == 1
