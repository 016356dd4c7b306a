"""tensortools.dispatch.binding: handlers receive calls as torch binds them (keywords by
torch's names and NumPy aliases, older overloads left to the policy), for every handled
function of every type and for a user's type."""

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map_only

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, testing
from tensortools.dispatch import TensorWrapper, TorchFunctionTable
from tensortools.dispatch.binding import HandlerShape, torch_positions

pytest.importorskip("expecttest")  # (op_db needs it)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

TYPES = (ScalarTensor, MetadataTensor, LoggingTensor)
_REFUSED = "no implementation found|returned NotImplemented"  # (torch's TypeError)


def _reached(cls):
    """The op_db names whose function, method or one of whose aliases cls handles, and
    the stand-in OpInfos of the aliases op_db has no entry of its own for."""
    handled = set(cls._handlers)
    names, alias_infos = set(), []
    for info in op_db:
        if info.op in handled or (info.method_variant in handled):
            names.add(info.name)
        for alias in info.aliases:
            if alias.op in handled or alias.method_variant in handled:
                alias_infos.append((alias, info))
    return sorted(names), alias_infos


def _check(cls, **options):
    opts = testing.options_from_coverage_hooks(cls)
    return testing.check_type(
        cls,
        opts["make"],
        rule=opts["rule"],
        checks=["binding"],
        dtypes=(torch.float32, torch.float64),
        max_samples=3,
        raise_on_failure=False,
        **options,
    )


@pytest.mark.slow
def test_every_handled_function_takes_torch_keywords():
    """Each positional parameter passed by torch's name (and by the NumPy aliases torch
    accepts), in the function and method forms, against the positional call, for every
    function of ScalarTensor's table that op_db has samples of. (LoggingTensor has no
    handlers; MetadataTensor's stack and batch rules have the tests below.)"""
    names, _ = _reached(ScalarTensor)
    assert len(names) >= 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = _check(ScalarTensor, ops=names)
    binding = [f for f in report.failures if f.check == "binding"]
    assert not binding, "\n".join(map(str, binding))
    assert report.samples >= 200


def test_metadata_stack_by_keyword():
    a = MetadataTensor(torch.arange(6.0).reshape(2, 3), metadata={"k": 1})
    b = MetadataTensor(torch.ones(2, 3), metadata={"k": 1})
    want = torch.stack([a, b], 1)
    for got in (torch.stack(tensors=[a, b], dim=1), torch.stack([a, b], axis=1)):
        assert type(got) is MetadataTensor and got.metadata == want.metadata
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))


@pytest.mark.slow
def test_batch_rules_read_torch_keywords():
    """A MetadataTensor batch taken apart or reduced with keywords (``torch.select(b,
    dim=0, index=1)``, ``b.sum(axis=0)``) gives each piece its samples' metadata, as the
    positional call does."""
    from tensortools.dispatch.batch_rules import RECORDS

    def make(t):
        if t.dim() == 0 or t.shape[0] == 0:
            return None
        rows = t.shape[0]
        return MetadataTensor.wrap_batch(t, {"id": list(range(rows))}, rows)

    names = sorted(
        {
            i.name
            for i in op_db
            for f in (i.op, i.method_variant)
            # (taking batches apart; the batch rule's verdicts: every record but "keep")
            if f in RECORDS and RECORDS[f].does != "keep"
        }
    )
    assert len(names) >= 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = testing.check_type(
            MetadataTensor,
            make,
            checks=["binding"],
            ops=names,
            max_samples=4,
            raise_on_failure=False,
        )
    binding = [f for f in report.failures if f.check == "binding"]
    assert not binding, "\n".join(map(str, binding))
    assert report.samples >= 30


