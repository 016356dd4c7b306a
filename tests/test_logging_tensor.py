"""LoggingTensor: one record per torch call, values equal plain tensors'."""

import copy
import io
import logging
import pickle

import pytest
import torch
from _support.lltm_cases import make_args
from _support.type_cases import CALLS, assert_same_values, tensors_in

import tensortools
from tensortools import LoggingTensor, capture_logs, ops


@pytest.mark.parametrize("name", sorted(CALLS))
def test_calls_are_logged_and_values_equal_plain(name):
    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    lx, ly = LoggingTensor(x.clone()), LoggingTensor(y.clone())
    with capture_logs() as logs:
        got = CALLS[name](lx, ly)
    assert_same_values(got, CALLS[name](x, y))
    for t in tensors_in(got):
        assert isinstance(t, LoggingTensor), name
    assert len(logs) >= 1
    for record in logs:
        assert record.name == "tensortools.logging" and record.levelno == logging.INFO
        assert record.duration >= 0 and record.function


def test_record_contents():
    x = LoggingTensor(torch.full((1000, 3), 7.0, dtype=torch.float64))
    with capture_logs() as logs:
        y = torch.add(x, 2, alpha=3)
    (record,) = logs
    assert record.function == "torch.add"
    assert record.arguments == "LoggingTensor[float64, (1000, 3)], int, alpha=int"
    assert "7." not in record.arguments  # shapes and dtypes, never values
    assert record.getMessage().startswith(f"torch.add({record.arguments}) returned in ")
    assert 0 < record.duration < 10
    assert isinstance(y, LoggingTensor)
    torch.testing.assert_close(
        y.as_subclass(torch.Tensor), torch.full((1000, 3), 13.0, dtype=torch.float64)
    )


# Calls whose arguments carry data in lists, nested tensors and other objects. Values are
# drawn so that their decimal text (1234.5678, ...) is unmistakable in a record.
_DATA = [1234.5678, 8765.4321, 4242.4242]


def _calls_with_data(x):
    values = torch.tensor(_DATA)
    return {
        "new_tensor(list)": lambda: x.new_tensor(_DATA),
        "nested tensors": lambda: torch.stack([x, values, values * 0]),
        "deeply nested": lambda: torch.add(x, [[[values]]][0][0][0][:4].sum()),
        "tuple of floats": lambda: x.new_tensor(tuple(_DATA)).index_put_(
            (torch.tensor([0]),), torch.tensor(_DATA[:1])
        ),
        "index_put_": lambda: x.clone().index_put_((torch.tensor([0]),), values[:1]),
        "object argument": lambda: x.new_tensor(range(3)),
        "a list of lists": lambda: x.new_tensor([[_DATA[0]], [_DATA[1]]]),
        "a fill value": lambda: x.clone().fill_(_DATA[0]),
        "an assigned item": lambda: x.clone().__setitem__(0, _DATA[1]),
        "a full_like value": lambda: torch.full_like(x, _DATA[2]),
    }


@pytest.mark.parametrize("case", sorted(_calls_with_data(None)))
def test_records_hold_no_data(case):
    x = LoggingTensor(torch.ones(3))
    with capture_logs() as logs:
        _calls_with_data(x)[case]()
    assert logs
    for record in logs:
        for value in _DATA:
            text = record.getMessage()
            for shown in (str(value), f"{value:.4f}", f"{value:.1f}", str(int(value))):
                assert shown not in text, (case, text)


def test_a_keyboard_interrupt_is_logged_as_raised():
    class Interrupting(LoggingTensor):
        pass

    @Interrupting.implements(torch.sin)
    def _interrupt(x):
        raise KeyboardInterrupt

    with capture_logs() as logs, pytest.raises(KeyboardInterrupt):
        torch.sin(Interrupting(torch.ones(1)))
    assert logs[0].failed == "KeyboardInterrupt"
    assert "raised KeyboardInterrupt" in logs[0].getMessage()


