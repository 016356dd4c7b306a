"""Handlers written with the names torch documents (its docs, and
``torch.overrides.get_testing_overrides()``, whose lambdas PyTorch's own override tests
register) reach every overload, and aliases torch documents reach the handler of the
function they alias (tensortools.dispatch.documented).

The sweep is PyTorch's test/test_overrides.py run on the dispatch base: every function of
``get_testing_overrides()`` gets its lambda as the handler, on a ``TensorWrapper`` (for
``Tensor`` methods) or a ``TorchFunctionTable`` (for the others) under the strict policy, and
is called with arguments guessed from torch's annotated argument types, positionally and
with its arguments by torch's (schema) names. The reference is the same call on a bare
``__torch_function__`` that answers every call: wherever torch's parser takes the call
there, the handler must answer it on the dispatch base.
"""

import functools
import inspect
import warnings

import pytest
import torch
from torch.overrides import get_testing_overrides, is_tensor_method_or_property

from tensortools.dispatch import TensorWrapper, TorchFunctionTable
from tensortools.dispatch.documented import documented_aliases

_ANSWER = -1  # (what every lambda of get_testing_overrides returns)


class _Sub(TensorWrapper):
    policy = "strict"


class _Like(TorchFunctionTable):
    policy = "strict"


class _AnySub(torch.Tensor):
    """The reference: torch's protocol with the handler called as torch passes the call
    (PyTorch's own test's tables); "parsed" where the handler cannot take it so."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        try:
            return get_testing_overrides_cached()[func](*args, **(kwargs or {}))
        except TypeError:
            return "parsed"


class _AnyLike:
    __torch_function__ = _AnySub.__torch_function__


@functools.cache
def _overrides():
    return get_testing_overrides()


def get_testing_overrides_cached():
    return _overrides()


def _triggered(override):
    @functools.wraps(override)
    def handler(*args, **kwargs):
        handler.calls += 1
        return override(*args, **kwargs)

    handler.calls = 0
    return handler


@functools.cache
def _handlers():
    found = {}
    for func, override in _overrides().items():
        found[func] = handler = _triggered(override)
        cls = _Sub if is_tensor_method_or_property(func) else _Like
        cls.implements(func, aliases=False)(handler)
    return found


def _value(kind, instance):
    """PyTorch's guess of an argument of torch's annotated type `kind`."""
    kind = kind.removesuffix("?")
    if kind == "Tensor":
        return instance()
    if kind in ("TensorList", "c10::List<::std::optional<Tensor>>"):
        return [instance(), instance()]
    if kind in ("IntArrayRef", "SymIntArrayRef"):
        return [1, 1]
    guesses = {"Scalar": 3.5, "bool": False, "ScalarType": torch.float32}
    guesses.update({"std::string": "", "c10::string_view": "", "double": 1.0})
    if kind in guesses:
        return guesses[kind]
    if kind.startswith(("int", "SymInt", "Dimname")):
        return 0
    if kind.startswith("float"):
        return 1.0
    if kind in ("Generator", "MemoryFormat", "TensorOptions"):
        return None
    raise LookupError(kind)


def _calls(func, override, sub, like):
    """(how, function, positional arguments, keywords) of func as PyTorch's test calls it,
    positionally, then with its arguments after the first by torch's names; () where the
    annotated types are of a kind the test does not guess."""
    from torch.testing._internal.generated.annotated_fn_args import annotated_args

    method = is_tensor_method_or_property(func)
    instance = sub if method else like
    if func not in annotated_args:
        spec = inspect.getfullargspec(override)
        count = len(spec.args) - len(spec.defaults or ())
        args = [instance() for _ in range(count)]
        args += [instance(), instance()] if spec.varargs else []
        return [("positional", func, args, {})]
    args, names, bound = [], [], func
    for arg in annotated_args[func]:
        if arg["simple_type"].removesuffix("?") == "Tensor" and arg["name"] == "self" and method:
            bound = func.__get__(instance())  # (a method of the instance, as PyTorch's test)
            continue
        try:
            args.append(_value(arg["simple_type"], instance))
        except LookupError:
            return []
        names.append("input" if arg["name"] == "self" else arg["name"])
    found = [("positional", bound, args, {})]
    skip = 0 if bound is not func else 1
    if len(args) > skip:
        found.append(("keywords", bound, args[:skip], dict(zip(names[skip:], args[skip:]))))
    return found


def _sweep():
    """{how: (cases torch's parser took, those whose handler the bare protocol reached,
    failures on the dispatch base among all, among those the bare protocol reached)}."""
    handlers = _handlers()
    found = {how: [0, 0, [], []] for how in ("positional", "keywords")}
    plain = torch.tensor([5.0])
    for func, override in _overrides().items():
        typed = _calls(func, override, lambda: plain.as_subclass(_Sub), _Like)
        reference = _calls(func, override, lambda: plain.as_subclass(_AnySub), _AnyLike)
        for (how, call, args, kwargs), (_, ref, ref_args, ref_kwargs) in zip(typed, reference):
            try:
                want = ref(*ref_args, **ref_kwargs)
            except Exception:
                continue  # (torch's parser refuses the spelling: no call to bind)
            if want not in (_ANSWER, None, "parsed"):
                continue  # (answered without __torch_function__: Tensor.set_)
            counts = found[how]
            counts[0] += 1
            counts[1] += want != "parsed"
            handlers[func].calls = 0
            name = torch.overrides.resolve_name(func) or repr(func)
            try:
                got = call(*args, **kwargs)
            except Exception as err:
                problem = f"{name} {how}: {type(err).__name__}: {str(err)[:80]}"
            else:
                # (as PyTorch's test: the answer, or for a call that answers None, the
                # handler ran; x.__add__(y) is answered by the handler of Tensor.add)
                reached = handlers[func].calls if got is None else got == _ANSWER
                problem = "" if reached else f"{name} {how}: got {got!r}"
            if problem:
                counts[2].append(problem)
                if want != "parsed":
                    counts[3].append(problem)
    return found


def test_pytorchs_override_tests_pass_through_the_dispatch_base():
    """PyTorch's own override test cases (every testing override, positionally) and the
    same calls by torch's names: the handler written with get_testing_overrides()'s
    signature answers every call torch's parser takes positionally (vsplit's indices,
    isin's test_element, view's dtype, to, gru's packed overload, quantize_per_tensor's
    list), and every call by keywords that torch's protocol hands such a handler as it can
    take it (besides those, the binding's names: vsplit's indices=, tile's dims=)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = _sweep()
    parsed, raw, failures, raw_failures = found["positional"]
    assert parsed >= 1400 and raw == parsed
    assert not failures, f"{len(failures)} of {parsed}:\n" + "\n".join(failures)
    parsed, raw, failures, raw_failures = found["keywords"]
    assert parsed >= 600 and raw >= 500
    assert not raw_failures, f"{len(raw_failures)} of {raw}:\n" + "\n".join(raw_failures)
    # (the rest: lambdas whose names are not torch's, polygamma's (input, n) for torch's
    # (n, input), embedding_bag's, gru's for the packed overload given by name)
    assert len(failures) <= 10, "\n".join(failures)


class _Image(TensorWrapper):
    """A tensor with a mask that moves with it (handlers named as torch documents)."""

    policy = "strict"


def _image(t, mask):
    out = t.as_subclass(_Image)
    out.mask = mask
    return out


def _split(name):
    def handler(input, indices_or_sections, dim=None):
        plain = input.as_subclass(torch.Tensor)
        extra = () if dim is None else (dim,)
        parts = getattr(torch, name)(plain, indices_or_sections, *extra)
        masks = getattr(torch, name)(input.mask, indices_or_sections, *extra)
        return tuple(_image(p, m) for p, m in zip(parts, masks, strict=True))

    return handler


for _name in ("vsplit", "hsplit", "dsplit", "tensor_split"):
    _Image.implements(getattr(torch, _name))(_split(_name))


@_Image.implements(torch.Tensor.view)
def _view(self, shape):
    plain = self.as_subclass(torch.Tensor)
    if isinstance(shape, torch.dtype):
        return _image(plain.view(shape), self.mask)
    return _image(plain.view(shape), self.mask.view(shape))


@_Image.implements(torch.isin)
def _isin(elements, test_elements, *, assume_unique=False, invert=False):
    plain = elements.as_subclass(torch.Tensor)
    got = torch.isin(plain, test_elements, assume_unique=assume_unique, invert=invert)
    return _image(got, elements.mask)


_SPLITS = [
    lambda f, x: f(x, [1, 2]),
    lambda f, x: f(x, 2),
    lambda f, x: f(x, (1,)),
    lambda f, x: f(x, torch.tensor([1])) if f.__name__ == "tensor_split" else f(x, [1]),
    lambda f, x: getattr(x, f.__name__)([1, 2]),
    lambda f, x: getattr(x, f.__name__)(2),
]


@pytest.mark.parametrize("name", ["vsplit", "hsplit", "dsplit", "tensor_split"])
@pytest.mark.parametrize("spelling", range(len(_SPLITS)))
def test_splits_reach_a_handler_of_torchs_documented_names(name, spelling):
    func = getattr(torch, name)
    t = torch.arange(2.0 * 4 * 4).reshape(2, 4, 4)
    if name == "vsplit":
        t = t.reshape(4, 2, 4)
    mask = t.remainder(3) == 0
    want = _SPLITS[spelling](func, t)
    got = _SPLITS[spelling](func, _image(t, mask))
    assert len(got) == len(want)
    for g, w, m in zip(got, want, _SPLITS[spelling](func, mask), strict=True):
        assert type(g) is _Image
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w, rtol=0, atol=0)
        torch.testing.assert_close(g.mask, m, rtol=0, atol=0)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.view(torch.int32),
        lambda x: x.view(8),
        lambda x: x.view(2, 4),
        lambda x: x.view((4, 2)),
        lambda x: torch.isin(x, 1.0),
        lambda x: torch.isin(x, torch.tensor([1.0, 3.0])),
        lambda x: torch.isin(x, test_element=2.0),
        lambda x: torch.isin(elements=x, test_elements=torch.tensor([2.0])),
    ],
)
def test_view_and_isin_reach_a_handler_of_torchs_documented_names(call):
    t = torch.arange(8.0).reshape(2, 4)
    mask = t > 2
    got = call(_image(t, mask))
    assert type(got) is _Image
    torch.testing.assert_close(got.as_subclass(torch.Tensor), call(t), rtol=0, atol=0)
    assert got.mask.shape == call(t).shape