@pytest.mark.slow
def test_aliases_op_db_reaches_only_through_their_entry():
    """ScalarTensor handles torch's aliases (arcsin, absolute, det, clip, ...): each runs
    the entry's samples under its own name."""
    from tensortools.testing.binding import check_binding
    from tensortools.testing.run import Run
    from tensortools.testing.samples import Sample

    _, alias_infos = _reached(ScalarTensor)
    assert len(alias_infos) >= 10
    opts = testing.options_from_coverage_hooks(ScalarTensor)
    run = Run(ScalarTensor, opts["make"], lambda x: x.tensor(), None, opts["rule"], None, ())
    ran = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for alias, info in alias_infos:
            stand_in = type("AliasInfo", (), {})()
            stand_in.op, stand_in.method_variant = alias.op, alias.method_variant
            for i, s in enumerate(info.sample_inputs("cpu", torch.float64)):
                if i >= 3:
                    break
                sample = Sample(alias.name, stand_in, i, s.input, tuple(s.args), dict(s.kwargs))
                if run.typed(sample) is not None:
                    check_binding(run, sample)
                    ran += 1
    assert ran > 0
    assert not run.failures, "\n".join(map(str, run.failures))


def test_handlers_take_no_more_positional_arguments_than_torch():
    """A call with more positional arguments than a handler takes is another overload of
    torch's (torch.add(d, 2, t)) and goes to the policy; that holds only while no handler
    takes more positional arguments than torch's own overloads do."""
    checked = 0
    for cls in TYPES:
        for func, handler in cls._own_handlers.items():
            positions = torch_positions(func)
            shape = HandlerShape.of(handler)
            if not positions.index or shape is None or shape.more_positional:
                continue
            most = max(positions.index.values()) + 1
            assert len(shape.positional) <= most, (cls.__name__, func, shape.positional)
            checked += 1
    assert checked > 50


# torch's older overloads that it still accepts: a number before the tensor operand
# (alpha, value), as deprecated.yaml lists them for the functions ScalarTensor handles.
def _older_overloads(d, t):
    yield "torch.add(d, 2, t)", lambda x: torch.add(x, 2, t)
    yield "torch.sub(d, 0.5, t)", lambda x: torch.sub(x, 0.5, t)
    yield "d.add(3, t)", lambda x: x.add(3, t)
    yield "d.sub(0.5, t)", lambda x: x.sub(0.5, t)
    yield "d.add(3, 2)", lambda x: x.add(3, 2)
    yield "d.sub(3, 2)", lambda x: x.sub(3, 2)
    yield "torch.add(d, 2, d)", lambda x: torch.add(x, 2, x)
    yield "torch.addcmul(t, 2, d, d)", lambda x: torch.addcmul(t, 2, x, x)


