"""MetadataTensor, a tensor whose ``metadata`` dict follows it through any computation,
and its batches.

Its modules, each importing only those above it in this list:

- ``dicts``: the metadata dicts apart from the class: the merge policies, when two values
  are the same, what a batch holds (:func:`check_batch`);
- ``results``: how a call's results take metadata (which carriers' dicts, the batch size,
  a 0-d result holding no samples): the rules of ``csrc/python/metadata_results.h``,
  written once in C for the compiled path and the Python one;
- ``batch_index``: which samples ``batch[index]`` takes, for every index torch accepts;
- ``batch_verdict``: the words the batch rules are written in: a call with a batch, the
  verdicts on its results, the kinds of rule;
- ``batch_settle``: a call's batch record (one per function, in the registry
  :mod:`tensortools.dispatch.batch_rules`) applied to its results;
- ``tensor``: the class, its settings and pickling; its fallback runs a record that takes
  the call itself and settles every other call's results; ``MetadataTensor.batch_rule``
  registers a record beside the function it serves;
- ``batch``: batches: the records of the calls that take them apart along dim 0 or join
  them;
- ``collation``: building batches: ``torch.stack`` of samples (a handler of the class),
  :func:`collate` (registered with ``default_collate``) and :func:`decollate`; and
  ``torch.func.vmap`` over a batch, whose results mapped out at dim 0 are batches of its
  samples (put at vmap's boundary when imported);
- ``batch_moves``: the batch rule's rules for calls that move dims, and for permutations
  and selections of dim 0 (the sample each row holds);
- ``batch_rule``: the records of torch's calls that keep, move or drop a batch (those of
  ``tensortools.ops`` are registered beside the operators).
"""

from tensortools.types.metadata import (  # noqa: F401  (each registers its records)
    batch,
    batch_rule,
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
