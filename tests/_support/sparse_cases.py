"""Sparse adjacency matrices that break one invariant each, built with
check_invariants=False (as a user's own code or a loaded file may build them). Used by
tests/_support/hostile_calls.py, which runs graph_conv on each in a separate process: a kernel
that read such indices unchecked would read out of bounds."""

from __future__ import annotations

import torch

N = 4  # every matrix is N x N; a valid one has nnz = 3


def _csr(crow, col, values=None) -> torch.Tensor:
    crow, col = torch.tensor(crow), torch.tensor(col)
    values = torch.ones(col.numel()) if values is None else values
    return torch.sparse_csr_tensor(crow, col, values, (N, N), check_invariants=False)


def _coo(indices, values=None) -> torch.Tensor:
    indices = torch.tensor(indices)
    values = torch.ones(indices.shape[-1]) if values is None else values
    return torch.sparse_coo_tensor(indices, values, (N, N), check_invariants=False)


MALFORMED = {
    "csr row pointer past nnz": lambda: _csr([0, 1, 2, 9, 3], [0, 1, 2]),
    "csr row pointers decreasing": lambda: _csr([0, 2, 1, 3, 3], [0, 1, 2]),
    "csr first row pointer not 0": lambda: _csr([1, 1, 2, 3, 3], [0, 1, 2]),
    "csr last row pointer not nnz": lambda: _csr([0, 1, 2, 2, 2], [0, 1, 2]),
    "csr negative row pointer": lambda: _csr([0, -5, 2, 3, 3], [0, 1, 2]),
    "csr huge row pointer": lambda: _csr([0, 2**40, 2, 3, 3], [0, 1, 2]),
    "csr column past N": lambda: _csr([0, 1, 2, 3, 3], [0, 1, 99]),
    "csr negative column": lambda: _csr([0, 1, 2, 3, 3], [0, -1, 2]),
    "csr columns unsorted in a row": lambda: _csr([0, 2, 2, 3, 3], [1, 0, 2]),
    "csr row pointers too few": lambda: torch.sparse_csr_tensor(
        torch.tensor([0, 1, 3]),
        torch.tensor([0, 1, 2]),
        torch.ones(3),
        (N, N),
        check_invariants=False,
    ),
    "coo row past N": lambda: _coo([[0, 1, 77], [0, 1, 2]]),
    "coo column past N": lambda: _coo([[0, 1, 2], [0, 1, 2**40]]),
    "coo negative index": lambda: _coo([[0, -3, 2], [0, 1, 2]]),
}
