"""The ``modules`` check of :func:`~tensortools.testing.check_type`: modules as workloads.

PyTorch's ``module_db`` (``torch.testing._internal.common_modules``) is to modules what
op_db is to functions: for each module, constructor arguments and forward inputs. Each
sample (and tensortools' own modules, :mod:`tensortools.nn`, on small inputs of this
file's) runs twice from the same parameters: on the forward input's tensors made into
instances, and on the plain tensors they stand for. The outputs must agree (the dtype's
tolerance) and follow the type's rule, the buffers (running statistics) must agree after
the forward, and where there is something to differentiate (parameters, or inputs, that
require grad) the gradients of a weighted sum of the floating outputs must agree.

The modules run in training mode, their default and the mode backward is for, with the
random generator seeded alike before both runs: dropout, ``FractionalMaxPool`` and lazy
initialisation draw the same numbers, so no sample fails by chance.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.testing import make_tensor
from torch.utils._pytree import tree_flatten, tree_map_only, tree_unflatten

from tensortools._optional import tool_import
from tensortools._samples import compare_results, seeded
from tensortools.dispatch import TensorLike
from tensortools.testing.run import Run, is_size, result_tensors

__all__ = ["ModuleSample", "check_modules", "module_infos"]


class ModuleSample(NamedTuple):
    """One module sample, as failures name it: the module (``"nn.Linear"``) and which of
    its samples (index, description, constructor arguments, input shapes, dtype)."""

    name: str
    label: str


def check_modules(
    run: Run, dtypes: Sequence[torch.dtype], max_samples: int | None
) -> list[ModuleSample]:
    """Run up to `max_samples` samples of each module per dtype (those holding a tensor
    `make` has an instance for) through the type; returns the samples that ran."""
    ran: list[ModuleSample] = []
    # (torch warns about some samples themselves, in the plain run as on the type: the
    # encoder's nested tensors, kl_div's 'mean'; a type's author has nothing to act on)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name, info in module_infos():
            _check_module(run, name, info, dtypes, max_samples, ran)
    return ran


def _check_module(
    run: Run,
    name: str,
    info: Any,
    dtypes: Sequence[torch.dtype],
    max_samples: int | None,
    ran: list,
) -> None:
    """The first `max_samples` samples of one module that run, per dtype."""
    for dtype in dtypes:
        if dtype not in info.supported_dtypes("cpu"):
            continue
        try:
            # (seeded: a sample's values never hang on what ran before it)
            inputs = seeded(
                lambda: list(
                    info.module_inputs_func(
                        info, device="cpu", dtype=dtype, requires_grad=True, training=True
                    )
                )
            )
        except Exception:  # a sample generator that fails on this build
            continue
        count = 0
        for k, module_input in enumerate(inputs):
            if max_samples is not None and count >= max_samples:
                break
            if module_input.forward_input is None:
                continue
            s = ModuleSample(name, _label(name, k, module_input, dtype))
            if _check_sample(run, s, info.module_cls, module_input, dtype):
                ran.append(s)
                count += 1


def module_infos() -> Iterator[tuple[str, Any]]:
    """(name, ModuleInfo) for each entry of module_db, then for tensortools' modules."""
    module_db = tool_import(
        "torch.testing._internal.common_modules", "PyTorch's module_db (module samples)"
    ).module_db
    for info in module_db:
        yield info.name, info
    yield from _own_modules()


def _check_sample(run: Run, s: ModuleSample, cls: type, module_input: Any, dtype) -> bool:
    """One sample, on the type and plain; False where it could not run (no instance, or
    the plain run raises)."""
    calls = _calls(run, s, module_input.forward_input)
    if calls is None:
        return False
    ctor = module_input.constructor_input
    try:
        typed_module = seeded(lambda: cls(*ctor.args, **ctor.kwargs)).to(dtype).train()
        plain_module = copy.deepcopy(typed_module)
    except Exception:
        return False
    typed, plain, spec, slots = calls
    typed_args, typed_kwargs = tree_unflatten(typed, spec)
    plain_args, plain_kwargs = tree_unflatten(plain, spec)
    try:
        want = seeded(lambda: plain_module(*plain_args, **plain_kwargs))
    except Exception:
        return False  # the plain module refuses the sample: nothing to compare
    try:
        got = seeded(lambda: typed_module(*typed_args, **typed_kwargs))
    except Exception as err:
        run.raised("modules", s, err, "forward")
        return True
    reason = compare_results(_detached(run.plain(got)), _detached(want), exact=False)
    if reason:
        run.fail("modules", s, f"forward: {reason}")
    problem = run.type_problem((typed_args, typed_kwargs), got)
    if problem:
        run.fail("modules", s, f"forward: {problem}")
    if not reason:
        _compare_buffers(run, s, typed_module, plain_module)
        _compare_gradients(
            run,
            s,
            (typed_module, got, [typed[k] for k in slots]),
            (plain_module, want, [plain[k] for k in slots]),
        )
    return True


