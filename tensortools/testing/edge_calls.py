"""The ``edges`` check's fixed calls (:mod:`~tensortools.testing.edges` has the rest),
each on an instance of a 4x4 tensor of the run's first dtype against the plain tensor it
stands for:

- views (``x.view(-1)``, ``x.transpose(0, 1)``, ``x.narrow(0, 1, 2)``, ``x[1:, ::2]``,
  ...): a write through the view changes the base, and a write into the base the view,
  as in plain torch; a type whose views are copies says so (``views_copy=True``), and its
  copies are listed in the report's ``copies``, not failed;
- random functions (``torch.rand_like``, ``bernoulli``, ``dropout``, ``normal``, the
  in-place samplers, with and without a ``generator=``): with the generator seeded
  alike, the values and the generator's state after the call are plain's;
- a type that overrides nothing (its ``__torch_function__`` returns NotImplemented for
  every call), a tensor-like and a ``torch.Tensor`` subclass, in a call with an instance:
  the call ends in ``TypeError`` as with a plain tensor, and the type's
  ``__torch_function__`` given that type answers NotImplemented (or passes the call on
  to it, which declines it); a type whose ``__torch_function__`` is torch's opt-out
  (``torch._C._disabled_torch_function_impl``) is never asked, and only its calls are
  judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from tensortools._samples import compare_results
from tensortools.testing.report import Failure
from tensortools.testing.run import Run, same_value

__all__ = [
    "RANDOM",
    "UNKNOWN",
    "VIEWS",
    "check_random",
    "check_unknown_types",
    "check_views",
    "declined_as_plain",
    "opted_out",
    "unknown_tensor",
]


class _Case(NamedTuple):
    name: str
    label: str


#: Views of a 4x4 tensor: how the call is written -> the call.
VIEWS: dict[str, Callable[[Any], Any]] = {
    "x.view(-1)": lambda a: a.view(-1),
    "x.view_as(x)": lambda a: a.view_as(a),
    "x.reshape(2, 8)": lambda a: a.reshape(2, 8),
    "x.flatten()": lambda a: a.flatten(),
    "x.transpose(0, 1)": lambda a: a.transpose(0, 1),
    "x.t()": lambda a: a.t(),
    "x.mT": lambda a: a.mT,
    "x.permute(1, 0)": lambda a: a.permute(1, 0),
    "x.movedim(0, 1)": lambda a: a.movedim(0, 1),
    "x.narrow(0, 1, 2)": lambda a: a.narrow(0, 1, 2),
    "x.select(0, 1)": lambda a: a.select(0, 1),
    "x[1]": lambda a: a[1],
    "x[1:, ::2]": lambda a: a[1:, ::2],
    "x[..., 1]": lambda a: a[..., 1],
    "x[None]": lambda a: a[None],
    "x.unsqueeze(0)": lambda a: a.unsqueeze(0),
    "x.unflatten(1, (2, 2))": lambda a: a.unflatten(1, (2, 2)),
    "x.diagonal()": lambda a: a.diagonal(),
    "x.unbind()[1]": lambda a: a.unbind()[1],
    "x.split(2)[1]": lambda a: a.split(2)[1],
    "x.chunk(2, 1)[0]": lambda a: a.chunk(2, 1)[0],
    "x.unfold(1, 2, 2)": lambda a: a.unfold(1, 2, 2),
    "x.as_strided((2, 2), (1, 2))": lambda a: a.as_strided((2, 2), (1, 2)),
    "x.expand(2, 4, 4)": lambda a: a.expand(2, 4, 4),
    "x.detach()": lambda a: a.detach(),
}

#: Random functions: how the call is written -> the call on (x, a seeded generator).
RANDOM: dict[str, Callable[[Any, torch.Generator], Any]] = {
    "torch.rand_like(x)": lambda a, g: torch.rand_like(a),
    "torch.randn_like(x)": lambda a, g: torch.randn_like(a),
    "torch.randint_like(x, 10)": lambda a, g: torch.randint_like(a, 10),
    "torch.bernoulli(x)": lambda a, g: torch.bernoulli(a),
    "torch.bernoulli(x, generator=g)": lambda a, g: torch.bernoulli(a, generator=g),
    "torch.bernoulli(x, 0.3)": lambda a, g: torch.bernoulli(a, 0.3),
    "torch.poisson(x)": lambda a, g: torch.poisson(a),
    "torch.multinomial(x, 2)": lambda a, g: torch.multinomial(a, 2),
    "torch.normal(x, 1.0)": lambda a, g: torch.normal(a, 1.0),
    "torch.normal(x, 1.0, generator=g)": lambda a, g: torch.normal(a, 1.0, generator=g),
    "torch.normal(0.0, x)": lambda a, g: torch.normal(0.0, a),
    "F.dropout(x, 0.5)": lambda a, g: F.dropout(a, 0.5),
    "F.alpha_dropout(x, 0.5, True)": lambda a, g: F.alpha_dropout(a, 0.5, True),
    "F.rrelu(x, training=True)": lambda a, g: F.rrelu(a - 0.5, training=True),
    "x.clone().uniform_()": lambda a, g: a.clone().uniform_(),
    "x.clone().normal_(generator=g)": lambda a, g: a.clone().normal_(generator=g),
    "x.clone().bernoulli_(0.5)": lambda a, g: a.clone().bernoulli_(0.5),
    "x.clone().exponential_()": lambda a, g: a.clone().exponential_(),
    "x.clone().random_(0, 10)": lambda a, g: a.clone().random_(0, 10),
}


class _Unknown:
    """A tensor-like that overrides nothing: every call it is asked about, it declines."""

    asked: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.asked.append(func)
        return NotImplemented


class _UnknownTensor(Tensor):
    """A ``torch.Tensor`` subclass that overrides nothing: it declines every call."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _Unknown.asked.append(func)
        return NotImplemented


