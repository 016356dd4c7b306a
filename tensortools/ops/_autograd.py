"""How every operator meets autograd, forward-mode AD and torch.func, in one way.

``torch.library.register_autograd`` builds an ``autograd.Function`` without
``setup_context`` or ``jvp``: torch.func refuses it ("must override the setup_context
staticmethod"; pytorch/pytorch#170834) and forward-mode AD through it gives no tangent.
:func:`register` takes the same setup and backward functions plus a tangent formula and a
batching rule. It registers the operator's Autograd kernel itself (the ``Autograd`` key, as
``register_autograd`` does, so ``torch.compile``, autocast and ``opcheck`` see the same
operator): where a derivative can be asked for it applies a single-level Function (the
kind torch.func builds for its own levels) whose forward redispatches to the kernels, and
otherwise it redispatches directly. torch.func reaches the kernel at each of its levels
with that level's tensors, so ``grad``, ``vjp``, ``jacrev``, ``jvp`` and ``jacfwd`` work as
for any ATen operator; the batching rule (``torch.library.register_vmap``) serves ``vmap``
and every level under it. The kernels stay in C++/CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch._functorch.utils import enable_single_level_autograd_function
from torch.autograd import forward_ad
from torch.autograd.forward_ad import _set_fwd_grad_enabled

_LIB = torch.library.Library("tensortools", "FRAGMENT")


def wants_autograd(args: Sequence[Any]) -> bool:
    """Whether a call may be differentiated: reverse mode (grad enabled and an argument
    requiring it), forward mode (a dual level open) or a torch.func transform active."""
    return (
        (torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args))
        or (forward_ad._current_level >= 0 and torch._C._is_fwd_grad_enabled())
        # (dynamo traces transforms its own way, and would put this query in the graph)
        or (
            not torch.compiler.is_dynamo_compiling() and torch._C._are_functorch_transforms_active()
        )
    )


def routed() -> bool:
    """Whether an entry point's call must take the operator's registered route (its
    Python Autograd kernel, above): under ``torch.compile`` (which traces the registered
    operator), a torch.func transform (vmap, grad, jvp, functionalize: their levels reach
    the kernel), an open forward-AD level, or autocast (which casts before autograd).
    Otherwise the entry point takes the lean path (:func:`register`'s ``call``)."""
    return (
        torch.compiler.is_compiling()
        or forward_ad._current_level >= 0
        or torch._C._are_functorch_transforms_active()
        or torch._C._is_any_autocast_enabled()
    )


def below_autograd(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A call of ``op`` where no derivative is wanted: outside :func:`routed` calls, the
    kernels directly (past the Autograd key), else the registered route."""

    def call(*args: Any) -> Any:
        if routed():
            return op(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)

    return call


def save(ctx: Any, *tensors: Tensor | None) -> None:
    """Save for backward and for the tangent formula alike."""
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


def no_second_order(name: str, instead: str = "") -> Callable[..., Any]:
    """The backward and tangent formula of a backward operator whose own derivative is not
    provided: differentiating the gradient (double backward, ``hessian``,
    ``jacfwd(jacrev(f))``) raises, naming the operator, rather than giving a wrong value."""

    def refuse(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(
            f"tensortools.ops.{name} does not support double backward (differentiating its "
            f"gradient, in reverse or forward mode: hessian, jacfwd(jacrev(f))){instead}"
        )

    return refuse


def loop_vmap(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A batching rule that calls ``op`` once per sample and stacks the results: for
    operators whose maths mixes the rows of their own batch (batch statistics, weight
    gradients summed over the batch), where the vmapped dim cannot be folded in."""
    returns_tuple = len(op._schema.returns) != 1

    def rule(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> Any:
        if info.batch_size == 0:
            return _no_samples(op, returns_tuple, in_dims, args)
        results = []
        for i in range(info.batch_size):
            sample = (a.select(d, i) if isinstance(d, int) else a for a, d in zip(args, in_dims))
            result = op(*sample)
            results.append(result if returns_tuple else (result,))
        # An output left out (an undefined gradient) stays None.
        stacked = tuple(None if c[0] is None else torch.stack(c) for c in zip(*results))
        dims = tuple(None if s is None else 0 for s in stacked)
        return (stacked, dims) if returns_tuple else (stacked[0], dims[0])

    return rule


def _no_samples(
    op: torch._ops.OpOverload, returns_tuple: bool, in_dims: tuple[int | None, ...], args: tuple
) -> Any:
    """:func:`loop_vmap`'s answer for a vmapped dim of size 0 (``jacrev`` of an empty
    output vmaps over none): empty results of the shapes one sample's would have, with a
    vmapped dim of size 0 in front. The shapes (and the operator's argument checks) come
    from one call on a sample of zeros of a sample's shape."""
    sample = (
        a.new_zeros(a.shape[:d] + a.shape[d + 1 :]) if isinstance(d, int) else a
        for a, d in zip(args, in_dims)
    )
    result = op(*sample)
    empty = tuple(
        None if r is None else r.new_empty((0, *r.shape))
        for r in (result if returns_tuple else (result,))
    )
    dims = tuple(None if e is None else 0 for e in empty)
    return (empty, dims) if returns_tuple else (empty[0], dims[0])


def loop_or_fold(
    op: torch._ops.OpOverload, looped: Sequence[int], fold: Callable[..., Any]
) -> Callable[..., Any]:
    """A batching rule that loops over the samples (:func:`loop_vmap`) where an argument
    at a position of `looped` is vmapped (each sample has its own parameters, or its own
    number), and otherwise calls ``fold(info, in_dims, *args)``, which folds the vmapped
    dim into the batch the kernels take."""
    loop = loop_vmap(op)

    def rule(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> Any:
        if any(in_dims[i] is not None for i in looped):
            return loop(info, in_dims, *args)
        return fold(info, in_dims, *args)

    return rule


def register(
    qualname: str,
    *,
    setup_context: Callable[..., Any],
    backward: Callable[..., Any],
    jvp: Callable[..., Any],
    vmap: Callable[..., Any],
    compiled: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """Give the operator ``qualname`` its Autograd kernel (backward and tangent formula)
    and its batching rule. ``setup_context``, ``backward`` and ``jvp`` are as for a
    ``torch.autograd.Function``'s staticmethods over the operator's arguments; ``vmap`` as
    for ``torch.library.register_vmap``.

    Returns the call the entry points make, ``call(*args)``: where :func:`routed` says so,
    the operator itself (its registered route); otherwise the lean path, with no Python
    Autograd kernel and no redispatch: one plain ``autograd.Function`` whose forward runs
    the kernels past the Autograd key and whose backward is ``backward``, where a gradient
    is wanted, and the kernels directly where none is. ``compiled``: the same Function in
    C++ (``compiled(*args)`` gives the operator's results as a list), which the lean path
    applies instead where it measured faster (the LLTM cell's)."""
    op = torch._library.utils.lookup_op(qualname)
    name = qualname.split("::")[1]

    # The dispatch keys left to run travel as a last, non-tensor argument, with the grad
    # modes of the call inside a torch.func transform: the levels below this one run in
    # them (apply turns both off), as torch.func's own single-level Functions do.
    def forward(*args: Any) -> Any:
        *args, (keyset, modes) = args
        with contextlib.ExitStack() as stack:
            if modes is not None:
                stack.enter_context(torch.set_grad_enabled(modes[0]))
                stack.enter_context(_set_fwd_grad_enabled(modes[1]))
            stack.enter_context(torch._C._AutoDispatchBelowAutograd())
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        setup_context(ctx, inputs[:-1], output)
        # A tangent formula's None for a differentiable output means zero; torch would set
        # it as that output's tangent unchecked (an internal assert), so jvp_ makes it a
        # zero tensor of the output's kind, kept here (not the output itself).
        skip = {id(t) for t in getattr(ctx, "non_differentiable", None) or ()}
        ctx.tangent_shapes = tuple(
            (o.shape, o.dtype, o.device)
            if isinstance(o, Tensor)
            and id(o) not in skip
            and (o.is_floating_point() or o.is_complex())
            else None
            for o in (output if isinstance(output, tuple) else (output,))
        )

    def backward_(ctx: Any, *grads: Any) -> Any:
        needs_input_grad = ctx.needs_input_grad
        ctx.needs_input_grad = needs_input_grad[:-1]
        try:
            result = backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs_input_grad
        return (*result, None) if isinstance(result, tuple) else (result, None)

    def jvp_(ctx: Any, *tangents: Any) -> Any:
        result = jvp(ctx, *tangents[:-1])
        single = not isinstance(result, tuple)
        filled = tuple(
            torch.zeros(like[0], dtype=like[1], device=like[2]) if t is None and like else t
            for t, like in zip((result,) if single else result, ctx.tangent_shapes)
        )
        return filled[0] if single else filled

    # A single-level Function: the Autograd kernel runs inside one level of a torch.func
    # transform (its tensors are that level's), where the Function applies as it would
    # outside any transform. A plain Function would hand itself to torch.func again, which
    # refuses from inside the dispatcher.
    function = type(
        "".join(part.title() for part in name.split("_")) + "Function",
        (torch.autograd.function._SingleLevelFunction,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup),
            "backward": staticmethod(backward_),
            "jvp": staticmethod(jvp_),
        },
    )

    def autograd_kernel(keyset: torch._C.DispatchKeySet, *args: Any) -> Any:
        if not wants_autograd(args):
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)
        if torch._C._are_functorch_transforms_active():
            modes = (torch.is_grad_enabled(), torch._C._is_fwd_grad_enabled())
            with enable_single_level_autograd_function():
                return function.apply(*args, (keyset, modes))
        return function.apply(*args, (keyset, None))

    _LIB.impl(name, autograd_kernel, "Autograd", with_keyset=True)
    torch.library.register_vmap(qualname, vmap, lib=_LIB)

    # The lean path's Function: forward takes ctx (no setup_context staticmethod), so
    # apply binds no signature; it is never applied under a transform or forward AD.
    def lean_forward(ctx: Any, *args: Any) -> Any:
        with torch._C._AutoDispatchBelowAutograd():
            output = op(*args)
        setup_context(ctx, args, output)
        return output

    lean = type(
        "".join(part.title() for part in name.split("_")) + "LeanFunction",
        (torch.autograd.Function,),
        {"forward": staticmethod(lean_forward), "backward": staticmethod(backward)},
    )

    def call(*args: Any) -> Any:
        if routed():
            return op(*args)
        if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return lean.apply(*args) if compiled is None else tuple(compiled(*args))
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)

    call.op = op  # type: ignore[attr-defined]
    return call
