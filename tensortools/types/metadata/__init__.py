"""MetadataTensor, a tensor whose ``metadata`` dict follows it through any computation,
and its batches.

Its modules, each importing only those above it in this list:

- ``dicts``: the metadata dicts apart from the class: the merge policies, when two values
  are the same, what a batch holds (:func:`check_batch`);
- ``results``: how a call's results take metadata (which carriers' dicts, the batch size,
  a 0-d result holding no samples): the rules of ``csrc/python/metadata_results.h``,
  written once in C for the compiled path and the Python one;
- ``batch_index``: which samples ``batch[index]`` takes, for every index torch accepts;
- ``tensor``: the class, its settings and pickling, and the tables through which the
  modules below give it their rules for batches (``BATCH_RULES``, ``BATCH_CALLS``,
  :func:`~tensortools.types.metadata.tensor.register_batch_results`);
- ``batch``: batches: the calls that take them apart along dim 0 or join them
  (registered on the class when imported);
- ``collation``: building batches: ``torch.stack`` of samples (a handler of the class),
  :func:`collate` (registered with ``default_collate``) and :func:`decollate`; and
  ``torch.func.vmap`` over a batch, whose results mapped out at dim 0 are batches of its
  samples (put at vmap's boundary when imported);
- ``batch_verdict``: the words the batch rule is written in: a call with a batch, the
  verdicts on its results, the kinds of rule;
- ``batch_moves``: the batch rule's rules for calls that move dims, and for permutations
  and selections of dim 0 (the sample each row holds);
- ``batch_rule``: which other calls keep a batch, as one table (the calls the compiled
  path keeps batches through registered on the class when imported);
- ``batch_settle``: the table applied to a call's results (registered on the class when
  imported).
"""

from tensortools.types.metadata import (  # noqa: F401  (each registers on the class)
    batch_settle,
    collation,
    dicts,
)
from tensortools.types.metadata.collation import collate, decollate
from tensortools.types.metadata.dicts import check_batch, metadata_of  # noqa: F401
from tensortools.types.metadata.tensor import MetadataTensor

#: The named merge policies (:meth:`MetadataTensor.set_merge_policy`); a callable taking
#: the list of dicts is accepted too.
MERGE_POLICIES = dicts.MERGE_POLICIES

__all__ = ["MetadataTensor", "MERGE_POLICIES", "collate", "decollate"]
