"""Which calls keep a MetadataTensor batch: the rule, as one table.

A call whose first metadata-carrying argument is a batch (see
:mod:`tensortools.types.metadata.batch`) gives batches only where this table knows that a
result's dim 0 holds the samples:

- in their order (``keep``): elementwise calls, reductions and scans over other dims,
  views that leave dim 0 in front, Linear, Conv, pooling, normalisation per sample, ...;
- through a permutation or selection the call makes of dim 0 (``flip``, ``roll``,
  ``sort`` of a 1-D batch, ``gather``/``take_along_dim`` of whole rows, ``repeat``, ...):
  each row then carries the metadata of the sample it holds.

Every other call drops the batch: its results keep the batch's metadata whole (one entry
per sample) with ``batch_size`` None. So does a call the table lists when its arguments
leave the rule's ground (``torch.flip(b, [0])`` of a 2-D batch is a permutation, a
``torch.sort(b, dim=0)`` of one sorts each column apart and mixes the samples). A rule
reads only shapes and arguments, never a coincidence of sizes: ``b.T`` of a square batch
is not a batch.

The calls in ``SAME`` (shape-preserving calls of one tensor) keep the batch whatever
their arguments, so the compiled path may run them (``BATCH_CALLS`` lists them); every
other call with a batch, of any function, reaches :func:`settle` on the Python path.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools import ops
from tensortools.dispatch.binding import argument
from tensortools.dispatch.wrapper import argument_tensors
from tensortools.types.metadata.batch import give, plain_shape
from tensortools.types.metadata.dicts import same_value
from tensortools.types.metadata.tensor import (
    BATCH_CALLS,
    BATCH_RULES,
    MetadataTensor,
    register_batch_results,
)

__all__ = ["DROP", "KEEP", "RULES", "SAME", "settle", "verdict"]


#: A verdict: every row of the result is the sample of the same row of the batch.
KEEP = None


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


#: A verdict: the result is not a batch (its metadata is the batch's, whole).
DROP = _Drop()

# (a list of ints is the third kind of verdict: row r holds sample list[r])


class Call(NamedTuple):
    """A call with a batch among its arguments, and its results."""

    func: Callable
    args: tuple
    kwargs: dict
    batch: Tensor  # the first metadata-carrying argument, a batch
    ndim: int  # the batch's
    size: int  # the batch's (its dim 0)
    results: list  # the call's tensor results that are not its arguments


def _arg(call: Call, position: int, default: Any = None, name: str | None = None) -> Any:
    """The argument torch binds to `position`, or the keyword `name` (a parameter some
    overloads take by keyword only: ``sort(b, stable=True, dim=0)``, ``aminmax(b, dim=1)``)."""
    for key in _NAMES.get(name, (name,)) if name is not None else ():
        if key in call.kwargs:
            return call.kwargs[key]
    return argument(call.func, call.args, call.kwargs, position, default)


# (the NumPy spellings torch's argument parser also takes)
_NAMES = {"dim": ("dim", "axis"), "input": ("input", "x", "a")}


def _dim(d: Any, ndim: int) -> int | None:
    try:
        return operator.index(d) % max(ndim, 1)
    except TypeError:
        return None  # a dimension name: not dim 0 of a batch of unnamed dims


def _dims(d: Any, ndim: int) -> list[int | None]:
    return [_dim(x, ndim) for x in (d if isinstance(d, (list, tuple)) else [d])]


def _is_input(call: Call, position: int = 0) -> bool:
    return _arg(call, position) is call.batch


def _rows(call: Call, same_ndim: bool = False) -> Any:
    """KEEP where every result's dim 0 has the batch's size (and, where asked, the
    batch's number of dims), else DROP: a check that the call's structure holds."""
    for t in call.results:
        shape = plain_shape(t)
        if not shape or shape[0] != call.size or (same_ndim and len(shape) != call.ndim):
            return DROP
    return KEEP


# -- the kinds of rule ------------------------------------------------------------------


def same(call: Call) -> Any:
    """A call of one tensor whose result has its shape, element by element or row by row
    (``exp``, ``relu``, ``clone``, ``tril``, ``dropout``)."""
    return KEEP


def elementwise(call: Call) -> Any:
    """Elementwise over broadcast arguments: the batch's rows stay in front unless
    broadcasting adds dims before them or repeats a batch of one."""
    return _rows(call, same_ndim=True)


def where(call: Call) -> Any:
    # (torch.where(cond) alone is nonzero: indices, not samples)
    return elementwise(call) if len(call.args) + len(call.kwargs) > 1 else DROP


def of_input(rule: Callable) -> Callable:
    """`rule` where the batch is the call's first argument; DROP where it is another
    (``t.view_as(b)`` holds t's values, not b's samples)."""

    def checked(call: Call) -> Any:
        return rule(call) if _is_input(call) else DROP

    checked.__name__ = checked.__doc__ = f"of_input({rule.__name__})"
    return checked


def row_major(call: Call) -> Any:
    """A reshape: the elements in their order, so a result whose dim 0 has the batch's
    size holds sample r in row r (``view``, ``reshape``, ``flatten``, ``squeeze``)."""
    return _rows(call)


def over_dims(position: int, default: Any = None, name: str = "dim") -> Callable:
    """A call over the dims of its argument at `position` (default `default`; None: every
    dim): KEEP unless dim 0 is among them (a reduction or scan over the samples)."""

    def rule(call: Call) -> Any:
        dim = _arg(call, position, default, name)
        if isinstance(dim, Tensor):  # torch.max(b, other) and the like
            return elementwise(call)
        if dim is None or isinstance(dim, bool) or dim == ():  # (std(b, True): every dim)
            return DROP
        if 0 in _dims(dim, call.ndim) or None in _dims(dim, call.ndim):
            return DROP
        return _rows(call)

    rule.__name__ = f"over_dims({position}, {default!r})"
    return rule


def batched(min_ndim: int) -> Callable:
    """A call whose dim 0 is a batch dim once its input has `min_ndim` dims (Linear on
    ≥2-D, conv2d on 4-D, a loss over (N, C)): KEEP there, else DROP (an unbatched
    input's dim 0 is channels or features)."""

    def rule(call: Call) -> Any:
        return _rows(call) if call.ndim >= min_ndim else DROP

    rule.__name__ = f"batched({min_ndim})"
    return rule


def leading(keep: Callable[[Call], bool]) -> Callable:
    """A call that moves dims: KEEP where `keep(call)` says dim 0 stays in front."""

    def rule(call: Call) -> Any:
        return _rows(call) if _is_input(call) and keep(call) else DROP

    rule.__name__ = f"leading({keep.__name__})"
    return rule


# -- dim-moving calls: does dim 0 stay in front? ----------------------------------------


def _permute(call: Call) -> bool:
    dims = call.args[1:] if len(call.args) > 2 else _arg(call, 1, None, "dims")
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return bool(dims) and _dim(dims[0], call.ndim) == 0


def _transpose(call: Call) -> bool:
    a, b = (
        _dim(_arg(call, 1, None, "dim0"), call.ndim),
        _dim(_arg(call, 2, None, "dim1"), call.ndim),
    )
    return (a == 0) == (b == 0) and a is not None and b is not None


def _movedim(call: Call) -> bool:
    src = _dims(_arg(call, 1, None, "source"), call.ndim)
    dst = _dims(_arg(call, 2, None, "destination"), call.ndim)
    if None in src or None in dst:
        return False
    if 0 in src:
        return dst[src.index(0)] == 0
    rest = [d for d in range(call.ndim) if d not in src]
    return 0 not in dst and rest[:1] == [0]


def _matrix_transpose(call: Call) -> bool:  # mT, mH, adjoint: the last two dims
    return call.ndim >= 3


def _transpose_2d(call: Call) -> bool:  # t(), T: a 1-D tensor's is itself
    return call.ndim < 2


def _pad(call: Call) -> bool:
    return len(_arg(call, 1, (), "pad")) // 2 < call.ndim


def _layer_norm(call: Call) -> bool:
    shape = _arg(call, 1, (), "normalized_shape")
    return len(shape if isinstance(shape, (list, tuple, torch.Size)) else [shape]) < call.ndim


def _scalar_q(call: Call) -> bool:
    q = _arg(call, 1, None, "q")
    return not isinstance(q, Tensor) or q.dim() == 0


def _nn_softmax(call: Call) -> Any:
    """F.softmax, softmin, log_softmax: with no dim, torch's implicit one (dim 0 for 0-,
    1- and 3-D inputs, else dim 1)."""
    dim = _arg(call, 1, None, "dim")
    if dim is None:
        dim = 0 if call.ndim in (0, 1, 3) else 1
    return DROP if _dim(dim, call.ndim) in (0, None) else _rows(call)


def _quantile(call: Call) -> Any:
    return over_dims(2)(call) if _scalar_q(call) else DROP


# -- permutations and selections of dim 0: the samples each row holds -------------------


def flip(call: Call) -> Any:
    dims = call.args[1:] if len(call.args) > 2 else _arg(call, 1, None, "dims")
    if 0 not in _dims(dims, call.ndim):
        return _rows(call)
    return list(range(call.size - 1, -1, -1))


def flipud(call: Call) -> Any:
    return list(range(call.size - 1, -1, -1))


def roll(call: Call) -> Any:
    shifts, dims = _arg(call, 1, None, "shifts"), _arg(call, 2, None, "dims")
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    if dims is None:
        if call.ndim != 1 or len(shifts) != 1:
            return DROP  # (rolled over the flattened elements)
        dims = [0]
    dims = _dims(dims, call.ndim)
    shift = sum(operator.index(s) for s, d in zip(shifts, dims) if d == 0)
    n = call.size
    return [(r - shift) % n for r in range(n)] if n else KEEP


def rot90(call: Call) -> Any:
    k = operator.index(_arg(call, 1, 1, "k")) % 4
    dims = _dims(_arg(call, 2, (0, 1), "dims"), call.ndim)
    if 0 not in dims or k == 0:
        return _rows(call)
    return list(range(call.size - 1, -1, -1)) if k == 2 else DROP


def _order_values_only(call: Call, dim: Any, index_of: Callable) -> Any:
    """sort/topk: over dim 0 of a 1-D batch the values are the samples they came from
    (the indices say which); the indices, ranks among all the samples, are not. Over dim
    0 of a larger batch each column is ordered apart: not a batch."""
    if 0 not in _dims(dim, call.ndim):
        return _rows(call)
    if call.ndim != 1:
        return DROP
    values, indices = call.results[0], call.results[1]
    with torch._C.DisableTorchFunctionSubclass():
        order = index_of(indices.as_subclass(Tensor)).tolist()
    return [order if t is values else DROP for t in call.results]


def sort(call: Call) -> Any:
    return _order_values_only(call, _arg(call, 1, -1, "dim"), lambda i: i)


def topk(call: Call) -> Any:
    return _order_values_only(call, _arg(call, 2, -1, "dim"), lambda i: i)


def _whole_rows(index: Tensor) -> list[int] | None:
    """The sample each row of `index` takes where every entry of a row names the same
    sample (a gather of whole rows); else None."""
    with torch._C.DisableTorchFunctionSubclass():
        index = index.as_subclass(Tensor)
        if index.dim() == 0:
            return None
        rows = index.reshape(index.shape[0], -1)
        if rows.shape[1] == 0 or not bool((rows == rows[:, :1]).all()):
            return None
        return rows[:, 0].tolist()


def gather(call: Call) -> Any:
    dim, index = _dim(_arg(call, 1, None, "dim"), call.ndim), _arg(call, 2, None, "index")
    if not isinstance(index, Tensor) or index.dim() != call.ndim:
        return DROP
    if dim != 0:
        return list(range(plain_shape(index)[0]))  # row r of the result: from sample r
    rows = _whole_rows(index)
    return DROP if rows is None else [r % call.size for r in rows]


def take_along_dim(call: Call) -> Any:
    indices, dim = _arg(call, 1, None, "indices"), _arg(call, 2, None, "dim")
    if dim is None or not isinstance(indices, Tensor) or indices.dim() != call.ndim:
        return DROP
    if _dim(dim, call.ndim) != 0:
        return _rows(call)
    rows = _whole_rows(indices)
    return DROP if rows is None else [r % call.size for r in rows]


def repeat(call: Call) -> Any:
    sizes = call.args[1:] if len(call.args) > 2 else _arg(call, 1, None, "repeats")
    sizes = list(sizes) if isinstance(sizes, (list, tuple, torch.Size)) else [sizes]
    if len(sizes) != call.ndim:
        return DROP  # (new dims in front)
    return list(range(call.size)) * operator.index(sizes[0])


def tile(call: Call) -> Any:
    sizes = _arg(call, 1, None, "dims")
    sizes = list(sizes) if isinstance(sizes, (list, tuple, torch.Size)) else [sizes]
    if len(sizes) > call.ndim:
        return DROP
    first = sizes[0] if len(sizes) == call.ndim else 1
    return list(range(call.size)) * operator.index(first)


def repeat_interleave(call: Call) -> Any:
    repeats, dim = _arg(call, 1, None, "repeats"), _arg(call, 2, None, "dim")
    if dim is None:
        return DROP  # (over the flattened elements)
    if _dim(dim, call.ndim) != 0:
        return _rows(call)
    if isinstance(repeats, Tensor):
        counts = repeats.tolist() if repeats.dim() else [int(repeats)] * call.size
    else:
        counts = [operator.index(repeats)] * call.size
    return [i for i, c in enumerate(counts) for _ in range(c)]


def _cat(call: Call) -> Any:
    """cat along another dim than 0: the rows of tensors of one length side by side (along
    dim 0, batches are joined by the rule of metadata.batch; anything else there is not one)."""
    if 0 in _dims(_arg(call, 1, 0, "dim"), call.ndim):
        return DROP
    return _rows(call, same_ndim=True)


def _stack(call: Call) -> Any:
    """stack along another dim than 0 (along dim 0, batches make a batch of steps:
    the handler of metadata.collation): row r stacks row r of each tensor, one sample's steps where
    every stacked tensor that carries metadata is a batch of the same samples (the same
    metadata); else rows hold several batches' samples, and that is not a batch."""
    if _dim(_arg(call, 1, 0, "dim"), call.ndim + 1) == 0:
        return DROP
    samples = call.batch.metadata
    for t in _arg(call, 0, ()):
        metadata = getattr(t, "metadata", None)
        if t is call.batch or metadata is None:
            continue  # (a plain tensor's rows join the samples', as in b + t)
        if getattr(t, "_batch_size", None) is None or metadata.keys() != samples.keys():
            return DROP
        if not all(same_value(metadata[key], samples[key]) for key in samples):
            return DROP
    return _rows(call)


def _sequence(call: Call) -> Any:
    """tensortools.ops.lltm_sequence(input T×B×F, ..., h0, c0): h_n and c_n have h0's
    rows; the output's dim 0 is time."""
    if call.batch is not _arg(call, 3) and call.batch is not _arg(call, 4):
        return DROP
    return [DROP, *([_rows(call)] * (len(call.results) - 1))]


def _matmul(first: int) -> Callable:
    """matmul and @ (the left operand at `first`): a 2-D batch on the left times a
    matrix or a vector (its rows), or a batch of matrices of ≥3 dims on either side."""

    def rule(call: Call) -> Any:
        left, right = _arg(call, first), _arg(call, 1 - first)
        if call.ndim == 2 and left is call.batch:
            other = right.dim() if isinstance(right, Tensor) else 0
            return _rows(call) if other <= 2 else DROP
        return _rows(call, same_ndim=True) if call.ndim >= 3 else DROP

    rule.__name__ = f"matmul(left={first})"
    return rule


def operand(positions: tuple, min_ndim: int = 1) -> Callable:
    """A call whose result's rows are those of its arguments at `positions` (``addmm``'s
    input and mat1, not mat2; ``F.linear``'s input, not its weight): KEEP where the
    batch is one of them with at least `min_ndim` dims."""

    def rule(call: Call) -> Any:
        if call.ndim < min_ndim or not any(_arg(call, p) is call.batch for p in positions):
            return DROP
        return _rows(call)

    rule.__name__ = f"operand({positions}, {min_ndim})"
    return rule


def _cdist(call: Call) -> Any:
    return operand((0,), 2)(call) if call.ndim == 2 else batched(3)(call)


def _diag_embed(call: Call) -> bool:
    new = _dims((_arg(call, 2, -2, "dim1"), _arg(call, 3, -1, "dim2")), call.ndim + 1)
    return 0 not in new


# -- the table: function -> rule ----------------------------------------------------------

_TORCH = (torch, Tensor)
_NN = (F,)


def _resolve(names: str, namespaces: Iterable) -> list[Callable]:
    found = []
    for name in names.split():
        for ns in namespaces:
            f = getattr(ns, name, None)
            if callable(f) and f not in found:
                found.append(f)
    return found


def _getters(names: str) -> list[Callable]:
    return [getattr(Tensor, n).__get__ for n in names.split()]


#: Shape-preserving calls of one tensor: always the samples in their order.
_SAME_NAMES = """
abs absolute acos arccos acosh arccosh angle asin arcsin asinh arcsinh atan arctan atanh
arctanh bitwise_not ceil conj conj_physical resolve_conj resolve_neg cos cosh deg2rad
digamma erf erfc erfinv exp exp2 expm1 fix floor frac i0 isfinite isinf isnan isneginf
isposinf isreal lgamma log log10 log1p log2 logical_not logit nan_to_num neg negative
positive rad2deg reciprocal round rsqrt sgn sigmoid sign signbit sin sinc sinh sqrt square
tan tanh trunc relu relu6 hardtanh elu selu celu gelu silu mish softplus softsign
tanhshrink hardshrink softshrink hardsigmoid hardswish leaky_relu logsigmoid threshold
rrelu clone detach contiguous float double half bfloat16 int long bool byte char short
cfloat cdouble cpu cuda requires_grad_ zeros_like ones_like empty_like full_like rand_like
randn_like randint_like tril triu polygamma mvlgamma frexp fliplr __neg__ __abs__
__invert__ __pos__ dropout alpha_dropout feature_alpha_dropout dropout1d dropout2d
dropout3d
"""
SAME: dict[Callable, Callable] = dict.fromkeys(
    [*_resolve(_SAME_NAMES, (*_TORCH, *_NN, torch.special)), *_getters("real imag data")],
    same,
)

#: Every other rule.
RULES: dict[Callable, Callable] = {}


def _add(names: str, rule: Callable, namespaces: Iterable = _TORCH) -> None:
    for f in _resolve(names, namespaces):
        RULES[f] = rule


_add(
    """add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow
    float_power atan2 arctan2 hypot maximum minimum fmax fmin eq ne lt le gt ge greater
    greater_equal less less_equal not_equal logical_and logical_or logical_xor bitwise_and
    bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift copysign nextafter ldexp
    xlogy lerp addcmul addcdiv clamp clip clamp_min clamp_max heaviside isclose polar
    complex igamma igammac logaddexp logaddexp2 masked_fill xlog1py zeta gcd lcm
    __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __div__
    __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ __rand__ __or__
    __ror__ __xor__ __rxor__ __lshift__ __rlshift__ __rshift__ __rrshift__ __eq__ __ne__
    __lt__ __le__ __gt__ __ge__ prelu""",
    elementwise,
    (*_TORCH, torch.special, F),
)
_add("where", where)
_add("cat concat concatenate", _cat)
_add("stack", _stack)
_add(
    """mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy
    binary_cross_entropy_with_logits soft_margin_loss kl_div poisson_nll_loss
    gaussian_nll_loss hinge_embedding_loss""",
    elementwise,
    _NN,
)
_add(
    """to type type_as masked_scatter index_fill index_add index_copy index_put scatter
    scatter_add scatter_reduce index_reduce put diagonal_scatter select_scatter
    slice_scatter""",
    of_input(elementwise),
)
_add(
    "view reshape flatten unflatten squeeze unsqueeze view_as reshape_as ravel atleast_1d "
    "atleast_2d atleast_3d view_as_real view_as_complex",
    of_input(row_major),
)
_add("expand expand_as broadcast_to", of_input(elementwise))

# Reductions, scans and calls over dims: (names, position of the dim, its default).
for _names, _position, _default in [
    (
        "sum nansum mean nanmean prod amax amin aminmax std var std_mean var_mean logsumexp "
        "any all count_nonzero median nanmedian argmax argmin max min cumsum cumprod cummax "
        "cummin logcumsumexp softmax log_softmax",
        1,
        None,
    ),
    ("mode argsort", 1, -1),
    ("norm cross", 2, None),
    ("kthvalue diff cumulative_trapezoid trapezoid trapz", 2, -1),
]:
    _add(_names, over_dims(_position, _default))
_add("unfold", over_dims(1, None, "dimension"))
_add("vector_norm norm", over_dims(2, None), (torch.linalg,))
_add("cross", over_dims(2, -1), (torch.linalg,))
_add("matrix_norm", over_dims(2, (-2, -1)), (torch.linalg,))
_add("softmax log_softmax softmin", _nn_softmax, _NN)
_add("glu", over_dims(1, -1), _NN)
_add("normalize cosine_similarity", over_dims(2, 1), _NN)
_add("gumbel_softmax", over_dims(4, -1), _NN)
_add("quantile nanquantile", _quantile)

# Calls that move dims: dim 0 must stay in front.
_add("permute", leading(_permute))
_add("transpose swapaxes swapdims", leading(_transpose))
_add("movedim moveaxis", leading(_movedim))
_add("adjoint", leading(_matrix_transpose))
_add("t", leading(_transpose_2d))
RULES.update(dict.fromkeys(_getters("mT mH"), leading(_matrix_transpose)))
RULES.update(dict.fromkeys(_getters("T H"), leading(_transpose_2d)))
_add(
    "diagonal",
    leading(lambda c: 0 not in _dims((_arg(c, 2, 0, "dim1"), _arg(c, 3, 1, "dim2")), c.ndim)),
)
_add("diag_embed", leading(_diag_embed))

# Permutations and selections of dim 0: each row carries its sample's metadata.
_add("flip", flip)
_add("flipud", flipud)
_add("roll", roll)
_add("rot90", rot90)
_add("sort", sort)
_add("topk", topk)
_add("gather", gather)
_add("take_along_dim", take_along_dim)
_add("repeat", repeat)
_add("tile", tile)
_add("repeat_interleave", repeat_interleave)

# Linear algebra: rows times a matrix, or batches of matrices.
_add("matmul __matmul__", _matmul(0))
_add("__rmatmul__", _matmul(1))
_add("mm mv outer ger", operand((0,)))
_add("inner", operand((0,), 2))
_add("bmm", operand((0, 1), 3))
_add("baddbmm", operand((0, 1, 2), 3))
_add("addmm addmv", operand((0, 1), 2))
_add("cdist", _cdist)
_add("det logdet slogdet inverse matrix_exp pinverse cholesky", operand((0,), 3))
_add(
    "det slogdet inv cholesky qr svd svdvals eigh eigvalsh eig eigvals pinv matrix_rank matrix_exp",
    operand((0,), 3),
    (torch.linalg,),
)

# Neural network calls: dim 0 is the batch once the input has a batch dim.
for _k in (1, 2, 3):
    _add(
        f"conv{_k}d conv_transpose{_k}d max_pool{_k}d avg_pool{_k}d adaptive_avg_pool{_k}d "
        f"adaptive_max_pool{_k}d lp_pool{_k}d max_pool{_k}d_with_indices "
        f"fractional_max_pool{_k}d",
        operand((0,), _k + 2),
        (torch, F),
    )
_add("batch_norm group_norm", operand((0,), 2), (torch, F))
_add("instance_norm local_response_norm channel_shuffle", operand((0,), 3), (torch, F))
_add("embedding one_hot", operand((0,)), _NN)  # (torch.embedding takes the weight first)
_add("linear", operand((0,), 2), _NN)
_add("bilinear pairwise_distance", operand((0, 1), 2), _NN)
_add("pixel_shuffle pixel_unshuffle unfold", operand((0,), 4), _NN)
_add("fold", operand((0,), 3), _NN)
_add("interpolate upsample upsample_nearest upsample_bilinear", operand((0,), 3), _NN)
_add("grid_sample", operand((0, 1), 4), _NN)
_add("affine_grid", operand((0,), 3), _NN)
_add("layer_norm rms_norm", leading(_layer_norm), (torch, F))
_add("pad", leading(_pad), _NN)
_add(
    "cross_entropy nll_loss multi_margin_loss multilabel_margin_loss "
    "multilabel_soft_margin_loss cosine_embedding_loss triplet_margin_loss "
    "triplet_margin_with_distance_loss",
    operand((0, 1), 2),
    _NN,
)
_add("scaled_dot_product_attention", operand((0, 1, 2), 3), _NN)


RULES.update(
    {
        ops.lltm: operand((0, 3, 4), 2),
        ops.axpby: elementwise,
        ops.fused_conv_bn2d: operand((0,), 4),
        ops.lltm_sequence: _sequence,
    }
)


def functions_for_the_compiled_path(structural: Iterable[Callable]) -> set[Callable]:
    """The functions whose calls with a batch the compiled path may run itself, keeping the
    batch: ``SAME`` (the shape-preserving calls of one tensor), less the `structural`
    rules' (taking batches apart, joining them). Every other call with a batch among its
    arguments takes the Python path, where the table decides: ``torch.ops`` packets and
    overloads and other libraries' functions too, which no list of torch's could name."""
    return set(SAME) - set(structural)


# -- applying it -------------------------------------------------------------------------


def verdict(call: Call) -> Any:
    """The table's verdict on `call`: KEEP, DROP, a list (the sample each row holds), or
    one of these per result (a list of them, in the order of ``call.results``)."""
    rule = SAME.get(call.func) or RULES.get(call.func)
    return DROP if rule is None else rule(call)


def first_carrier(tensors: list) -> Tensor | None:
    """The first of a call's argument tensors (argument_tensors) carrying metadata (whose
    metadata, and batch, results take)."""
    for a in tensors:
        if isinstance(a, MetadataTensor) and getattr(a, "metadata", None) is not None:
            return a
    return None


def settle(func: Callable, args: tuple, kwargs: dict, out: Any, tensors: list | None = None) -> Any:
    """Set the batch of `out` (results of the call, made batches by the wrap) to what the
    table says: kept, carried through the call's permutation, or dropped. tensors: the
    call's argument tensors, where the caller has them (else walked here)."""
    if issubclass(type(out), Tensor):
        leaves = [out] if getattr(out, "_batch_size", None) is not None else []
    else:
        leaves = [t for t in tree_leaves(out) if getattr(t, "_batch_size", None) is not None]
    if not leaves:
        return out
    inputs = argument_tensors(args, kwargs) if tensors is None else tensors
    results = [t for t in leaves if not any(t is a for a in inputs)]
    batch = first_carrier(inputs)
    if not results or batch is None or getattr(batch, "_batch_size", None) is None:
        return out
    shape = plain_shape(batch)
    call = Call(func, args, kwargs or {}, batch, len(shape), shape[0], results)
    found = verdict(call)
    each = found if _per_result(found, results) else [found] * len(results)
    for t, v in zip(results, each):
        shape = plain_shape(t)
        rows = shape[0] if shape else None
        if v is KEEP and rows == call.size:
            continue
        metadata = dict(batch.metadata or {})
        if _is_selection(v) and rows == len(v):
            give(t, metadata, call.size, v)
        else:
            t.metadata, t._batch_size = metadata, None
    return out


def _is_selection(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) for i in v)


def _per_result(found: Any, results: list) -> bool:
    return (
        isinstance(found, list)
        and len(found) == len(results)
        and len(results) > 1
        and all(v is KEEP or v is DROP or _is_selection(v) for v in found)
    )


# The table's rule for every call with a batch that no rule of metadata.batch takes (on the
# Python path), and the calls the compiled path may keep batches through itself.
register_batch_results(settle)
BATCH_CALLS.update(dict.fromkeys(functions_for_the_compiled_path(BATCH_RULES)))
