"""Saving and loading the three types: torch.save / torch.load(weights_only=True), pickle
and copy.deepcopy round trips, and files that try to run code or plant bad state."""

import copy
import io
import os
import pickle

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor

# Every kind of value the safe loader rebuilds (SPEC: str, numbers, bool, None, lists,
# tuples, dicts, tensors), nested.
SAFE_METADATA = {"s": "x", "i": -3, "f": 2.5, "c": 1 + 2j, "b": True, "none": None,
                 "list": [1, [2.0, "three"]], "tuple": (1, (2,)), "dict": {"k": {"n": 1}},
                 "t": torch.arange(3.0), 7: "int key"}


def _save_load(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True, **load_kwargs)


def _same_metadata(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k])
        else:
            assert a[k] == b[k] and type(a[k]) is type(b[k]), k


def _round_trips(obj):
    return {"torch.load(weights_only=True)": _save_load({"x": obj})["x"],
            "pickle": pickle.loads(pickle.dumps(obj)), "deepcopy": copy.deepcopy(obj)}


def test_metadata_tensor_round_trips():
    m = MetadataTensor(torch.randn(2, 3), SAFE_METADATA)
    for how, r in _round_trips(m).items():
        assert type(r) is MetadataTensor and torch.equal(r.as_subclass(torch.Tensor),
                                                         m.as_subclass(torch.Tensor)), how
        _same_metadata(r.metadata, m.metadata)
        assert r.metadata is not m.metadata, how


@pytest.mark.parametrize("d", [ScalarTensor(3, 3.14), ScalarTensor(2, 5, dtype=torch.int32),
                               ScalarTensor(2, 1 + 2j), ScalarTensor(0, float("nan")),
                               ScalarTensor(4, 2, dtype=torch.float64)],
                         ids=["float", "int32", "complex", "empty-nan", "int-value-float64"])
def test_scalar_tensor_round_trips(d):
    for how, r in _round_trips(d).items():
        assert type(r) is ScalarTensor and repr(r) == repr(d) and r.dtype == d.dtype, how
        torch.testing.assert_close(r.tensor(), d.tensor(), rtol=0, atol=0, equal_nan=True)


def test_logging_tensor_round_trips():
    x = LoggingTensor(torch.randn(4))
    for how, r in _round_trips(x).items():
        assert type(r) is LoggingTensor and torch.equal(r.as_subclass(torch.Tensor),
                                                        x.as_subclass(torch.Tensor)), how


def test_a_state_dict_of_typed_tensors_loads_safely():
    state = {"w": MetadataTensor(torch.ones(2), {"unit": "m"}), "d": ScalarTensor(2, 0.5),
             "log": LoggingTensor(torch.zeros(1))}
    loaded = _save_load(state)
    assert loaded["w"].metadata == {"unit": "m"} and loaded["d"].value == 0.5
    assert type(loaded["log"]) is LoggingTensor


class _RunsCode:
    """Pickles as a call of os.system: what a malicious file does."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_file_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "ran"
    for payload in (_RunsCode(marker), MetadataTensor(torch.ones(1), {"x": _RunsCode(marker)})):
        buf = io.BytesIO()
        torch.save(payload, buf)
        buf.seek(0)
        with pytest.raises(pickle.UnpicklingError, match="system"):
            torch.load(buf, weights_only=True)
    assert not marker.exists()


class _Unsafe:
    pass


def test_unsafe_metadata_fails_at_load_naming_the_type():
    buf = io.BytesIO()
    torch.save(MetadataTensor(torch.ones(1), {"bad": _Unsafe()}), buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="_Unsafe"):
        torch.load(buf, weights_only=True)


@pytest.mark.parametrize("state,words", [
    ({"metadata": 5}, "invalid saved state"),
    ({"metadata": {}, "_merge_policy": "union"}, "invalid saved state"),
])
def test_crafted_metadata_tensor_state_is_refused(state, words):
    m = MetadataTensor(torch.ones(2), {})
    m.__dict__.clear()
    m.__dict__.update(state)  # what a crafted file would hold
    for load in (lambda: _save_load(m), lambda: pickle.loads(pickle.dumps(m))):
        with pytest.raises(pickle.UnpicklingError, match=words):
            load()


@pytest.mark.parametrize("change", [
    {"N": -1}, {"N": 2.0}, {"_pair": torch.ones(3)}, {"_pair": [1.0, 0.0]},
    {"_shown": 7.5}, {"_shown": "3"}, {"extra": 1}])
def test_crafted_scalar_tensor_state_is_refused(change):
    d = ScalarTensor(2, 1.5)
    d.__dict__.update(change)
    for load in (lambda: _save_load(d), lambda: pickle.loads(pickle.dumps(d))):
        with pytest.raises(pickle.UnpicklingError, match="invalid saved state"):
            load()
