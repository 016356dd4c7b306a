"""MetadataTensor: metadata follows every result; values equal plain tensors'."""

import contextlib
import copy
import io
import pickle
import sys

import pytest
import torch
from _support.lltm_cases import make_args
from _support.type_cases import CALLS, assert_same_values, tensors_in

import tensortools
from tensortools import MetadataTensor, ops
from tensortools.dispatch.wrapper import WrapperPath


def test_spec_examples():
    m = MetadataTensor([1, 2, 3, 4], metadata={"owner": "Bloonow"})
    r = torch.add(m, torch.tensor([5, 6, 7, 8]))
    assert isinstance(r, MetadataTensor)
    assert r.tolist() == [6, 8, 10, 12] and r.metadata == {"owner": "Bloonow"}
    r = torch.mul(m, torch.tensor([5, 6, 7, 8]))
    assert isinstance(r, MetadataTensor) and r.tolist() == [5, 12, 21, 32]
    assert repr(m) == "Metadata:\n{'owner': 'Bloonow'}\ndata:\ntensor([1, 2, 3, 4])"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_calls_keep_metadata_and_values(name):
    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    mx = MetadataTensor(x.clone(), {"src": "x"})
    my = MetadataTensor(y.clone(), {"src": "y"})
    got, want = CALLS[name](mx, my), CALLS[name](x, y)
    assert_same_values(got, want)
    for t in tensors_in(got):
        assert isinstance(t, MetadataTensor), name
        assert t.metadata == {"src": "x"}, name  # "first" policy: x comes first
    assert mx.metadata == {"src": "x"}


def _python_path():
    """A merge policy equal to "first" that the compiled path does not take."""
    return MetadataTensor.using_merge_policy(lambda dicts: dict(dicts[0]))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_compiled_and_python_paths_agree(name):
    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    results = []
    for context in (contextlib.nullcontext, _python_path):
        mx = MetadataTensor(x.clone(), {"src": "x"})
        my = MetadataTensor(y.clone(), {"src": "y"})
        with context():
            got = CALLS[name](mx, my)
        results.append((got, [(type(t), t.metadata) for t in tensors_in(got)]))
    (fast, fast_kinds), (slow, slow_kinds) = results
    assert_same_values(fast, slow)
    assert type(fast) is type(slow) and fast_kinds == slow_kinds


class _PythonPath(MetadataTensor):
    """Takes the Python implementation: it overrides a hook the compiled path replicates."""

    @classmethod
    def context(cls, func, args, kwargs):
        return super().context(func, args, kwargs)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_untracked_calls_agree_on_both_paths(name):
    # With tracking off the compiled path returns the plain call's result as it is; the
    # Python path (call_plain) must give the same values and kinds of result.
    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    results = []
    for cls in (MetadataTensor, _PythonPath):
        with MetadataTensor.using_tracking(False):
            got = CALLS[name](cls(x.clone(), {"src": "x"}), cls(y.clone(), {"src": "y"}))
        kinds = ["own" if type(t) is cls else type(t) for t in tensors_in(got)]
        results.append((got, kinds))
    (fast, fast_kinds), (slow, slow_kinds) = results
    assert_same_values(fast, slow)
    assert fast_kinds == slow_kinds
    assert all(k in ("own", torch.Tensor) for k in fast_kinds)  # nothing newly wrapped


