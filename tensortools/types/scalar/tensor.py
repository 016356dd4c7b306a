"""ScalarTensor: ``value * I_N`` stored as two numbers."""

from __future__ import annotations

import enum
import math
import operator
import pickle
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from tensortools import _spec as coverage_spec
from tensortools._compiler import run_whole_when_entered
from tensortools._native import C as _C
from tensortools.dispatch import TensorLike
from tensortools.dispatch.table import refusing_endless_recursion
from tensortools.types.scalar import in_place, small

__all__ = ["ScalarTensor", "FastCode", "FastRecord", "densify"]

#: The kinds of call csrc/python/scalar_dispatch.cpp answers in C, by the codes it defines
#: (exported from there: one definition). tensortools.types.scalar.fast_path lists the
#: functions of each kind.
FastCode = enum.IntEnum("FastCode", _C.scalar_fast_codes)

_transforms_active = small.transforms_active


class FastRecord(NamedTuple):
    """What the compiled path reads from a class (``cls._fast``)."""

    #: the class structured results are made of (ScalarTensor, also for a subclass's calls)
    result_class: type | None
    #: func -> its FastCode (as an int), for the functions whose table entry is the very
    #: handler fast_path marked with that code (a subclass that registers its own handler
    #: for one takes the Python path for it)
    codes: dict


