"""Which of torch's calls keep a MetadataTensor batch: their records in the batch registry.

A call whose first metadata-carrying argument is a batch (see
:mod:`tensortools.types.metadata.batch`) gives batches only where its record knows that a
result's dim 0 holds the samples:

- in their order (``keep``): elementwise calls, reductions and scans over other dims,
  views that leave dim 0 in front, Linear, Conv, pooling, normalisation per sample, ...;
- through a permutation or selection the call makes of dim 0 (``flip``, ``roll``,
  ``sort`` of a 1-D batch, ``gather``/``take_along_dim`` of whole rows, ``repeat``, ...):
  each row then carries the metadata of the sample it holds.

A rule judges every argument that holds samples (each batch among the call's tensors,
``Call.samplers``), not the first alone: a result keeps the batch only where each of them
holds the same samples in the same rows and is passed where the call keeps rows as rows
(``kept_rows``' `rows`): ``b + b.flip(0)`` is not a batch, nor is ``b.scatter(0, idx, b)``,
whose source's rows go to other rows. In-place forms are judged as their out-of-place
forms (``batch_settle``).

Every other call drops the batch: its results keep the batch's metadata whole (one entry
per sample) with ``batch_size`` None. So does a call with a record when its arguments
leave the rule's ground (``torch.flip(b, [0])`` of a 2-D batch is a permutation, a
``torch.sort(b, dim=0)`` of one sorts each column apart and mixes the samples). A rule
reads only shapes and arguments, never a coincidence of sizes: ``b.T`` of a square batch
is not a batch.

Each row is one record of the batch registry (:mod:`tensortools.dispatch.batch_rules`),
registered by ``MetadataTensor.batch_rule``: the shape-preserving calls of one tensor
(``keep=True``) keep the batch whatever their arguments, so the compiled path may run
them; every other call with a batch reaches ``metadata.batch_settle`` on the Python path.
tensortools' own operators register their rows beside them (``tensortools/ops``). See
Note [Batch rules] in docs/design.md.

Its words (the call, the verdicts, the kinds of rule) are those of ``batch_verdict``,
its rules for calls that move dims or rows those of ``batch_moves``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tensortools.dispatch.batch_rules import Rows
from tensortools.types.metadata.batch_moves import (
    flip,
    flipud,
    front_after_diag_embed,
    front_after_diagonal,
    front_after_layer_norm,
    front_after_matrix_transpose,
    front_after_movedim,
    front_after_pad,
    front_after_permute,
    front_after_t,
    front_after_transpose,
    gather,
    repeat,
    repeat_interleave,
    roll,
    rot90,
    sort,
    take_along_dim,
    tile,
    topk,
)
from tensortools.types.metadata.batch_verdict import (
    ALL,
    DROP,
    KEEP,
    Call,
    argument_of,
    cdist,
    dim_of,
    dims_of,
    kept_rows,
    leading,
    matmul,
    nn_softmax,
    of_input,
    operand,
    over_dims,
    quantile,
    row_major,
    unchanged,
    where,
    written,
)
from tensortools.types.metadata.dicts import same_value
from tensortools.types.metadata.results import batch_size_of
from tensortools.types.metadata.tensor import MetadataTensor

__all__ = ["DROP", "KEEP"]


# -- the rules of calls on several batches ---------------------------------------------------


def _cat(call: Call) -> Any:
    """cat along another dim than 0: the rows of tensors of one length side by side (along
    dim 0, batches are joined by the rule of metadata.batch; anything else there is not one)."""
    if 0 in dims_of(argument_of(call, 1, 0, "dim"), call.ndim):
        return DROP
    return kept_rows(call, same_ndim=True, rows=ALL)


def _stack(call: Call) -> Any:
    """stack along another dim than 0 (along dim 0, batches make a batch of steps:
    the handler of metadata.collation): row r stacks row r of each tensor, one sample's steps where
    every stacked tensor that carries metadata is a batch of the same samples (the same
    metadata); else rows hold several batches' samples, and that is not a batch."""
    if dim_of(argument_of(call, 1, 0, "dim"), call.ndim + 1) == 0:
        return DROP
    samples = call.batch.metadata
    for t in argument_of(call, 0, ()):
        metadata = getattr(t, "metadata", None)
        if t is call.batch or metadata is None:
            continue  # (a plain tensor's rows join the samples', as in b + t)
        if batch_size_of(t) is None or metadata.keys() != samples.keys():
            return DROP
        if not all(same_value(metadata[key], samples[key]) for key in samples):
            return DROP
    return kept_rows(call, rows=ALL)