def test_compiled_path_edge_cases():
    plain = torch.zeros(3)
    m = MetadataTensor(torch.ones(3), {"k": 1})
    # out= returns the tensor the caller passed, itself, of its own class
    r = torch.add(m, 1, out=plain)
    assert r is plain and type(plain) is torch.Tensor
    assert plain.tolist() == [2.0, 2.0, 2.0]
    # in place: the argument itself comes back
    assert m.add_(1) is m and m.metadata == {"k": 1}
    # metadata found in a keyword argument and inside a list
    k = torch.add(torch.ones(3), other=m)
    assert isinstance(k, MetadataTensor) and k.metadata == {"k": 1}
    c = torch.cat([torch.ones(1), m])
    assert isinstance(c, MetadataTensor) and c.metadata == {"k": 1}
    # no dict at all (made by as_subclass): an empty one
    bare = torch.ones(2).as_subclass(MetadataTensor)
    assert (bare + 1).metadata == {}
    # functions whose results are not tensors, or not wrapped
    assert m.tolist() == [2.0, 2.0, 2.0] and m.dim() == 1
    assert torch.is_tensor(m.grad) is False
    # an error inside the call leaves dispatch working
    with pytest.raises(RuntimeError):
        torch.add(m, torch.ones(4))
    assert isinstance(torch.sin(m), MetadataTensor)


def test_compiled_path_keeps_reference_counts():
    m = MetadataTensor(torch.ones(2), {"k": 1})
    before = (sys.getrefcount(m), sys.getrefcount(m.metadata))
    for _ in range(1000):
        torch.add(m, m)
        torch.sin(m)
        torch.max(m, dim=0)
    assert (sys.getrefcount(m), sys.getrefcount(m.metadata)) == before


def test_subclass_hooks_are_honoured():
    class Tagged(MetadataTensor):
        @classmethod
        def wrap(cls, tensor, context):
            out = super().wrap(tensor, context)
            out.metadata["wrapped"] = True
            return out

    class Plain(MetadataTensor):
        pass

    assert Tagged._fast.kind == WrapperPath.PYTHON
    assert Plain._fast.kind == MetadataTensor._fast.kind == WrapperPath.WRAP_METADATA
    t = Tagged(torch.ones(2), {"k": 1})
    assert (t + 1).metadata == {"k": 1, "wrapped": True} and t.metadata == {"k": 1}
    p = Plain(torch.ones(2), {"k": 2})
    assert type(p * 2) is Plain and (p * 2).metadata == {"k": 2}


def test_compiled_entry_point_refuses_bad_calls():
    with pytest.raises(TypeError, match="wrapper_torch_function"):
        tensortools._native.C.wrapper_torch_function(MetadataTensor)
    with pytest.raises(TypeError, match="wrapper_dispatch_setup"):
        tensortools._native.C.wrapper_dispatch_setup(1, 2, 3)


def test_compile_graph_breaks_keep_metadata():
    m = MetadataTensor(torch.randn(3), {"k": 1})
    f = torch.compile(lambda t: torch.sin(t) * 2 + 1, backend="eager")
    out = f(m)
    assert isinstance(out, MetadataTensor) and out.metadata == {"k": 1}
    torch.testing.assert_close(
        out.as_subclass(torch.Tensor), torch.sin(m.as_subclass(torch.Tensor)) * 2 + 1
    )


def test_results_own_their_metadata():
    m = MetadataTensor(torch.ones(2), {"tags": ["a"], "k": 1})
    r = m * 2
    r.metadata["k"] = 2
    r.metadata["new"] = True
    assert m.metadata == {"tags": ["a"], "k": 1}
    assert (m + 1).metadata is not (m + 1).metadata


def test_merge_policies():
    a = MetadataTensor(torch.ones(2), {"k": 1, "a": "A"})
    b = MetadataTensor(torch.ones(2), {"k": 2, "b": "B"})
    assert (a + b).metadata == {"k": 1, "a": "A"}
    assert (b + a).metadata == {"k": 2, "b": "B"}
    with MetadataTensor.using_merge_policy("union"):
        assert (a + b).metadata == {"k": 1, "a": "A", "b": "B"}
        assert torch.cat([b, a]).metadata == {"k": 2, "b": "B", "a": "A"}
    with MetadataTensor.using_merge_policy("strict"):
        with pytest.raises(ValueError, match="key 'k' has conflicting values 1 and 2"):
            a + b
        c = MetadataTensor(torch.ones(2), {"k": 1, "c": torch.ones(2)})
        d = MetadataTensor(torch.ones(2), {"k": 1, "c": torch.ones(2)})
        assert (c + d).metadata.keys() == {"k", "c"}
    with MetadataTensor.using_merge_policy(lambda ds: {"n": len(ds)}):
        assert torch.stack([a, b, a], dim=1).metadata == {"n": 3}
    assert MetadataTensor.merge_policy == "first"
    with pytest.raises(ValueError, match="'policy' must be one of"):
        MetadataTensor.set_merge_policy("last")
    with MetadataTensor.using_merge_policy(lambda ds: 3), pytest.raises(TypeError, match="dict"):
        torch.add(a, b)