class ScalarTensor(TensorLike):
    """The N×N matrix ``value * I_N``, stored as ``N`` and ``value``.

    (The handlers live beside this module, one module per family: ``arithmetic``,
    ``elementwise``, ``reductions``, ``linalg``, ``queries``; the fallback and the rules
    of in-place calls in ``in_place``; see the package's docstring.)

    Any torch function accepts it. Structured handlers answer cheaply and exactly (the
    same values as on the dense matrix): add, sub, mul and div by a number or another
    ScalarTensor, neg, matmul/mm with a ScalarTensor or a dense tensor, dense +
    ScalarTensor, trace, diag/diagonal, transpose/t, the elementwise functions that keep
    0 at 0 (sin, tanh, abs, relu, clamp or comparisons with numbers or another
    ScalarTensor, ...: ``elementwise``), the reductions and norms with their dims
    (sum, mean, amax, argmax, var, logsumexp, linalg.norm, ...: ``reductions``)
    and the linear algebra (det, slogdet, inverse, pinv, matrix_power, matrix_exp,
    cholesky, eigvals, eigvalsh, svdvals, solve and lstsq with a dense right-hand side:
    ``linalg``). Other calls,
    and structured ones whose dense answer is not of this form (``d * inf`` puts NaN off
    the diagonal), run on the dense matrix under the default ``"fallback"`` policy, or
    raise ``TypeError`` under ``"strict"`` (``ScalarTensor.set_policy("strict")``).

    Every call gives what the same call on the dense matrix gives (value, dtype, shape),
    or raises a ``TypeError``. In-place calls (``d.mul_(2)``, ``d += e``, ``out=d``) change
    ``d`` as they would change the dense matrix when the result is again ``value * I``,
    and raise :class:`~tensortools.dispatch.CannotHoldResult` (a ``TypeError``) when it is
    not. Queries (``numel``, ``requires_grad``, ``is_floating_point``, ``stride``, ...)
    and conversions (``bool``, ``float``, ``item``) never build the dense matrix.

    ``dtype`` defaults to torch's default dtype (complex for a complex value),
    ``device`` to the CPU. ``value`` is the number given (for integer dtypes, as the
    dtype holds it); computations use it rounded to ``dtype``, like the dense matrix.
    """

    # -- __torch_function__: compiled for the most common calls, in Python for the rest --
    # See Note [The compiled paths] in docs/design.md. _fast_handlers (func -> (handler,
    # code), filled by fast_path) says which handler object each code mirrors.
    _fast: ClassVar[FastRecord] = FastRecord(None, {})
    _fast_handlers: ClassVar[dict] = {}
    # the table's, and under "strict" the writes that need no dense matrix
    _python_torch_function = classmethod(in_place.python_torch_function)
    # runs the calls no handler answers on the dense matrix, with the rules of calls
    # that change a ScalarTensor
    fallback = classmethod(in_place.fallback)

    @classmethod
    @run_whole_when_entered
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # A Python frame around the compiled function (which torch.compile traces as its
        # stand-in, tensortools.dispatch.polyfills), and the Python path under a
        # torch.func transform. See Note [The compiled paths] in docs/design.md.
        try:
            if _transforms_active():
                return cls._python_torch_function(func, types, args, kwargs)
            return _C.scalar_torch_function(cls, func, types, args, kwargs)
        except RecursionError:  # (a declining TorchFunctionMode: see the function below)
            with refusing_endless_recursion(cls, func):
                raise

    @classmethod
    def _on_table_change(cls) -> None:
        codes = {
            f: int(code)
            for f, (handler, code) in cls._fast_handlers.items()
            if cls._handlers.get(f) is handler
        }
        # (structured results are of the class that states the fast handlers: ScalarTensor)
        result_class = next(k for k in cls.__mro__ if "_fast_handlers" in k.__dict__)
        cls._fast = FastRecord(result_class, codes)

    def __init__(
        self,
        N: int,
        value: Any,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if isinstance(N, bool) or not isinstance(N, int):
            raise TypeError(f"ScalarTensor: 'N' must be an int, got {type(N).__name__}")
        if N < 0:
            raise ValueError(f"ScalarTensor: 'N' must be non-negative, got {N}")
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(
                    "ScalarTensor: 'value' must be a number or a one-element "
                    f"tensor, got shape {tuple(value.shape)}"
                )
            if value.requires_grad:  # its number is taken: no gradient could reach it
                raise ValueError(
                    "ScalarTensor: 'value' must not require grad; a "
                    "ScalarTensor holds a number (pass value.detach())"
                )
            dtype = value.dtype if dtype is None else dtype
            device = value.device if device is None else device
            value = value.item()
        elif not isinstance(value, (bool, int, float, complex)):
            raise TypeError(
                "ScalarTensor: 'value' must be a number or a one-element tensor, "
                f"got {type(value).__name__}"
            )
        if dtype is None:
            dtype = torch.result_type(torch.empty(0), value)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"ScalarTensor: 'dtype' must be a torch.dtype, got {dtype!r}")
        self.N = N
        # [value, 0] in dtype: a diagonal and an off-diagonal entry of the dense matrix.
        # Handlers apply torch functions to it (see common.probed_result). Made below any
        # torch.func transform: a constant of it, and a tensor with values to read.
        device = "cpu" if device is None else device
        if _transforms_active():
            with torch._C._DisableFuncTorch():
                self._pair = torch.tensor([value, 0], dtype=dtype, device=device)
        else:
            self._pair = torch.tensor([value, 0], dtype=dtype, device=device)

    @classmethod
    def _from_pair(cls, N: int, pair: Tensor) -> ScalarTensor:
        out = cls.__new__(cls)
        out.N, out._pair = N, pair
        return out

    @property
    def value(self) -> Any:
        """The diagonal value as a Python number: the one with the fewest digits that the
        dtype holds as the stored value (3.14, not float32's 3.1400001049; for integer
        dtypes, the integer the dtype holds)."""
        return _shortest(self._pair[0])

    @property
    def dtype(self) -> torch.dtype:
        try:
            return self._pair.dtype
        except RecursionError:  # (a declining TorchFunctionMode: see _pair_attribute)
            return _pair_attribute(self._pair, "dtype")

    @property
    def device(self) -> torch.device:
        try:
            return self._pair.device
        except RecursionError:
            return _pair_attribute(self._pair, "device")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.N, self.N))

    def size(self, dim: int | None = None) -> torch.Size | int:
        if dim is None:
            return self.shape
        index = dim_index(dim)
        if index is None:
            raise TypeError(
                f"size(): argument 'dim' (position 1) must be int, not {type(dim).__name__}"
            )
        dim = index
        if not -2 <= dim < 2:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [-2, 1], but got {dim})"
            )
        return self.shape[dim]

    def dim(self) -> int:
        return 2

    def tensor(self) -> Tensor:
        """The dense N×N matrix."""
        # off the diagonal the pair's second entry: zero, with the sign the dense
        # computation would give it (-0.0 * d has -0.0 there)
        out = self._pair[1].expand(self.N, self.N).clone()
        out.diagonal().fill_(self._pair[0])
        return out

    def scalar(self, dtype: torch.dtype | None = None) -> Tensor:
        """``value`` as a new 0-d tensor (of ``dtype``, default this one's) on the device."""
        return self._pair[0].to(dtype or self.dtype, copy=True)

    def _scalar(self, dtype: torch.dtype | None = None) -> Tensor:
        # scalar() for the handlers, which only read it: no copy where none is needed
        return self._pair[0].to(dtype or self.dtype)

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self.N}, value={self.value!r})"

    def __getstate__(self) -> dict:
        # A view's pair (d.real of a complex d: every second number of the complex pair;
        # a conjugate or negative view) is saved as the two numbers it shows, which is
        # what loading checks for. A pair of its own is saved as it is, so ScalarTensors
        # sharing it (d and d.t()) still share it after a round trip.
        state = dict(self.__dict__)
        pair = state.get("_pair")
        if isinstance(pair, Tensor) and not (
            pair.is_contiguous()
            and not pair.is_conj()
            and not pair.is_neg()
            and pair.storage_offset() == 0
            and pair.untyped_storage().nbytes() == pair.numel() * pair.element_size()
        ):
            state["_pair"] = (
                pair.resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
            )
        return state

    def __setstate__(self, state: Any) -> None:
        # Unpickling (pickle, copy, torch.load also with weights_only=True) hands over
        # what was saved: N, the pair [value, 0] and the value as given. A crafted file
        # could hand anything; refuse what this class could not have saved.
        pair = state.get("_pair") if isinstance(state, dict) else None
        ok = (
            isinstance(state, dict)
            and set(state) == {"N", "_pair"}
            and type(state["N"]) is int
            and state["N"] >= 0
            and type(pair) is Tensor
            and pair.layout == torch.strided
            and not pair.is_meta
            and not pair.requires_grad
            and pair.shape == (2,)
            and pair.is_contiguous()
            and bool(pair[1] == 0)
        )
        if not ok:
            raise pickle.UnpicklingError(
                "ScalarTensor: invalid saved state; expected N (an int >= 0), _pair (a "
                "2-element tensor with a zero second entry)"
            )
        self.N, self._pair = state["N"], state["_pair"]

    def __len__(self) -> int:
        return self.N