# -- the records: functions -> rule ---------------------------------------------------------

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
MetadataTensor.batch_rule(
    *_resolve(_SAME_NAMES, (*_TORCH, *_NN, torch.special)), *_getters("real imag data"), keep=True
)


def _add(names: str, rule: Any, namespaces: Iterable = _TORCH) -> None:
    MetadataTensor.batch_rule(*_resolve(names, namespaces))(rule)


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
    Rows(ALL),  # (elementwise, declared: the compiled path judges these calls too)
    (*_TORCH, torch.special, F),
)
_add("where", where)
_add("cat concat concatenate", _cat)
# (along dim 0: the class's handler of metadata.collation)
MetadataTensor.batch_rule(*_resolve("stack", _TORCH), by_handler=True)(_stack)
_add(
    """mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy
    binary_cross_entropy_with_logits soft_margin_loss kl_div poisson_nll_loss
    gaussian_nll_loss hinge_embedding_loss""",
    Rows(ALL),
    _NN,
)
_add("to type type_as expand expand_as broadcast_to", of_input(unchanged))
# Writes into a copy of the input: (the sources' positions, the dims' (position, name,
# default)); along dim 0 a source's rows go to other rows.
_add("index_fill put", written(()))
_add("masked_scatter", written((), rows=(0, 1)))  # (the mask: elementwise)
_add("index_put", written((), rows=(0, 1)))  # (the indices: masks made of the batch)
_add("index_add index_copy index_reduce", written((3,), (1, "dim", None)))
_add("scatter scatter_add scatter_reduce", written((2, 3), (1, "dim", None)))
_add("select_scatter", written((1,), (2, "dim", None)))
_add("slice_scatter", written((1,), (2, "dim", 0)))
_add("diagonal_scatter", written((1,), (3, "dim1", 0), (4, "dim2", 1)))
_add(
    "view reshape flatten unflatten squeeze unsqueeze view_as reshape_as ravel atleast_1d "
    "atleast_2d atleast_3d view_as_real view_as_complex",
    of_input(row_major),
)

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
_add("softmax log_softmax softmin", nn_softmax, _NN)
_add("glu", over_dims(1, -1), _NN)
_add("normalize cosine_similarity", over_dims(2, 1), _NN)
_add("gumbel_softmax", over_dims(4, -1), _NN)
_add("quantile nanquantile", quantile)

# Calls that move dims: dim 0 must stay in front.
_add("permute", leading(front_after_permute))
_add("transpose swapaxes swapdims", leading(front_after_transpose))
_add("movedim moveaxis", leading(front_after_movedim))
_add("adjoint", leading(front_after_matrix_transpose))
_add("t", leading(front_after_t))
MetadataTensor.batch_rule(*_getters("mT mH"))(leading(front_after_matrix_transpose))
MetadataTensor.batch_rule(*_getters("T H"))(leading(front_after_t))
_add("diagonal", leading(front_after_diagonal))
_add("diag_embed", leading(front_after_diag_embed))

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
_add("matmul __matmul__", matmul(0))
_add("__rmatmul__", matmul(1))
_add("mm mv outer ger", operand((0,)))
_add("inner", operand((0,), 2))
_add("bmm", operand((0, 1), 3))
_add("baddbmm", operand((0, 1, 2), 3))
_add("addmm addmv", operand((0, 1), 2))
_add("cdist", cdist)
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
_add("layer_norm rms_norm", leading(front_after_layer_norm), (torch, F))
_add("pad", leading(front_after_pad), _NN)
_add(
    "cross_entropy nll_loss multi_margin_loss multilabel_margin_loss "
    "multilabel_soft_margin_loss cosine_embedding_loss triplet_margin_loss "
    "triplet_margin_with_distance_loss",
    operand((0, 1), 2),
    _NN,
)
_add("scaled_dot_product_attention", operand((0, 1, 2), 3), _NN)