def test_tracking_switch():
    m = MetadataTensor(torch.ones(3), {"k": 1})
    with MetadataTensor.using_tracking(False):
        r = m * 2 + 1
        assert type(r) is torch.Tensor
        torch.testing.assert_close(r, torch.full((3,), 3.0))
    assert type(m * 2) is MetadataTensor
    previous = MetadataTensor.set_tracking(False)
    try:
        assert previous is True and type(torch.sin(m)) is torch.Tensor
    finally:
        MetadataTensor.set_tracking(True)


def test_autograd():
    x = MetadataTensor(torch.randn(4, dtype=torch.float64), {"k": 1}).requires_grad_()
    y = (x.sin() * 3).sum()
    assert isinstance(y, MetadataTensor) and y.metadata == {"k": 1}
    y.backward()
    torch.testing.assert_close(x.grad.as_subclass(torch.Tensor), 3 * torch.cos(x.detach()))
    assert torch.autograd.gradcheck(
        lambda t: (MetadataTensor(t, {"a": 1}) ** 3).sum(),
        (torch.randn(3, dtype=torch.float64, requires_grad=True),),
    )


def test_wrapping_an_existing_tensor_keeps_its_graph():
    leaf = torch.randn(3, requires_grad=True)
    (MetadataTensor(leaf, {"k": 1}) * 2).sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full((3,), 2.0))


def test_to_in_place_and_module():
    m = MetadataTensor(torch.arange(4.0), {"k": "v"})
    assert m.to(torch.float64).metadata == {"k": "v"} and m.to("cpu").dtype == torch.float32
    r = m.add_(1)
    assert r is m and m.tolist() == [1.0, 2.0, 3.0, 4.0] and m.metadata == {"k": "v"}
    m[0] = 10.0
    assert m.tolist()[0] == 10.0
    lin = torch.nn.Linear(4, 2)
    out = lin(MetadataTensor(torch.randn(5, 4), {"batch": 7}))
    assert isinstance(out, MetadataTensor) and out.metadata == {"batch": 7}


def test_module_matches_plain():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(5, 4)
    out = net(MetadataTensor(x.clone(), {"batch": 7}))
    assert isinstance(out, MetadataTensor) and out.metadata == {"batch": 7}
    torch.testing.assert_close(out.as_subclass(torch.Tensor), net(x), rtol=0, atol=0)