def test_methods_and_operators_are_named():
    x = LoggingTensor(torch.ones(2))
    with capture_logs() as logs:
        x.sum()
        x * 2
    assert [r.function for r in logs] == ["torch.Tensor.sum", "torch.Tensor.mul"]


def test_failed_call_is_logged_and_raises():
    x = LoggingTensor(torch.ones(2, 3))
    with capture_logs() as logs, pytest.raises(RuntimeError):
        torch.mm(x, x)
    assert logs[0].function == "torch.mm" and logs[0].failed == "RuntimeError"


def test_summary():
    x = LoggingTensor(torch.ones(4))
    with capture_logs() as logs:
        for _ in range(3):
            torch.sin(x)
        torch.cos(x)
    summary = logs.summary()
    assert list(summary) == sorted(summary, key=lambda k: -summary[k].total_seconds)
    assert summary["torch.sin"].calls == 3 and summary["torch.cos"].calls == 1
    total = sum(r.duration for r in logs if r.function == "torch.sin")
    assert summary["torch.sin"].total_seconds == pytest.approx(total)
    table = logs.format_summary()
    assert "torch.sin" in table and table.count("\n") == 2


def test_standard_logging_configuration_sees_records(caplog):
    with caplog.at_level(logging.INFO, logger="tensortools.logging"):
        torch.exp(LoggingTensor(torch.zeros(2)))
    assert [r.function for r in caplog.records] == ["torch.exp"]


def test_nothing_is_logged_without_listener(caplog):
    with caplog.at_level(logging.WARNING, logger="tensortools.logging"):
        torch.exp(LoggingTensor(torch.zeros(2)))
    assert not caplog.records


def test_capture_restores_logger_state():
    logger = logging.getLogger("tensortools.logging")
    level, handlers = logger.level, list(logger.handlers)
    with capture_logs():
        torch.exp(LoggingTensor(torch.zeros(2)))
    assert logger.level == level and logger.handlers == handlers


def test_repr_and_str_do_not_recurse():
    x = LoggingTensor(torch.tensor([1.0, 2.0]))
    with capture_logs() as logs:
        assert repr(x) == "LoggingTensor(tensor([1., 2.]))"
        assert str(x) == repr(x)
        f"{x}"
    assert all(r.function != "torch.Tensor.__repr__" for r in logs)


def test_autograd_and_lltm_is_one_call():
    torch.manual_seed(0)
    args = list(make_args(2, 3, 4, dtype=torch.float32))
    logged = [LoggingTensor(a.clone()).requires_grad_() for a in args]
    with capture_logs() as logs:
        new_h, new_cell = ops.lltm(*logged)
    assert [r.function for r in logs] == ["tensortools.ops.lltm"]
    assert isinstance(new_h, LoggingTensor) and isinstance(new_cell, LoggingTensor)
    ref = ops.lltm(*args)
    torch.testing.assert_close(new_h.as_subclass(torch.Tensor), ref[0], rtol=0, atol=0)
    (new_h.sum() + new_cell.sum()).backward()
    plain = [a.clone().requires_grad_() for a in args]
    sum(t.sum() for t in ops.lltm(*plain)).backward()
    for a, b in zip(logged, plain):
        torch.testing.assert_close(a.grad.as_subclass(torch.Tensor), b.grad)


def test_serialization_round_trips():
    x = LoggingTensor(torch.arange(3.0))
    for restored in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert isinstance(restored, LoggingTensor) and torch.equal(restored, x)
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert isinstance(loaded, LoggingTensor) and torch.equal(loaded, x)
    assert tensortools.LoggingTensor is LoggingTensor


# -- one record per user call, whatever the other types and the argument order -----------


class Unit(tensortools.dispatch.TensorWrapper):
    """A user's wrapper type, with a handler of its own for mul."""


@Unit.implements(torch.mul)
def _unit_mul(input, other):
    with torch._C.DisableTorchFunctionSubclass():
        return Unit._make(torch.mul(torch.Tensor(input), torch.Tensor(other)) * 1)