def unknown_tensor(t: Tensor) -> Tensor:
    """A copy of t as a ``torch.Tensor`` subclass that overrides nothing."""
    return t.clone().as_subclass(_UnknownTensor)


#: Calls of an instance x with u, of a type that overrides nothing.
UNKNOWN: dict[str, Callable[[Any, Any], Any]] = {
    "torch.add(x, u)": lambda x, u: torch.add(x, u),
    "torch.add(u, x)": lambda x, u: torch.add(u, x),
    "x + u": lambda x, u: x + u,
    "u * x": lambda x, u: u * x,
    "x.add(u)": lambda x, u: x.add(u),
    "torch.matmul(x, u)": lambda x, u: torch.matmul(x, u),
    "torch.cat([x, u])": lambda x, u: torch.cat([x, u]),
    "torch.stack([u, x])": lambda x, u: torch.stack([u, x]),
    "torch.where(x > 0, u, x)": lambda x, u: torch.where(x > 0, u, x),
}


def _base(dtypes: Sequence[torch.dtype]) -> Tensor:
    """A 4x4 tensor of the run's first dtype, its values in [0, 1) where it floats
    (probabilities, rates: the random functions take them)."""
    dtype = dtypes[0] if dtypes else torch.float32
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.rand(4, 4, generator=g, dtype=dtype)
    if dtype == torch.bool:
        return torch.rand(4, 4, generator=g) > 0.5
    return torch.randint(0, 10, (4, 4), generator=g, dtype=dtype)


def _made(run: Run, case: _Case, base: Tensor) -> tuple[Any, Tensor] | None:
    """(an instance of base, a plain copy of what it stands for), or None (declined)."""
    x = run.instance(base.clone(), case)
    if x is None:
        run.decline(case, "make gave no instance of the 4x4 tensor")
        return None
    return x, run.densify(x).detach().clone()


def _write(t: Any) -> Any:
    """A write that keeps a ScalarTensor one (x2; a bool tensor negated)."""
    return t.logical_not_() if t.dtype == torch.bool else t.mul_(2)


def check_views(run: Run, dtypes: Sequence[torch.dtype], views_copy: bool) -> None:
    base = _base(dtypes)
    for written, view in VIEWS.items():
        case = _Case(written, "views: a write reaches the base and back")
        for direction in ("through the view", "into the base"):
            problem = _write_reaches(run, case, base, view, direction)
            if problem is _DECLINED:
                return
            if problem and views_copy:
                run.copies.append(Failure("edges", written, case.label, problem[:300]))
            elif problem:
                hint = " (a type whose views are copies says so: views_copy=True)"
                run.fail("edges", case, problem + hint)


_DECLINED = "(declined)"


def _write_reaches(run: Run, case: _Case, base: Tensor, view: Callable, direction: str) -> str:
    """What differs from plain torch once a view of a fresh instance, or the instance, is
    written ('' where nothing does, or where plain torch refuses the write)."""
    made = _made(run, case, base)
    if made is None:
        return _DECLINED
    x, p = made
    before = p.clone()
    through = direction == "through the view"
    try:
        w = view(p)
        _write(w if through else p)
    except Exception:
        return ""  # (plain torch refuses this write: an expanded view)
    try:
        v = view(x)
    except Exception as err:
        run.raised("edges", case, err)
        return ""
    if not same_value(run.plain(v), view(before.clone())):
        run.fail("edges", case, "the view does not hold the base's values")
        return ""
    try:
        _write(v if through else x)
    except Exception as err:
        return f"a write {direction} raised {type(err).__name__}: {err}"
    base_now, view_now = run.plain(x), run.plain(v)
    if not same_value(base_now, p):
        how = "unchanged" if same_value(base_now, before) else "not as plain torch's"
        return f"a write {direction} left the base {how}"
    if not same_value(view_now, w):
        how = "unchanged" if same_value(view_now, view(before.clone())) else "not as plain's"
        return f"a write {direction} left the view {how}"
    return ""