def dim_index(dim: Any) -> int | None:
    """dim as torch takes a dim: an int, a NumPy integer or a 0-d integer tensor
    (``operator.index``), not a bool; None for anything else."""
    if isinstance(dim, bool) or not hasattr(type(dim), "__index__"):
        return None
    if not isinstance(dim, Tensor) and hasattr(type(dim), "__torch_function__"):
        return None  # (a tensor-like, a ScalarTensor: no 0-d tensor, which torch refuses)
    # (read past TorchFunctionModes, as _pair_attribute: a mode that declines a plain
    # tensor's dim() would send torch into endless recursion)
    with torch._C.DisableTorchFunction():
        if isinstance(dim, Tensor) and (dim.dim() != 0 or dim.dtype == torch.bool):
            return None
        try:
            return operator.index(dim)
        except TypeError:
            return None


def _pair_attribute(pair: Tensor, name: str) -> Any:
    """pair.<name>, read past TorchFunctionModes: a mode that declines a plain tensor's
    property getter sends torch into endless recursion, and a ScalarTensor's own dtype
    and device are no call of the user's for a mode to see."""
    with torch._C.DisableTorchFunction():
        return getattr(pair, name)


def _shortest(value: Tensor) -> Any:
    """A 0-d tensor's value as a Python number, with the fewest decimal digits that give
    back the same value in the tensor's dtype (float32's 6.28000020980835 is 6.28)."""
    number = value.item()
    if not (value.is_floating_point() or value.is_complex()) or value.dtype in (
        torch.float64,
        torch.complex128,
    ):
        return number
    parts = (number.real, number.imag) if value.is_complex() else (number,)
    part_dtype = value.real.dtype
    shortest = []
    for part in parts:
        for digits in range(1, 18):
            candidate = float(f"{part:.{digits}g}")
            if not math.isfinite(part) or torch.tensor(candidate, dtype=part_dtype).item() == part:
                break
        shortest.append(candidate if math.isfinite(part) else part)
    return complex(*shortest) if value.is_complex() else shortest[0]


def densify(obj: Any, memo: dict) -> Any:
    """obj with every ScalarTensor replaced by its dense matrix, the same matrix for the
    same ScalarTensor (memo: id -> matrix), so that aliasing arguments stay aliases."""
    return small.densify(obj, memo, ScalarTensor)


# torch.load(weights_only=True) may rebuild ScalarTensors once tensortools is imported.
torch.serialization.add_safe_globals([ScalarTensor])


def _square_floating_matrix(cls, input, args, kwargs):
    # The coverage report's stand-in: a ScalarTensor for a square floating matrix.
    t = input
    if (
        isinstance(t, Tensor)
        and t.dim() == 2
        and t.shape[0] == t.shape[1]
        and t.dtype.is_floating_point
        and not t.requires_grad
    ):
        return cls(t.shape[0], 1.5, dtype=t.dtype, device=t.device), args, kwargs
    return None


coverage_spec.register(
    ScalarTensor,
    coverage_spec.TypeSpec(
        exact=False,  # reductions may add in another order than the dense matrix
        handled_means="structured: computed from N and the value, no N×N matrix formed",
        fallback_means=(
            "runs on the dense N×N matrix; the result is a plain tensor (an in-place form "
            "changes the ScalarTensor, or refuses)"
        ),
        substitute=_square_floating_matrix,
    ),
)