def _calls(run: Run, s: ModuleSample, forward_input: Any) -> tuple | None:
    """The forward input's flat tensors and arguments with every tensor `make` has an
    instance for made into one, their plain counterparts (fresh copies: a module may
    change its input in place), the tree spec, and the flat positions whose gradients are
    compared: floating tensors the sample marks as requiring grad (not instances of a
    structured type, whose gradient is not the dense tensor's). None where no tensor
    became an instance."""
    leaves, spec = tree_flatten((forward_input.args, forward_input.kwargs), is_leaf=is_size)
    typed, plain, slots = [], [], []
    for k, t in enumerate(leaves):
        if not isinstance(t, Tensor):
            typed.append(t)
            plain.append(t)
            continue
        grad = t.requires_grad and t.is_floating_point()
        x = run.instance(t.detach().clone(), s)
        if x is None:
            typed.append(t.detach().clone().requires_grad_(grad))
            plain.append(t.detach().clone().requires_grad_(grad))
        else:
            grad = grad and not run.structured
            plain.append(run.plain_call((x, (), {}))[0].detach().clone().requires_grad_(grad))
            typed.append(x.requires_grad_() if grad else x)
        if grad:
            slots.append(k)
    if not any(isinstance(x, run.cls) for x in typed):
        return None
    return typed, plain, spec, slots


def _compare_buffers(run: Run, s: ModuleSample, typed: Any, plain: Any) -> None:
    """The buffers after the forward (batch norm's running statistics, updated in place)."""
    typed_buffers = dict(typed.named_buffers())
    for name, want in plain.named_buffers():
        reason = compare_results(run.plain(typed_buffers.get(name)), want, exact=False)
        if reason:
            run.fail("modules", s, f"buffer {name} after forward: {reason}")


def _compare_gradients(run: Run, s: ModuleSample, typed: tuple, plain: tuple) -> None:
    """Gradients of a weighted sum of the floating outputs, for the parameters that
    require grad and the inputs marked so; `typed` and `plain` are each (module, output,
    gradient inputs)."""
    (typed_module, got, typed_inputs), (plain_module, want, plain_inputs) = typed, plain
    params = [(n, p) for n, p in plain_module.named_parameters() if p.requires_grad]
    want_out = _differentiable(result_tensors(want))
    if not want_out or not (params or plain_inputs):
        return
    try:
        weights = seeded(lambda: [torch.randn_like(t) for t in want_out])
        wanted = torch.autograd.grad(
            _weighted_sum(want_out, weights),
            [p for _, p in params] + plain_inputs,
            allow_unused=True,
        )
    except Exception:
        return  # no backward for the plain module on this sample
    got_out = _differentiable([run.plain(t) for t in _leaves(got)])
    if len(got_out) != len(want_out):
        reason = f"{len(got_out)} outputs require grad where the plain run has {len(want_out)}"
        run.fail("modules", s, reason)
        return
    typed_params = dict(typed_module.named_parameters())
    try:
        found = torch.autograd.grad(
            _weighted_sum(got_out, weights),
            [typed_params[n] for n, _ in params] + typed_inputs,
            allow_unused=True,
        )
    except Exception as err:
        run.raised("modules", s, err, "backward")
        return
    names = [f"parameter {n}" for n, _ in params]
    names += [f"input {k}" for k in range(len(plain_inputs))]
    for which, g, w in zip(names, found, wanted):
        if (g is None) != (w is None):
            run.fail("modules", s, f"gradient of {which}: {g!r} where the plain run gives {w!r}")
        elif g is not None:
            reason = compare_results(run.plain(g), w, exact=False)
            if reason:
                run.fail("modules", s, f"gradient of {which}: {reason}")


def _differentiable(tensors: list) -> list[Tensor]:
    return [t for t in tensors if t.is_floating_point() and t.requires_grad]


