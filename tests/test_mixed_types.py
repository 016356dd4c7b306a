"""Several overriding types in one call: PyTorch's order (subclasses first, then left
to right), and which type's result comes back."""

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs


def test_spec_scalar_plus_metadata():
    r = torch.add(ScalarTensor(2, 1.0), MetadataTensor(torch.ones(2, 2), metadata={"k": 1}))
    assert isinstance(r, MetadataTensor) and r.metadata == {"k": 1}
    torch.testing.assert_close(r.as_subclass(torch.Tensor), torch.tensor([[2.0, 1.0], [1.0, 2.0]]))


def test_metadata_plus_scalar_either_order():
    m = MetadataTensor(torch.ones(2, 2), metadata={"k": 1})
    for r in (
        torch.add(m, ScalarTensor(2, 1.0)),
        m + ScalarTensor(2, 1.0),
        ScalarTensor(2, 1.0) + m,
        ScalarTensor(2, 3.0) @ m,
    ):
        assert isinstance(r, MetadataTensor) and r.metadata == {"k": 1}


@pytest.mark.parametrize("logging_first", [True, False])
def test_logging_and_metadata_log_once_and_keep_metadata(logging_first):
    lt = LoggingTensor(torch.tensor([1.0, 2.0]))
    mt = MetadataTensor(torch.tensor([10.0, 20.0]), metadata={"k": "v"})
    with capture_logs() as logs:
        r = torch.add(lt, mt) if logging_first else torch.add(mt, lt)
    assert isinstance(r, MetadataTensor) and r.metadata == {"k": "v"}
    torch.testing.assert_close(r.as_subclass(torch.Tensor), torch.tensor([11.0, 22.0]))
    assert [rec.function for rec in logs] == ["torch.add"]


def test_in_place_with_another_type_returns_the_same_object():
    mt = MetadataTensor(torch.zeros(2, 2), metadata={"k": 1})
    r = mt.add_(ScalarTensor(2, 5.0))
    assert r is mt and mt.metadata == {"k": 1}
    torch.testing.assert_close(mt.as_subclass(torch.Tensor), 5 * torch.eye(2))


class Celsius:
    """A user-defined tensor-like: not a tensor, handles torch.add and refuses the rest."""

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is not torch.add:
            return NotImplemented
        plain = [a.t if isinstance(a, Celsius) else a for a in args]
        return Celsius(torch.add(*plain, **(kwargs or {})))


def test_user_type_mixed_with_ours():
    c = Celsius(torch.ones(2))
    m = MetadataTensor(torch.ones(2), metadata={"k": 1})
    # MetadataTensor (left) hands Celsius a plain tensor; Celsius answers with an object
    # that is not a tensor, which MetadataTensor returns as it is.
    r = torch.add(m, c)
    assert isinstance(r, Celsius) and type(r.t) is torch.Tensor
    torch.testing.assert_close(r.t, torch.full((2,), 2.0))
    # Celsius on the left answers first.
    r2 = torch.add(c, m)
    assert isinstance(r2, Celsius)
    torch.testing.assert_close(r2.t.as_subclass(torch.Tensor), torch.full((2,), 2.0))
    # Nobody handles torch.mul for Celsius: MetadataTensor passes, Celsius refuses.
    with pytest.raises(TypeError, match="torch.mul"):
        torch.mul(c, m)