def check_random(run: Run, dtypes: Sequence[torch.dtype]) -> None:
    base = _base(dtypes)
    for written, call in RANDOM.items():
        case = _Case(written, "random: the generator's values and state")
        made = _made(run, case, base)
        if made is None:
            return
        x, p = made
        try:
            want, want_state, want_g = _drawn(call, p)
        except Exception:
            continue  # (plain torch refuses the call on this dtype)
        try:
            got, state, g_state = _drawn(call, x)
        except Exception as err:
            run.raised("edges", case, err)
            continue
        reason = compare_results(run.plain(got), want, exact=True)
        if reason:
            run.fail("edges", case, reason)
        elif not torch.equal(state, want_state) or not torch.equal(g_state, want_g):
            run.fail("edges", case, "the call drew from the generator otherwise than plain's")


def _drawn(call: Callable, x: Any) -> tuple[Any, Tensor, Tensor]:
    """call's result on x, the default generator and a generator of the call's own (the
    one it is given as ``generator=``) seeded before, and both generators' states after
    (seeded apart: a call that draws from the wrong one draws other values)."""
    torch.default_generator.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    out = call(x, g)
    return out, torch.default_generator.get_state(), g.get_state()


def check_unknown_types(run: Run, dtypes: Sequence[torch.dtype]) -> None:
    base = _base(dtypes)
    for kind, make_u in (
        ("a tensor-like", lambda t: _Unknown()),
        ("a Tensor subclass", unknown_tensor),
    ):
        label = f"with {kind} that overrides nothing"
        for written, call in UNKNOWN.items():
            case = _Case(written, label)
            made = _made(run, case, base)
            if made is None:
                return
            x, p = made
            declined_as_plain(
                run, "edges", case, lambda: call(p, make_u(p)), lambda: call(x, make_u(p))
            )
        made = _made(run, _Case("x.__torch_function__(torch.add, ...)", label), base)
        if made is not None:
            _direct_answer(run, made[0], make_u(made[1]), label)


def declined_as_plain(
    run: Run, check: str, case: Any, plain: Callable[[], Any], typed: Callable[[], Any]
) -> None:
    """Where the plain call ends in TypeError (the other type declines it), the call on
    the type must too: a failure of `check` where it answers or raises anything else."""
    try:
        plain()
    except TypeError:
        pass
    except Exception:
        return
    else:
        return  # (plain torch does not end in TypeError: not the protocol's case)
    try:
        out = typed()
    except TypeError:
        return
    except Exception as err:
        what = f"raised {type(err).__name__} where plain torch raises TypeError: {err}"
        run.fail(check, case, what)
        return
    what = f"returned a {type(out).__name__} where plain torch raises TypeError"
    run.fail(check, case, f"{what} (the other type declines every call)")


def opted_out(cls: type) -> bool:
    """Whether cls's ``__torch_function__`` is torch's opt-out,
    ``torch._C._disabled_torch_function_impl`` (tensordict's ``MemoryMappedTensor``):
    torch's dispatch never asks such a type, so calling the method directly says nothing
    of the protocol (it runs the call)."""
    method = getattr(cls, "__torch_function__", None)
    return getattr(method, "__func__", method) is torch._C._disabled_torch_function_impl


def _direct_answer(run: Run, x: Any, u: Any, label: str) -> None:
    """x's __torch_function__ asked about torch.add(x, u), as torch asks it: it answers
    NotImplemented, or passes the call (or the calls it makes of u) on to u, which
    declines them (a TypeError); never a result, another error, or a TypeError of its
    own that gives u no say."""
    case = _Case("x.__torch_function__(torch.add, ...)", label)
    if opted_out(type(x)):
        return  # (torch never asks such a type: the calls above judged what it does)
    _Unknown.asked.clear()
    try:
        answer = x.__torch_function__(torch.add, (type(x), type(u)), (x, u), {})
    except TypeError as err:
        if not _Unknown.asked:
            protocol = "torch's protocol: return NotImplemented"
            run.fail(
                "edges", case, f"raised TypeError without asking the other type ({protocol}): {err}"
            )
        return
    except Exception as err:
        run.fail("edges", case, f"raised {type(err).__name__}: {err}")
        return
    if answer is not NotImplemented:
        protocol = "torch's protocol: NotImplemented for a type it does not know"
        run.fail("edges", case, f"answered a {type(answer).__name__} ({protocol})")