def _leaves(obj: Any) -> list:
    """The tensors and instances in a result."""
    leaves, _ = tree_flatten(obj, is_leaf=lambda x: is_size(x) or isinstance(x, TensorLike))
    return [x for x in leaves if isinstance(x, (Tensor, TensorLike))]


def _weighted_sum(outs: list[Tensor], weights: list[Tensor]) -> Tensor:
    return sum((o * w).sum() for o, w in zip(outs, weights))


def _detached(obj: Any) -> Any:
    return tree_map_only(Tensor, Tensor.detach, obj, is_leaf=is_size)


def _label(name: str, k: int, module_input: Any, dtype: torch.dtype) -> str:
    """Which sample: its index and description, the constructor's arguments and the
    forward input's shapes (tensors by shape, to keep the line short)."""
    ctor, fwd = module_input.constructor_input, module_input.forward_input

    def show(f: Any) -> str:
        def one(x: Any) -> Any:
            return _Shown(f"tensor{tuple(x.shape)}")

        args, kwargs = tree_map_only(Tensor, one, (f.args, f.kwargs), is_leaf=is_size)
        return ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])

    desc = f" '{module_input.desc}'" if module_input.desc else ""
    short = name.rsplit(".", 1)[-1]
    text = f"{name} sample {k}{desc} {str(dtype).replace('torch.', '')}: "
    return (text + f"{short}({show(ctor)}) on ({show(fwd)})")[:200]


class _Shown(str):
    def __repr__(self) -> str:
        return str(self)


# --- tensortools' own modules ---------------------------------------------------------------


def _own_modules() -> Iterator[tuple[str, Any]]:
    """tensortools.nn's modules as ModuleInfos, on small inputs: square ones first (every
    tensor of the first LLTM sample, and GraphConv's adjacency, is a square matrix, which
    structured types stand in for), then others."""
    from torch.testing._internal.common_modules import ModuleInfo

    from tensortools import nn

    for cls, inputs in (
        (nn.LLTM, _lltm_inputs),
        (nn.LLTMSequence, _lltm_sequence_inputs),
        (nn.GraphConv, _graph_conv_inputs),
        (nn.FusedConvBN2d, _fused_conv_bn_inputs),
        # (in one process: batch norm over its own batch, as FusedConvBN2d)
        (nn.SyncFusedConvBN2d, _fused_conv_bn_inputs),
    ):
        yield f"tensortools.nn.{cls.__name__}", ModuleInfo(cls, module_inputs_func=inputs)


def _maker(dtype: torch.dtype, requires_grad: bool) -> Callable[..., Tensor]:
    return partial(make_tensor, device="cpu", dtype=dtype, requires_grad=requires_grad)


def _lltm_inputs(info, device, dtype, requires_grad, training, **kwargs) -> list:
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    t = _maker(dtype, requires_grad)
    return [
        ModuleInput(FunctionInput(4, 4), FunctionInput(t(4, 4), (t(4, 4), t(4, 4))), "square"),
        ModuleInput(FunctionInput(5, 3), FunctionInput(t(2, 5), (t(2, 3), t(2, 3)))),
    ]


def _lltm_sequence_inputs(info, device, dtype, requires_grad, training, **kwargs) -> list:
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    t = _maker(dtype, requires_grad)
    return [
        ModuleInput(FunctionInput(3, 4), FunctionInput(t(5, 2, 3)), "zero_state"),
        ModuleInput(
            FunctionInput(3, 4, batch_first=True),
            FunctionInput(t(2, 5, 3), (t(2, 4), t(2, 4))),
            "batch_first",
        ),
    ]


def _graph_conv_inputs(info, device, dtype, requires_grad, training, **kwargs) -> list:
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    t = _maker(dtype, requires_grad)
    return [
        ModuleInput(FunctionInput(4, 3), FunctionInput(t(4, 4), t(4, 4)), "square"),
        ModuleInput(FunctionInput(3, 2, bias=False), FunctionInput(t(5, 5), t(5, 3)), "no_bias"),
    ]


def _fused_conv_bn_inputs(info, device, dtype, requires_grad, training, **kwargs) -> list:
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    t = _maker(dtype, requires_grad)
    return [
        ModuleInput(FunctionInput(2, 3, 3, padding=1), FunctionInput(t(2, 2, 5, 5))),
        ModuleInput(
            FunctionInput(2, 3, (3, 2), stride=2, momentum=None),
            FunctionInput(t(3, 2, 6, 5)),
            "cumulative_average",
        ),
    ]