# the other operand of a call with a LoggingTensor: (plain value, typed value)
OTHERS = {
    "ScalarTensor": lambda: tensortools.ScalarTensor(3, 1.5, dtype=torch.float64),
    "MetadataTensor": lambda: tensortools.MetadataTensor(
        torch.arange(9.0, dtype=torch.float64).reshape(3, 3), {"k": 1}
    ),
    "user type": lambda: Unit._make(torch.arange(9.0, dtype=torch.float64).reshape(3, 3)),
}
BINARY = {
    "a + b": lambda a, b: a + b,
    "a - b": lambda a, b: a - b,
    "a * b": lambda a, b: a * b,
    "a @ b": lambda a, b: a @ b,
    "torch.add(a, b, alpha=2)": lambda a, b: torch.add(a, b, alpha=2),
    "torch.mul(input=a, other=b)": lambda a, b: torch.mul(input=a, other=b),
    "torch.maximum(a, b)": lambda a, b: torch.maximum(a, b),
    "torch.where(a > 1, a, b)": lambda a, b: torch.where(torch.ones(3, 3) > 0, a, b),
    "torch.cat([a, b])": lambda a, b: torch.cat([a, b]),
    # (along dim 1: along dim 0 a MetadataTensor sample beside one without metadata is refused)
    "torch.stack((a, b), dim=1)": lambda a, b: torch.stack((a, b), dim=1),
}


def _dense(x):
    if isinstance(x, tensortools.ScalarTensor):
        return x.tensor()
    with torch._C.DisableTorchFunctionSubclass():
        return x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("order", ["logged first", "logged second"])
@pytest.mark.parametrize("other", OTHERS)
@pytest.mark.parametrize("call", BINARY)
def test_one_record_per_call_with_another_type_in_either_order(call, other, order):
    """A call of a LoggingTensor with another overriding type is one record (the user's
    call, never the calls the other type's handler makes), and its values are the plain
    computation's."""
    logged = LoggingTensor(torch.linspace(-2.0, 2.0, 9, dtype=torch.float64).reshape(3, 3))
    typed = OTHERS[other]()
    a, b = (logged, typed) if order == "logged first" else (typed, logged)
    with capture_logs() as logs:
        got = BINARY[call](a, b)
    assert len(logs) == 1, [r.function for r in logs]
    want = BINARY[call](_dense(a), _dense(b))
    torch.testing.assert_close(_dense(got), _dense(want), rtol=0, atol=0)


class Echo(logging.Handler):
    """A handler whose emit computes with LoggingTensors (as a user's summary might)."""

    def __init__(self, x):
        super().__init__()
        self.x, self.seen = x, []

    def emit(self, record):
        self.seen.append(record.function)
        self.total = (self.x * 2).sum() + torch.cat([self.x, self.x]).mean()


def test_a_handler_that_uses_logging_tensors_is_not_recorded_again():
    x = LoggingTensor(torch.ones(3))
    logger = logging.getLogger("tensortools.logging")
    handler, level = Echo(x), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with capture_logs() as logs:
            y = torch.sin(x) + 1
            torch.nn.functional.relu(y)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    expected = ["torch.sin", "torch.Tensor.add", "torch.nn.functional.relu"]
    assert handler.seen == expected and [r.function for r in logs] == expected
    assert float(handler.total) == 7.0


def test_a_subclass_handler_that_calls_torch_on_its_arguments_is_one_record():
    class Doubling(LoggingTensor):
        pass

    @Doubling.implements(torch.neg)
    def _neg(input):
        return (input * -1) + input - input  # three calls on LoggingTensors

    x = Doubling(torch.arange(3.0))
    with capture_logs() as logs:
        y = torch.neg(x)
    assert [r.function for r in logs] == ["torch.neg"]
    assert torch.equal(_dense(y), -torch.arange(3.0))


def test_a_failing_record_leaves_recording_on():
    x = LoggingTensor(torch.ones(2))
    with capture_logs() as logs, pytest.raises(RuntimeError):
        torch.add(x, torch.ones(3))
    with capture_logs() as after:
        torch.sin(x)
    assert [r.failed for r in logs] == ["RuntimeError"] and len(after) == 1