@pytest.mark.parametrize("policy", ["fallback", "strict"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_older_overloads_go_to_the_policy(policy, dtype):
    d = ScalarTensor(3, 1.5, dtype=dtype)
    t = torch.arange(9).to(dtype).reshape(3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, call in _older_overloads(d, t):
            want = call(d.tensor())
            with ScalarTensor.using_policy(policy):
                if policy == "fallback":
                    got = call(d)
                    got = got.tensor() if isinstance(got, ScalarTensor) else got
                    torch.testing.assert_close(got, want, msg=label)
                else:  # torch's TypeError naming the function, never a handler's own
                    with pytest.raises(TypeError, match=_REFUSED):
                        call(d)


# -- a user's type --------------------------------------------------------------------


def _plain(x):
    return x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x


class Units(TensorWrapper):
    """A user's wrapper whose handlers name their parameters their own way."""


@Units.implements(torch.linalg.vector_norm)
def _norm(values, order=2, axes=None, keep=False, *, dtype=None):
    plain = values.as_subclass(torch.Tensor)
    return Units._make(torch.linalg.vector_norm(plain, order, axes, keep, dtype=dtype))


@Units.implements(torch.transpose)
def _swap(values, first, second):
    return Units._make(values.as_subclass(torch.Tensor).transpose(first, second))


@Units.implements(torch.add)
def _plus(left, right, *, alpha=1):
    plain = [
        x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x for x in (left, right)
    ]
    return Units._make(torch.add(*plain, alpha=alpha))


def test_a_users_handlers_get_torch_keywords():
    t = torch.arange(12.0).reshape(3, 4)
    u = Units._make(t)
    cases = [
        (lambda x: torch.linalg.vector_norm(x=x, ord=1, dim=1, keepdim=True), "x=, ord=, dim="),
        (lambda x: torch.linalg.vector_norm(x, dim=0), "a gap before dim"),
        (lambda x: torch.linalg.vector_norm(x, axis=0, keepdims=True), "NumPy aliases"),
        (lambda x: torch.transpose(input=x, dim0=0, dim1=1), "all by name"),
        (lambda x: x.transpose(dim1=0, dim0=1), "method, names swapped"),
        (lambda x: torch.add(input=x, other=x, alpha=2), "add by name"),
        (lambda x: torch.add(x, 2, x), "an older overload: the fallback"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call, label in cases:
            got, want = call(u), call(t)
            assert type(got) is Units, label
            torch.testing.assert_close(got.as_subclass(torch.Tensor), want, msg=label)


def test_a_gap_before_a_keyword_reaches_a_handlers_kwargs():
    """vector_norm(x, 3, keepdim=True) leaves dim out: keepdim reaches a handler of
    (x, *args, **kwargs) by torch's name, not the policy."""
    seen = []

    class Passing(TensorWrapper):
        policy = "strict"

    @Passing.implements(torch.linalg.vector_norm)
    def _norm(values, *args, **kwargs):
        seen.append((args, kwargs))
        return torch.linalg.vector_norm(values.as_subclass(torch.Tensor), *args, **kwargs)

    t = torch.arange(6.0).reshape(2, 3)
    got = torch.linalg.vector_norm(Passing._make(t), 3, keepdim=True)
    torch.testing.assert_close(got, torch.linalg.vector_norm(t, 3, keepdim=True))
    assert seen == [((3,), {"keepdim": True})]


def test_a_call_the_handler_cannot_take_never_reaches_it():
    calls = []

    class Strict(TorchFunctionTable):
        policy = "strict"

    @Strict.implements(torch.linalg.det)
    def _det(m):
        calls.append(m)
        return "handled"

    s = Strict()
    assert torch.linalg.det(A=s) == "handled"
    with pytest.raises(TypeError, match=_REFUSED):
        torch.linalg.det(s, out=torch.empty(()))  # (the handler takes no out=)
    assert len(calls) == 1


class Naive(torch.Tensor):
    """A subclass whose own __torch_function__ drops keyword names (a broken type)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.linalg.vector_norm:
            values = args[0] if args else kwargs.pop("input")
            out = torch.linalg.vector_norm(values.as_subclass(torch.Tensor), *args[1:])
            return out.as_subclass(cls)
        return super().__torch_function__(func, types, args, kwargs)


def test_the_kit_finds_a_type_that_drops_keywords():
    report = testing.check_type(
        Naive,
        lambda t: t.as_subclass(Naive),
        checks=["binding"],
        ops=["linalg.vector_norm"],
        raise_on_failure=False,
    )
    failing = {(f.check, f.function) for f in report.failures}
    assert failing == {("binding", "linalg.vector_norm")}


# -- calls as torch passes them (issue 48: flip(0, 1), grad, norm, softmax, std) -------


class Masked(TensorWrapper):
    """An image with a mask that must move with it (the rule a new type writes)."""

    policy = "strict"


def _masked(values, mask):
    m = Masked._make(values)
    m.mask = mask
    return m


def _moves_mask(func):
    @Masked.implements(func)
    def handler(input, dims):  # (torch's parameter names)
        plain = input.as_subclass(torch.Tensor)
        return _masked(func(plain, dims), func(input.mask, dims))

    return handler


for _func in (torch.flip, torch.permute, torch.reshape, torch.Tensor.view, torch.Tensor.repeat):
    _moves_mask(_func)


@Masked.implements(torch.Tensor.expand)
def _expand(input, size, *, implicit=False):
    plain = input.as_subclass(torch.Tensor)
    return _masked(plain.expand(size), input.mask.expand(size))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.flip(0, 1),
        lambda x: x.flip(-1),
        lambda x: x.flip((0, 2)),
        lambda x: x.flip(dims=[1]),
        lambda x: torch.flip(x, [0, 1]),
        lambda x: x.permute(2, 0, 1),
        lambda x: x.permute(dims=(2, 0, 1)),
        lambda x: x.reshape(6, 4),
        lambda x: x.reshape(-1),
        lambda x: x.reshape((4, 6)),
        lambda x: torch.reshape(x, (24,)),
        lambda x: x.view(6, 4),
        lambda x: x.view(-1),
        lambda x: x.view(size=(4, 6)),
        lambda x: x.repeat(1, 2, 1),
        lambda x: x.repeat((2, 1, 1)),
        lambda x: x.expand(5, 2, 3, 4),
        lambda x: x.expand(5, -1, -1, -1),
        lambda x: x.expand((5, 2, 3, 4)),
    ],
)
def test_every_spelling_reaches_a_handler_in_torchs_form(call):
    """Sizes and dims spread out (x.flip(0, 1), x.view(6, 4)) or a lone int (x.flip(-1))
    reach a handler written with torch's names as the tuple torch binds: the mask moves
    with the image, as the plain call moves the image."""
    image = torch.arange(24.0).reshape(2, 3, 4)
    mask = image.remainder(3) == 0
    got = call(_masked(image, mask))
    assert type(got) is Masked
    torch.testing.assert_close(got.as_subclass(torch.Tensor), call(image), rtol=0, atol=0)
    torch.testing.assert_close(got.mask, call(mask), rtol=0, atol=0)


def test_a_view_to_a_dtype_is_not_a_size():
    x = _masked(torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=_REFUSED):  # (strict: the handler takes sizes only)
        x.view(torch.int32)


def _recording(cls_name, func, handler_of):
    seen = []
    cls = type(cls_name, (TensorWrapper,), {"policy": "strict"})
    cls.implements(func)(handler_of(seen))
    return cls, seen


def test_a_catch_all_handler_gets_the_call_as_torch_passed_it():
    """torch.autograd.grad passes 2 positional arguments and 7 keywords (PyTorch's
    test_overrides checks a handler of (*args, **kwargs) gets them so)."""

    def catch_all(seen):
        def handler(*args, **kwargs):
            seen.append((len(args), sorted(kwargs)))
            return torch.autograd.grad(*tree_map_only(Grad, _plain, args), **kwargs)

        return handler

    Grad, seen = _recording("Grad", torch.autograd.grad, catch_all)
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    got = torch.autograd.grad(y.as_subclass(Grad), x, retain_graph=True)
    torch.testing.assert_close(got[0], torch.autograd.grad(y, x)[0])
    keywords = ["allow_unused", "create_graph", "grad_outputs", "is_grads_batched"]
    keywords += ["materialize_grads", "only_inputs", "retain_graph"]
    assert seen == [(2, keywords)]


def test_a_method_reaches_the_handler_in_the_functions_form():
    """Tensor.norm has dtype in position 4, torch.norm out: x.norm(dtype=...) and
    x.norm(2, 0, False, torch.float64) reach a torch.norm handler's dtype."""

    def norm(seen):
        def handler(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
            seen.append((out, dtype))
            plain = input.as_subclass(torch.Tensor)
            return torch.norm(plain, p, dim, keepdim, out=out, dtype=dtype)

        return handler

    Norm, seen = _recording("Norm", torch.norm, norm)
    t = torch.arange(6.0).reshape(2, 3)
    for call in (
        lambda x: x.norm(dtype=torch.float64),
        lambda x: x.norm(2, 0, False, torch.float64),
        lambda x: x.norm(2, dim=0, dtype=torch.float64),
    ):
        seen.clear()
        got = call(t.as_subclass(Norm))
        torch.testing.assert_close(got, call(t), rtol=0, atol=0)
        assert got.dtype == torch.float64 and seen == [(None, torch.float64)]


_SOFTMAX = (F.softmax, lambda input, dim: torch.softmax(input, dim))
_NORMALIZE = (F.normalize, lambda input, p=2.0, dim=1: F.normalize(input, p, dim))


@pytest.mark.parametrize(
    "target, call, refused",
    [
        (_SOFTMAX, lambda x: F.softmax(x, 1), lambda x: F.softmax(x, 1, dtype=torch.float64)),
        (_SOFTMAX, lambda x: torch.nn.Softmax(1)(x), None),  # (_stacklevel=5)
        (_NORMALIZE, lambda x: F.normalize(x), lambda x: F.normalize(x, out=torch.empty(2, 3))),
        (_NORMALIZE, lambda x: F.normalize(x, 1, 0), lambda x: F.normalize(x, eps=0.5)),
    ],
)
def test_keywords_torch_adds_at_their_defaults_do_not_skip_the_handler(target, call, refused):
    """F.softmax passes _stacklevel= (nn.Softmax: 5), F.normalize out=None and eps=1e-12,
    whatever the caller wrote: a handler that names none of them still gets the call; one
    given another value than torch's default does not (the policy decides)."""
    func, handler = target

    def of(seen):
        def h(*args, **kwargs):
            seen.append(args)
            return handler(*map(_plain, args), **kwargs)

        h.__signature__ = inspect.signature(handler)
        return h

    cls, calls = _recording("Defaults", func, of)
    t = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(call(t.as_subclass(cls)), call(t), rtol=0, atol=0)
    assert len(calls) == 1
    if refused is not None:
        with pytest.raises(TypeError, match=_REFUSED):
            refused(t.as_subclass(cls))


@pytest.mark.parametrize(
    "call, reaches",
    [
        (lambda x: torch.std(x, False), {"unbiased": False}),
        (lambda x: x.std(False), {"unbiased": False}),
        (lambda x: torch.std(x, 0), {"dim": 0}),
        (lambda x: torch.std(x, [0, 1], True), {"dim": [0, 1], "unbiased": True}),
        (lambda x: torch.std(x, dim=1, correction=0), {"dim": 1, "correction": 0}),
    ],
)
def test_the_overload_torch_picks_decides_the_parameter(call, reaches):
    """torch.std(x, False) is unbiased=False (torch's overload for a bool), not dim=False."""

    def std(seen):
        def handler(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
            given = {"dim": dim, "unbiased": unbiased, "correction": correction}
            given = {k: v for k, v in given.items() if v is not None}
            seen.append(dict(given))
            if "unbiased" not in given or "dim" in given:
                given["keepdim"] = keepdim
            return torch.std(input.as_subclass(torch.Tensor), **given)

        return handler

    cls, seen = _recording("Std", torch.std, std)
    t = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(call(t.as_subclass(cls)), call(t), rtol=0, atol=0)
    assert seen == [reaches]


def test_a_positional_argument_of_another_overload_goes_by_name():
    """torch.max(x, y) is max(x, other=y): a handler of (input, dim=None, keepdim=False)
    does not get y as its dim (the policy answers)."""

    def max_(seen):
        def handler(input, dim=None, keepdim=False):
            seen.append(dim)
            return torch.max(input.as_subclass(torch.Tensor), dim, keepdim)

        return handler

    cls, seen = _recording("Max", torch.max, max_)
    cls.set_policy("fallback")
    t = torch.arange(6.0).reshape(2, 3)
    x = t.as_subclass(cls)
    with pytest.raises(TypeError, match=_REFUSED):
        with cls.using_policy("strict"):
            torch.max(x, t.flip(0))
    assert not seen
    torch.testing.assert_close(torch.max(x, 1).values, torch.max(t, 1).values, rtol=0, atol=0)
    assert seen == [1]
