"""Random LLTM arguments for the tests."""

import torch

import tensortools

NAMES = ("input", "weights", "bias", "old_h", "old_cell")


def make_args(batch, features, state, *, dtype=torch.float64, device="cpu", requires_grad=False):
    """(input, weights, bias, old_h, old_cell) with the LLTM shapes, as leaves."""
    g = {"dtype": dtype, "device": device}
    args = (
        torch.randn(batch, features, **g),
        torch.randn(3 * state, state + features, **g) / (state + features) ** 0.5,
        torch.randn(3 * state, **g),
        torch.randn(batch, state, **g),
        torch.randn(batch, state, **g),
    )
    return tuple(a.requires_grad_(requires_grad) for a in args)


def run(fn, args, grads):
    """Outputs of fn(*args) and the gradients of every arg for output gradients `grads`."""
    args = tuple(a.detach().requires_grad_() for a in args)
    outs = fn(*args)
    arg_grads = torch.autograd.grad(outs, args, grads)
    return tuple(o.detach() for o in outs), arg_grads


def random_grads(batch, state, *, dtype=torch.float64, device="cpu"):
    return (
        torch.randn(batch, state, dtype=dtype, device=device),
        torch.randn(batch, state, dtype=dtype, device=device),
    )


def compare(args, grads, **tol):
    """Assert ops.lltm agrees with the reference on outputs and all gradients."""
    out, arg_grads = run(tensortools.ops.lltm, args, grads)
    ref_out, ref_grads = run(tensortools.reference.lltm, args, grads)
    for name, a, b in zip(("new_h", "new_cell"), out, ref_out):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f"{n}: {m}")
    for name, a, b in zip(NAMES, arg_grads, ref_grads):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f"grad {n}: {m}")