# -- aliases torch documents ------------------------------------------------------------


def _groups():
    seen, found = set(), []
    for func in get_testing_overrides():
        group = documented_aliases(func)
        key = frozenset(group | {func})
        if group and key not in seen:
            seen.add(key)
            found.append(sorted(key, key=lambda f: torch.overrides.resolve_name(f) or ""))
    return found


def test_torch_documents_the_aliases_the_docs_name():
    names = {frozenset(torch.overrides.resolve_name(f) for f in group) for group in _groups()}
    for group in (
        {"torch.transpose", "torch.swapaxes", "torch.swapdims"},
        {"torch.movedim", "torch.moveaxis"},
        {"torch.abs", "torch.absolute"},
        {"torch.cat", "torch.concat", "torch.concatenate"},
    ):
        assert group in names, group
    # (an alias whose parameters differ is a function of its own: pinverse's rcond)
    assert not documented_aliases(torch.pinverse)


def _alias_calls():
    """(the group's function a handler is registered for, the alias called)."""
    return [(target, alias) for group in _groups() for target in group for alias in group]


def test_every_documented_alias_reaches_the_handler_of_the_function_it_aliases():
    """For each group of aliases torch documents, a handler registered for any one of
    them answers every other (called as PyTorch's own test calls it, positionally and by
    torch's names), and no alias overrides a handler registered for that very function."""
    checked = 0
    for target, alias in _alias_calls():
        seen = []
        cls = type("Aliased", (TensorWrapper,), {"policy": "strict"})
        cls.implements(target)(lambda *a, **k: seen.append(1) or _ANSWER)
        like = type("AliasedLike", (TorchFunctionTable,), {"policy": "strict"})
        like.implements(target)(lambda *a, **k: seen.append(1) or _ANSWER)
        plain = torch.ones(2, 2)
        typed = _calls(alias, _overrides()[alias], lambda: plain.as_subclass(cls), like)
        reference = _calls(alias, _overrides()[alias], lambda: plain.as_subclass(_AnySub), _AnyLike)
        for (how, call, args, kwargs), (_, ref, ref_args, ref_kwargs) in zip(typed, reference):
            try:
                ref(*ref_args, **ref_kwargs)
            except Exception:
                continue  # (torch's parser refuses the spelling)
            seen.clear()
            assert call(*args, **kwargs) == _ANSWER and seen == [1], (target, alias, how)
            checked += 1
    assert checked >= 150


