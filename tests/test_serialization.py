"""Saving and loading the three types: torch.save / torch.load(weights_only=True), pickle
and copy.deepcopy round trips, and files that try to run code or plant bad state."""

import copy
import io
import os
import pickle
import warnings

import pytest
import torch
from _support.scalar_structured import VALUES, call, structured_calls

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor

# Every kind of value the safe loader rebuilds (str, numbers, bool, None, lists,
# tuples, dicts, tensors), nested.
SAFE_METADATA = {
    "s": "x",
    "i": -3,
    "f": 2.5,
    "c": 1 + 2j,
    "b": True,
    "none": None,
    "list": [1, [2.0, "three"]],
    "tuple": (1, (2,)),
    "dict": {"k": {"n": 1}},
    "t": torch.arange(3.0),
    7: "int key",
}


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
    return {
        "torch.load(weights_only=True)": _save_load({"x": obj})["x"],
        "pickle": pickle.loads(pickle.dumps(obj)),
        "deepcopy": copy.deepcopy(obj),
    }


def test_metadata_tensor_round_trips():
    m = MetadataTensor(torch.randn(2, 3), SAFE_METADATA)
    for how, r in _round_trips(m).items():
        assert type(r) is MetadataTensor and torch.equal(
            r.as_subclass(torch.Tensor), m.as_subclass(torch.Tensor)
        ), how
        _same_metadata(r.metadata, m.metadata)
        assert r.metadata is not m.metadata, how


@pytest.mark.parametrize(
    "d",
    [
        ScalarTensor(3, 3.14),
        ScalarTensor(2, 5, dtype=torch.int32),
        ScalarTensor(2, 1 + 2j),
        ScalarTensor(0, float("nan")),
        ScalarTensor(4, 2, dtype=torch.float64),
    ],
    ids=["float", "int32", "complex", "empty-nan", "int-value-float64"],
)
def test_scalar_tensor_round_trips(d):
    for how, r in _round_trips(d).items():
        assert type(r) is ScalarTensor and repr(r) == repr(d) and r.dtype == d.dtype, how
        torch.testing.assert_close(r.tensor(), d.tensor(), rtol=0, atol=0, equal_nan=True)


def test_logging_tensor_round_trips():
    x = LoggingTensor(torch.randn(4))
    for how, r in _round_trips(x).items():
        assert type(r) is LoggingTensor and torch.equal(
            r.as_subclass(torch.Tensor), x.as_subclass(torch.Tensor)
        ), how


def test_a_state_dict_of_typed_tensors_loads_safely():
    state = {
        "w": MetadataTensor(torch.ones(2), {"unit": "m"}),
        "d": ScalarTensor(2, 0.5),
        "log": LoggingTensor(torch.zeros(1)),
    }
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


def _crafted(obj, state):
    """obj saved with `state` in place of its own: what a crafted file holds."""
    cls = type(obj)
    own = cls.__dict__.get("__getstate__")
    cls.__getstate__ = lambda self: state
    try:
        torch_file, pickle_file = io.BytesIO(), pickle.dumps(obj)
        torch.save(obj, torch_file)
    finally:
        if own is None:
            del cls.__getstate__
        else:
            cls.__getstate__ = own
    torch_file.seek(0)
    return (lambda: torch.load(torch_file, weights_only=True), lambda: pickle.loads(pickle_file))


def _plain(t):
    return t.as_subclass(torch.Tensor)


@pytest.mark.parametrize(
    "make",
    [lambda: MetadataTensor(torch.ones(2), {"a": 1}), lambda: LoggingTensor(torch.ones(2))],
    ids=["MetadataTensor", "LoggingTensor"],
)
def test_attributes_a_user_sets_round_trip(make):
    obj = make()
    obj.note, obj.scale = "x", torch.tensor(2.0)
    for how, r in _round_trips(obj).items():
        assert type(r) is type(obj) and r.note == "x" and torch.equal(r.scale, obj.scale), how
        assert torch.equal(_plain(r), _plain(obj)), how


def test_metadata_referring_to_its_own_tensor_round_trips():
    m = MetadataTensor(torch.arange(3.0), {"k": 1})
    m.metadata["self"] = m
    m.metadata["nested"] = [m, {"again": m}]
    for how, r in _round_trips(m).items():
        assert r.metadata["self"] is r, how
        assert r.metadata["nested"][0] is r and r.metadata["nested"][1]["again"] is r, how
        assert r.metadata["k"] == 1 and torch.equal(_plain(r), _plain(m)), how


@pytest.mark.parametrize(
    "make",
    [lambda: MetadataTensor(torch.ones(2)), lambda: LoggingTensor(torch.ones(2))],
    ids=["MetadataTensor", "LoggingTensor"],
)
@pytest.mark.parametrize("name", ["add", "grad", "data", "policy"])
def test_attributes_the_class_defines_are_refused_when_saving(make, name):
    obj = make()
    obj.__dict__[name] = 1  # shadows a method, a property or a setting
    with pytest.raises(pickle.PicklingError, match=f"'{name}' is not an attribute"):
        pickle.dumps(obj)
    with pytest.raises(pickle.PicklingError, match=f"'{name}' is not an attribute"):
        torch.save(obj, io.BytesIO())


