"""Random LLTM arguments for the tests, and the maths of the cell's raw operators (what
lltm_forward saves for backward, and the backward from it) in plain PyTorch."""

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


def cell_forward_reference(input, weights, bias, old_h, old_cell):
    """lltm_forward's (new_h, new_cell, gates, X): reference.lltm's results, the activated
    gates side by side and X = [old_h | input]."""
    X = torch.cat([old_h, input], dim=-1)
    i, o, c = torch.nn.functional.linear(X, weights, bias).chunk(3, dim=-1)
    gates = torch.cat([torch.sigmoid(i), torch.sigmoid(o), torch.nn.functional.elu(c)], dim=-1)
    return (*tensortools.reference.lltm(input, weights, bias, old_h, old_cell), gates, X)


def cell_backward_reference(grad_h, grad_cell, new_cell, gates):
    """(d_gates, d_old_cell): the gradients of one step's pre-activation gates and old cell,
    from its activated gates (elu's derivative from its output: 1 above 0, else y + 1)."""
    ig, og, cc = gates.chunk(3, dim=-1)
    t = torch.tanh(new_cell)
    d_cell = grad_cell + grad_h * og * (1 - t * t)
    d_i = d_cell * cc * ig * (1 - ig)
    d_o = grad_h * t * og * (1 - og)
    d_c = d_cell * ig * torch.where(cc > 0, torch.ones_like(cc), cc + 1)
    return torch.cat([d_i, d_o, d_c], dim=-1), d_cell


SEQUENCE_NAMES = ("input", "weights", "bias", "h0", "c0")


def make_sequence_args(
    steps, batch, features, state, *, dtype=torch.float64, device="cpu", requires_grad=False
):
    """(input T×B×F, weights, bias, h0, c0) for the LLTM over a sequence, as leaves."""
    cell = make_args(batch, features, state, dtype=dtype, device=device)
    input = torch.randn(steps, batch, features, dtype=dtype, device=device)
    return tuple(a.requires_grad_(requires_grad) for a in (input, *cell[1:]))


def sequence_grads(steps, batch, state, *, dtype=torch.float64, device="cpu"):
    """Random gradients for (output, h_n, c_n)."""
    g = {"dtype": dtype, "device": device}
    return (
        torch.randn(steps, batch, state, **g),
        torch.randn(batch, state, **g),
        torch.randn(batch, state, **g),
    )


def run_sequence(fn, args, grads):
    """Outputs of fn(*args) and the gradient of every arg for output gradients `grads`
    (zeros for an argument no output depends on, as for T = 0 in the reference loop)."""
    args = tuple(a.detach().requires_grad_() for a in args)
    outs = fn(*args)
    loss = sum((o * g).sum() for o, g in zip(outs, grads))
    arg_grads = torch.autograd.grad(loss, args, allow_unused=True, materialize_grads=True)
    return tuple(o.detach() for o in outs), arg_grads


def compare_sequence(args, grads, **tol):
    """Assert ops.lltm_sequence agrees with the reference loop on outputs and gradients."""
    out, arg_grads = run_sequence(tensortools.ops.lltm_sequence, args, grads)
    ref_out, ref_grads = run_sequence(tensortools.reference.lltm_sequence, args, grads)
    for name, a, b in zip(("output", "h_n", "c_n"), out, ref_out):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f"{n}: {m}")
    for name, a, b in zip(SEQUENCE_NAMES, arg_grads, ref_grads):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f"grad {n}: {m}")