def test_an_alias_never_replaces_a_handler_of_its_own():
    cls = type("Own", (TensorWrapper,), {"policy": "strict"})
    cls.implements(torch.swapaxes)(lambda *a, **k: "swapaxes")
    cls.implements(torch.transpose)(lambda *a, **k: "transpose")
    x = torch.ones(2, 3).as_subclass(cls)
    assert torch.swapaxes(x, 0, 1) == "swapaxes" and x.swapaxes(0, 1) == "swapaxes"
    assert torch.transpose(x, 0, 1) == "transpose" and torch.swapdims(x, 0, 1) == "transpose"


_ALIASED = [
    (torch.transpose, lambda x: torch.swapaxes(x, 0, 1)),
    (torch.transpose, lambda x: torch.swapdims(x, 1, 0)),
    (torch.transpose, lambda x: x.swapaxes(0, 1)),
    (torch.transpose, lambda x: x.swapdims(dim0=0, dim1=1)),
    (torch.transpose, lambda x: x.swapaxes(axis0=0, axis1=1)),
    (torch.transpose, lambda x: torch.swapaxes(x, axis0=1, axis1=0)),
    (torch.movedim, lambda x: torch.moveaxis(x, 0, 1)),
    (torch.movedim, lambda x: x.moveaxis(1, 0)),
    (torch.abs, lambda x: torch.absolute(x)),
    (torch.abs, lambda x: x.absolute()),
    (torch.cat, lambda x: torch.concat([x, x], 1)),
    (torch.cat, lambda x: torch.concatenate([x, x])),
    (torch.cat, lambda x: torch.concat(tensors=[x, x], dim=-1)),
]


@pytest.mark.parametrize("index", range(len(_ALIASED)))
def test_an_alias_keeps_the_mask_the_handler_moves(index):
    """The docs' Image example: an alias reaches the handler, so the mask moves."""
    target, call = _ALIASED[index]
    cls = type("Masked", (TensorWrapper,), {"policy": "strict"})

    @cls.implements(target)
    def handler(input, *args, **kwargs):
        tensors = input if isinstance(input, (list, tuple)) else [input]
        plain = [t.as_subclass(torch.Tensor) for t in tensors]
        first = plain if isinstance(input, (list, tuple)) else plain[0]
        masks = [t.mask for t in tensors]
        mask = masks if isinstance(input, (list, tuple)) else masks[0]
        out = target(first, *args, **kwargs).as_subclass(cls)
        out.mask = target(mask, *args, **kwargs)
        return out

    t = torch.arange(-6.0, 6.0).reshape(3, 4)
    x = t.as_subclass(cls)
    x.mask = (t > 0).double()
    got = call(x)
    torch.testing.assert_close(got.as_subclass(torch.Tensor), call(t), rtol=0, atol=0)
    torch.testing.assert_close(got.mask, call((t > 0).double()), rtol=0, atol=0)