@pytest.mark.parametrize(
    "state,words",
    [
        ({"metadata": 5}, "'metadata' must be a dict"),
        ({"metadata": {}, "merge_policy": "union"}, "'merge_policy' is not an attribute"),
        ({"metadata": {}, "__class__": LoggingTensor}, "'__class__' is not an attribute"),
        ({"__dict__": {}}, "'__dict__' is not an attribute"),
        ({"not an identifier": 1}, "is not an attribute"),
        (["metadata"], "expected a dict of attributes"),
    ],
)
def test_crafted_metadata_tensor_state_is_refused(state, words):
    for load in _crafted(MetadataTensor(torch.ones(2), {}), state):
        with pytest.raises(pickle.UnpicklingError, match=words):
            load()


@pytest.mark.parametrize(
    "state,words",
    [
        ({"__class__": MetadataTensor}, "'__class__' is not an attribute"),
        ({"sum": 1}, "'sum' is not an attribute"),
        ((1, 2), "expected a dict of attributes"),
    ],
)
def test_crafted_logging_tensor_state_is_refused(state, words):
    for load in _crafted(LoggingTensor(torch.ones(2)), state):
        with pytest.raises(pickle.UnpicklingError, match=words):
            load()


def test_a_file_of_the_previous_layout_still_loads():
    """Files written before the state moved to pickle's own state item carried it inside
    the rebuild call (as torch.Tensor does)."""
    m = MetadataTensor(torch.ones(2), {"k": 1})
    with torch._C.DisableTorchFunctionSubclass():
        func, args = torch.Tensor._reduce_ex_internal(m, 2)
    old = torch._tensor._rebuild_from_type_v2(func, MetadataTensor, args, {"metadata": {"k": 1}})
    assert old.metadata == {"k": 1} and type(old) is MetadataTensor


@pytest.mark.parametrize(
    "change",
    [
        {"N": -1},
        {"N": 2.0},
        {"_pair": torch.ones(3)},
        {"_pair": [1.0, 0.0]},
        {"_pair": torch.tensor([1.5, 2.0])},
        {"_shown": 7.5},  # a key this class does not save
        {"extra": 1},
    ],
)
def test_crafted_scalar_tensor_state_is_refused(change):
    d = ScalarTensor(2, 1.5)
    d.__dict__.update(change)
    for load in (lambda: _save_load(d), lambda: pickle.loads(pickle.dumps(d))):
        with pytest.raises(pickle.UnpicklingError, match="invalid saved state"):
            load()


@pytest.mark.parametrize(
    "pair",
    [
        torch.tensor([1.5, 0.0], requires_grad=True),
        torch.tensor([1.5]).expand(2),  # expanded: one number for both entries
        torch.tensor([1.5, 0.0], device="meta"),
        torch.tensor([1.5, 0.5]),  # a second entry other than zero
    ],
    ids=["requires grad", "expanded", "meta", "second entry"],
)
def test_crafted_scalar_tensor_pairs_are_refused(pair):
    d = ScalarTensor(2, 1.5)
    for load in _crafted(d, {"N": 2, "_pair": pair}):
        with pytest.raises(pickle.UnpicklingError, match="invalid saved state"):
            load()


def test_deepcopy_keeps_views_sharing_storage():
    m = MetadataTensor(torch.arange(4.0), {"k": 1})
    m.metadata["view"] = m[1:3]
    copied = copy.deepcopy(m)
    with torch.no_grad():
        copied.as_subclass(torch.Tensor)[1] = 99.0
    assert copied.metadata["view"].as_subclass(torch.Tensor)[0].item() == 99.0
    assert m.as_subclass(torch.Tensor)[1].item() == 1.0  # the original is untouched


def _scalar_tensors_of_every_kind():
    """(label, ScalarTensor): the results of every structured call of ScalarTensor's table
    (views such as d.real and d.imag, conversions, each handler family), the same again
    through a second view, and ScalarTensors made from tensors."""
    made = []
    for case in structured_calls():
        d = ScalarTensor(3, VALUES[case.dtype], dtype=case.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call(case.func, d, case.arguments(3))
        made.append((case.label, result))
        made.append((f"{case.label}.t()", result.t()))
    for dtype in VALUES:
        value = torch.tensor(VALUES[dtype], dtype=dtype)
        made.append((f"from a {dtype} tensor", ScalarTensor(2, value)))
        made.append((f"from a {dtype} tensor's view", ScalarTensor(2, torch.stack([value] * 3)[1])))
    return made


@pytest.mark.slow
def test_every_kind_of_scalar_tensor_round_trips():
    failures, made = [], _scalar_tensors_of_every_kind()
    for label, d in made:
        try:
            trips = _round_trips(d)
        except Exception as e:
            failures.append(f"{label}: {e!r}")
            continue
        for how, r in trips.items():
            if not (
                type(r) is type(d)
                and r.N == d.N
                and r.dtype == d.dtype
                and torch.equal(r.tensor().isnan(), d.tensor().isnan())
                and torch.equal(r.tensor().nan_to_num(), d.tensor().nan_to_num())
            ):
                failures.append(f"{label} ({how}): {r!r}, saved {d!r}")
    assert len(made) > 1000 and not failures, "\n".join(failures[:40])
