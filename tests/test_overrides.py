"""Every overridable torch function, called with one of our types in its tensor
positions (signatures from torch.overrides.get_testing_overrides and torch's annotated
argument lists), reaches that type's __torch_function__."""

import collections
import warnings

import pytest
import torch
from _support.override_probe import call_through, example_args, probe_type
from torch.overrides import get_ignored_functions, get_testing_overrides

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor

PROBES = {
    "MetadataTensor": (MetadataTensor, lambda P: P(torch.ones(2, 2), {})),
    "LoggingTensor": (LoggingTensor, lambda P: P(torch.ones(2, 2))),
    "ScalarTensor": (ScalarTensor, lambda P: P(2, 1.0)),
}

# Tensor.set_() with no source resets the tensor in C++ without asking __torch_function__.
KNOWN_BYPASSES = {"torch.Tensor.set_"}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_overridable_function_reaches_the_type(name):
    base, make = PROBES[name]
    instance = make(probe_type(base))
    outcomes = collections.defaultdict(list)
    ignored = get_ignored_functions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation warnings of the functions called
        for func, override in get_testing_overrides().items():
            if func in ignored:
                continue
            args = example_args(func, override, instance)
            if args is None:
                outcomes["no example"].append(func)
                continue
            outcomes[call_through(func, args, instance)].append(func)
    names = {
        k: sorted(torch.overrides.resolve_name(f) or repr(f) for f in v)
        for k, v in outcomes.items()
    }
    # none returns an answer without the type seeing the call
    assert set(names.get("bypassed", [])) <= KNOWN_BYPASSES, names.get("bypassed")
    # "no call": our generic example arguments did not fit the function's signature
    # (einsum wants an equation, say). "own": ScalarTensor's own attributes (shape, dim).
    tried = len(outcomes["reached"]) + len(outcomes["no call"])
    assert len(outcomes["reached"]) >= 1300
    assert len(outcomes["reached"]) / tried >= (0.99 if base is not ScalarTensor else 0.95)
    if base is ScalarTensor:
        assert set(names.get("own", [])) <= {
            "torch.Tensor.__len__",
            "torch.Tensor.__repr__",
            "torch.Tensor.device.__get__",
            "torch.Tensor.dtype.__get__",
            "torch.Tensor.shape.__get__",
            "torch.Tensor.dim",
            "torch.Tensor.size",
            "torch.Tensor.__setstate__",
        }  # (the last: its unpickling)