def test_deepcopy_pickle_and_save_load():
    m = MetadataTensor(
        torch.randn(3),
        {"s": "x", "n": [1, 2.5, None, True], "t": torch.ones(2), "d": {"nested": (1, 2)}},
    ).requires_grad_()
    c = copy.deepcopy(m)
    assert isinstance(c, MetadataTensor) and c.requires_grad and torch.equal(c, m)
    assert c.metadata["n"] == m.metadata["n"] and c.metadata["n"] is not m.metadata["n"]
    p = pickle.loads(pickle.dumps(m.detach()))
    assert isinstance(p, MetadataTensor) and p.metadata["d"] == {"nested": (1, 2)}
    buf = io.BytesIO()
    torch.save({"m": m.detach()}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["m"]
    assert isinstance(loaded, MetadataTensor) and torch.equal(loaded, m.detach())
    assert loaded.metadata["s"] == "x" and torch.equal(loaded.metadata["t"], torch.ones(2))


class _Unsafe:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_unsafe_metadata_is_refused_at_load(capsys):
    buf = io.BytesIO()
    torch.save(MetadataTensor(torch.ones(1), {"bad": _Unsafe()}), buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(buf, weights_only=True)
    assert "this must never run" not in capsys.readouterr().out


def test_lltm_with_metadata_arguments():
    torch.manual_seed(0)
    args = list(make_args(2, 3, 4, dtype=torch.float32))
    wrapped = [MetadataTensor(args[0].clone(), {"step": 3})] + args[1:]
    new_h, new_cell = ops.lltm(*wrapped)
    ref_h, ref_cell = ops.lltm(*args)
    for got, want in ((new_h, ref_h), (new_cell, ref_cell)):
        assert isinstance(got, MetadataTensor) and got.metadata == {"step": 3}
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["lltm", "lltm_sequence"])
def test_own_operators_results_are_new_tensors_not_views(op):
    """A tuple of results of tensortools' operators comes back as new instances, as a
    plain call's results are new tensors, not as views of them (FSDP2 warns of a view
    result, and an in-place op on a view of a plain result changes the graph): an in-place
    op on a result, then backward, gives the plain call's gradients (float64)."""
    torch.manual_seed(0)
    args = list(make_args(2, 3, 4, requires_grad=True))
    if op == "lltm_sequence":
        args[0] = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)

    def run(first):
        out = getattr(ops, op)(first, *args[1:])
        h, c = out if op == "lltm" else out[1:]
        results = (h, c) if op == "lltm" else (out[0], c)
        # (one backward does not save: the cell's new h, the sequence's last cell)
        results[0 if op == "lltm" else 1].mul_(2)
        loss = sum((t.as_subclass(torch.Tensor) * (i + 1)).sum() for i, t in enumerate(results))
        return results, torch.autograd.grad(loss, args)

    got, got_grads = run(MetadataTensor(args[0], {"step": 3}))
    want, want_grads = run(args[0])
    for g, w in zip(got, want):
        assert type(g) is MetadataTensor and g.metadata == {"step": 3}
        assert g._base is None and not g._is_view()
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w, rtol=0, atol=0)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_own_operators_results_in_two_threads_interleaved():
    """Two threads calling ops.lltm on MetadataTensors of their own, in lockstep (a
    barrier before each call): every result is a new instance carrying its own thread's
    metadata and the plain call's values."""
    import threading

    torch.manual_seed(0)
    args = list(make_args(2, 3, 4))
    want = ops.lltm(*args)
    barrier, errors = threading.Barrier(2), []

    def worker(tag):
        try:
            for step in range(50):
                barrier.wait()
                got = ops.lltm(MetadataTensor(args[0], {"thread": tag, "step": step}), *args[1:])
                for g, w in zip(got, want):
                    assert type(g) is MetadataTensor and not g._is_view()
                    assert g.metadata == {"thread": tag, "step": step}
                    assert torch.equal(g.as_subclass(torch.Tensor), w)
        except Exception as err:  # reported below, in the test's own thread
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_constructor_validation():
    with pytest.raises(TypeError, match="'metadata' must be a dict"):
        MetadataTensor([1.0], metadata=["a"])
    assert MetadataTensor([1.0]).metadata == {}
    assert tensortools.MetadataTensor is MetadataTensor


def test_function_transforms_see_values_only():
    """torch.func's transforms (vmap, grad, ...) take tensors apart below
    __torch_function__: their results are plain tensors, as the docs say. The metadata of
    the input is there to put back."""
    m = MetadataTensor(torch.randn(3, 4), {"k": 1})
    batched = torch.func.vmap(torch.sin)(m)
    assert type(batched) is torch.Tensor
    torch.testing.assert_close(batched, torch.sin(m.as_subclass(torch.Tensor)))
    grad = torch.func.grad(lambda x: torch.sin(x).sum())(MetadataTensor(torch.ones(3), {"k": 1}))
    assert type(grad) is torch.Tensor
    torch.testing.assert_close(grad, torch.cos(torch.ones(3)))
    assert MetadataTensor(batched, m.metadata).metadata == {"k": 1}
