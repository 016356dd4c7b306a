"""Eight threads calling the operators and the types while registering handlers, for a
few seconds: no errors, no lost registrations, every result correct."""

import threading
import time

import pytest
import torch

from tensortools import MetadataTensor, ScalarTensor, ops, reference

THREADS = 8
SECONDS = 2.0

# Functions the threads register handlers for, split between them (disjoint sets).
_FUNCS = [
    f
    for f in (getattr(torch, n, None) for n in sorted(dir(torch)))
    if callable(f) and type(f).__name__ == "builtin_function_or_method"
][: THREADS * 12]


@pytest.mark.slow
def test_calls_and_registrations_from_eight_threads():
    class Shared(ScalarTensor):  # handlers registered concurrently land here
        pass

    torch.manual_seed(0)
    lltm_args = [
        t.double()
        for t in (
            torch.randn(4, 5),
            torch.randn(9, 8),
            torch.randn(9),
            torch.randn(4, 3),
            torch.randn(4, 3),
        )
    ]
    lltm_want = reference.lltm(*lltm_args)
    x = torch.randn(16, 16)
    errors, counts = [], [0] * THREADS
    start = threading.Barrier(THREADS)

    def work(k):
        try:
            mine = _FUNCS[k::THREADS]
            start.wait()
            deadline = time.monotonic() + SECONDS
            i = 0
            while time.monotonic() < deadline:
                new_h, new_cell = ops.lltm(*lltm_args)
                torch.testing.assert_close(new_h, lltm_want[0])
                torch.testing.assert_close(new_cell, lltm_want[1])
                m = MetadataTensor(x, {"thread": k, "i": i}) + 1
                assert m.metadata == {"thread": k, "i": i}
                assert torch.equal(m.as_subclass(torch.Tensor), x + 1)
                d = ScalarTensor(16, float(k))
                torch.testing.assert_close(d @ x, k * x, rtol=0, atol=0)
                torch.testing.assert_close(
                    ops.add_diagonal(x, k), x + k * torch.eye(16), rtol=0, atol=0
                )
                func = mine[i % len(mine)]
                Shared.implements(func, aliases=False)(lambda *a, _k=k, **kw: ("thread", _k))
                type(f"Sub{k}_{i}", (Shared,), {})  # subclasses made while others register
                i += 1
            counts[k] = i
        except Exception as err:  # reported below, with the thread
            errors.append((k, err))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors
    assert min(counts) > 0
    # No registration lost: every function a thread registered has that thread's handler,
    # on the class and on subclasses made since.
    late = type("Late", (Shared,), {})
    for k in range(THREADS):
        for func in _FUNCS[k::THREADS][: counts[k]]:
            for cls in (Shared, late):
                handler = cls.handler_for(func)
                assert handler is not None and handler() == ("thread", k), (func, cls)
