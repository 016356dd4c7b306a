"""What ScalarTensor's handlers and its in-place rules read without the class: the small
dense matrix ``value * I_k`` (k <= 2) they compute on in place of the N×N one
(:func:`small_matrix`), the index tensors that pick it and the reductions' columns out of
the pair (:func:`index_tensor`), and torch.func's two questions (:func:`hidden`,
:func:`transforms_active`; see common.py's docstring), and the dense arguments of a call
(:func:`densify`).

This module imports nothing of its package: the class (``tensor``) builds on it through
``in_place``, and the handler families through ``common``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["hidden", "transforms_active", "index_tensor", "small_matrix", "densify"]

#: hidden(t): whether t is one of torch.func's wrapped tensors, whose values a handler
#: cannot read or branch on; it declines them, and the dense call (which torch.func
#: transforms) answers.
hidden: Callable[[Tensor], bool] = torch._C._functorch.is_functorch_wrapped_tensor

#: Whether a torch.func transform is running (then its wrapped tensors may reach a call).
transforms_active: Callable[[], bool] = torch._C._are_functorch_transforms_active


def _made(kind: str, n: int, device: torch.device) -> Tensor:
    if kind == "small matrix":
        return torch.tensor([[0, 1], [1, 0]], device=device)[:n, :n]
    if kind == "widen":
        index = torch.ones(n, dtype=torch.long, device=device)
        index[:1] = 0
        return index
    return torch.arange(n, device=device)


@functools.lru_cache(maxsize=64)
def _cached(kind: str, n: int, device: torch.device) -> Tensor:
    return _made(kind, n, device)


def index_tensor(kind: str, n: int, device: torch.device) -> Tensor:
    """Index tensors the handlers read (never write): "small matrix" picks value * I_n
    (n <= 2) out of the pair [value, 0]; "widen" picks column 0, then column 1 n - 1
    times; "arange" is 0 .. n - 1. Kept for sizes up to 4096 (at most 64 of them, 2 MB),
    made per call beyond."""
    return _cached(kind, n, device) if n <= 4096 else _made(kind, n, device)


def small_matrix(d: Any, k: int) -> Tensor:
    """The dense ``value * I_k`` (k <= 2) of a ScalarTensor d, with the signed zeros of
    d's matrix."""
    return d._pair.take(index_tensor("small matrix", k, d._pair.device))


def densify(obj: Any, memo: dict, kind: type) -> Any:
    """obj with every instance of kind (ScalarTensor) replaced by its dense matrix, the
    same matrix for the same instance (memo: id -> matrix), so that aliasing arguments
    stay aliases."""
    if isinstance(obj, kind):
        if id(obj) not in memo:
            memo[id(obj)] = obj.tensor()
        return memo[id(obj)]
    return torch.utils._pytree.tree_map_only(kind, lambda d: densify(d, memo, kind), obj)
