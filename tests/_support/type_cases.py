"""Torch calls used to check that wrapper types behave like plain tensors."""

import torch
import torch.nn.functional as F

# name -> function of (x, y) with x, y float tensors of shape (3, 4); several return
# tuples, named tuples or lists of tensors, some return non-tensors.
CALLS = {
    "add": lambda x, y: torch.add(x, y),
    "add alpha": lambda x, y: torch.add(x, y, alpha=2),
    "operator +": lambda x, y: x + y,
    "operator radd": lambda x, y: 1.5 + x,
    "operator -": lambda x, y: x - y,
    "operator *": lambda x, y: x * 3,
    "operator /": lambda x, y: x / (y.abs() + 1),
    "operator **": lambda x, y: x**2,
    "operator @": lambda x, y: x @ y.T,
    "neg": lambda x, y: -x,
    "abs": lambda x, y: x.abs(),
    "exp": lambda x, y: torch.exp(x),
    "sin": lambda x, y: x.sin(),
    "tanh": lambda x, y: torch.tanh(x),
    "sigmoid": lambda x, y: torch.sigmoid(x),
    "relu": lambda x, y: F.relu(x),
    "softmax": lambda x, y: F.softmax(x, dim=1),
    "clamp": lambda x, y: x.clamp(-0.5, 0.5),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "sum": lambda x, y: x.sum(),
    "sum dim": lambda x, y: x.sum(dim=0),
    "mean": lambda x, y: torch.mean(x, dim=1, keepdim=True),
    "std": lambda x, y: x.std(),
    "cumsum": lambda x, y: torch.cumsum(x, 0),
    "max dim": lambda x, y: torch.max(x, dim=1),
    "min": lambda x, y: x.min(),
    "sort": lambda x, y: torch.sort(x, dim=1),
    "topk": lambda x, y: torch.topk(x, 2),
    "argmax": lambda x, y: x.argmax(),
    "transpose": lambda x, y: x.transpose(0, 1),
    "t": lambda x, y: x.t(),
    "reshape": lambda x, y: x.reshape(4, 3),
    "view": lambda x, y: x.view(-1),
    "flatten": lambda x, y: torch.flatten(x),
    "unsqueeze": lambda x, y: x.unsqueeze(0),
    "permute": lambda x, y: x.permute(1, 0),
    "cat": lambda x, y: torch.cat([x, y]),
    "stack": lambda x, y: torch.stack((x, y), dim=1),  # (along dim 0: a batch of samples)
    "split": lambda x, y: torch.split(x, 2),
    "chunk": lambda x, y: x.chunk(2, dim=1),
    "unbind": lambda x, y: x.unbind(),
    "index": lambda x, y: x[1:, ::2],
    "index tensor": lambda x, y: x[torch.tensor([0, 2])],
    "masked_fill": lambda x, y: x.masked_fill(x > 0, 0.0),
    "gather": lambda x, y: torch.gather(x, 1, torch.tensor([[0], [1], [2]])),
    "matmul": lambda x, y: torch.matmul(x, y.T),
    "linear": lambda x, y: F.linear(x, y),
    "einsum": lambda x, y: torch.einsum("ij,kj->ik", x, y),
    "norm": lambda x, y: torch.linalg.norm(x),
    "svd values": lambda x, y: torch.linalg.svdvals(x),
    "eq": lambda x, y: x == y,
    "gt": lambda x, y: x > 0,
    "isnan": lambda x, y: torch.isnan(x),
    "to double": lambda x, y: x.to(torch.float64),
    "double": lambda x, y: x.double(),
    "clone": lambda x, y: x.clone(),
    "detach": lambda x, y: x.detach(),
    "contiguous": lambda x, y: x.T.contiguous(),
    "item": lambda x, y: x[0, 0].item(),
    "tolist": lambda x, y: x.tolist(),
    "shape": lambda x, y: x.shape,
    "numel": lambda x, y: x.numel(),
    "dropout eval": lambda x, y: F.dropout(x, 0.5, training=False),
    "layer_norm": lambda x, y: F.layer_norm(x, (4,)),
    "mse_loss": lambda x, y: F.mse_loss(x, y),
    "in-place add_": lambda x, y: x.clone().add_(y),
}


def tensors_in(out):
    """The tensors of a call's result, in order (through tuples and lists)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        return [t for o in out for t in tensors_in(o)]
    return []


def assert_same_values(got, want):
    """got (from wrapped inputs) equals want (plain inputs): values, dtypes, shapes, and
    the same structure."""
    assert type(got) is type(want) or isinstance(got, torch.Tensor)
    got_t, want_t = tensors_in(got), tensors_in(want)
    assert len(got_t) == len(want_t)
    for g, w in zip(got_t, want_t):
        with torch._C.DisableTorchFunctionSubclass():
            assert g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(
                g.as_subclass(torch.Tensor), w, rtol=0, atol=0, equal_nan=True
            )
    if not want_t:
        assert got == want
